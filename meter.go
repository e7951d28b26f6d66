package interlock

import "time"

// CallStats is what the gate reports of each call to a [Meter], once the
// call has ended.
type CallStats struct {
	Tool, Upstream, Mode string
	// Decision and Outcome are as the call's audit record names them;
	// ConfirmedBy too.
	Decision, Outcome, ConfirmedBy string
	// Budget names the budget that refused the call; empty otherwise.
	Budget string
	// Took is the whole call through the gate; Ran the part spent running
	// the tool (zero when it did not run).
	Took, Ran time.Duration
}

// Meter receives the statistics of every call, for metrics. Package
// metrics implements it with Prometheus. ObserveCall must not block.
type Meter interface {
	ObserveCall(CallStats)
}
