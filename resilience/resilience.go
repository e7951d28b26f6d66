// Package resilience guards the calls to one upstream server: a timeout
// for each attempt, retries with exponential backoff for calls that may be
// repeated, a circuit breaker that stops calling a server that keeps
// failing, a bulkhead that bounds the calls in flight, and an optional rate
// limit.
//
// Each caller has a circuit of its own. The failures that open one are
// those of the caller's own calls, and a caller can provoke them: a tool
// that fails on arguments crafted for it, or a query slow enough to time
// out. With one circuit for all, one tenant could stop every other
// tenant's calls to the server. For the same reason one caller may hold
// at most three quarters of the bulkhead and take at most three quarters
// of the rate: a tenant's slow or many calls leave room for the others'.
//
// It wraps failsafe-go's circuit breaker, bulkhead and rate limiter behind
// an API of its own, so that library's pre-1.0 API and its error values
// stay in this package; callers see [Rejected] and the errors of their own
// calls. The timeout and the retries are a context deadline and a loop
// here: failsafe-go's executor, which composes policies for any use, cost
// every call more than the three permits it asks for. It knows nothing
// else of interlock.
package resilience

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/failsafe-go/failsafe-go/bulkhead"
	"github.com/failsafe-go/failsafe-go/circuitbreaker"
	"github.com/failsafe-go/failsafe-go/ratelimiter"
)

// Config is what a [Guard] enforces. The zero value of a field means its
// default.
type Config struct {
	// Timeout bounds one attempt; 30s by default.
	Timeout time.Duration
	// Retries is how many times a call that may be repeated is tried
	// again after a transient failure; 2 by default, -1 for none.
	Retries int
	// Backoff is the delay before the first retry, doubling up to
	// MaxBackoff; 200ms and 5s by default.
	Backoff, MaxBackoff time.Duration
	// BreakerFailures consecutive failures of one caller's calls open
	// that caller's circuit; 10 by default. BreakerDelay later it lets one
	// call try (half-open); 60s by default.
	BreakerFailures uint
	BreakerDelay    time.Duration
	// MaxInFlight bounds concurrent calls; 100 by default. A call over the
	// bound, or over the share one caller may hold (MaxInFlight less a
	// quarter of it, rounded down), is rejected at once: there is no
	// queue.
	MaxInFlight uint
	// RatePerSecond, when positive, bounds calls per second, and one
	// caller's to three quarters of it (a call over either is rejected,
	// not delayed).
	RatePerSecond float64
}

// Defaults of [Config].
const (
	DefaultTimeout         = 30 * time.Second
	DefaultRetries         = 2
	DefaultBackoff         = 200 * time.Millisecond
	DefaultMaxBackoff      = 5 * time.Second
	DefaultBreakerFailures = 10
	DefaultBreakerDelay    = 60 * time.Second
	DefaultMaxInFlight     = 100
)

func (c Config) withDefaults() Config {
	if c.Timeout <= 0 {
		c.Timeout = DefaultTimeout
	}
	if c.Retries == 0 {
		c.Retries = DefaultRetries
	}
	if c.Backoff <= 0 {
		c.Backoff = DefaultBackoff
	}
	if c.MaxBackoff < c.Backoff {
		c.MaxBackoff = max(DefaultMaxBackoff, c.Backoff)
	}
	if c.BreakerFailures == 0 {
		c.BreakerFailures = DefaultBreakerFailures
	}
	if c.BreakerDelay <= 0 {
		c.BreakerDelay = DefaultBreakerDelay
	}
	if c.MaxInFlight == 0 {
		c.MaxInFlight = DefaultMaxInFlight
	}
	return c
}

// Reason says why a guard refused to make a call at all.
type Reason string

// The reasons a call is rejected.
const (
	CircuitOpen  Reason = "circuit_open"
	BulkheadFull Reason = "bulkhead_full"
	RateLimited  Reason = "rate_limited"
)

// Rejected is the error of a call the guard did not make. RetryAfter says
// when trying again may help (zero when unknown).
type Rejected struct {
	Reason     Reason
	RetryAfter time.Duration
}

func (r *Rejected) Error() string {
	return fmt.Sprintf("resilience: call rejected: %s", r.Reason)
}

// ErrTimeout is the error of an attempt that took longer than the
// timeout.
var ErrTimeout = errors.New("resilience: attempt timed out")

// Guard guards the calls to one upstream.
type Guard struct {
	cfg         Config
	mu          sync.RWMutex
	callers     map[string]*callerState
	bulkhead    bulkhead.Bulkhead[any]
	share       int64                        // of the bulkhead, one caller's
	limiter     ratelimiter.RateLimiter[any] // nil without a rate
	transient   func(error) bool
	onStateChan func(caller, state string)
}

// callerState is what a guard keeps of one caller: its circuit, its calls
// in flight, and when its share of the rate lets it call next.
type callerState struct {
	circuit  circuitbreaker.CircuitBreaker[any]
	inFlight atomic.Int64
	mu       sync.Mutex
	next     time.Time
}

// MaxCallers bounds the callers that have a circuit and shares of the
// bulkhead and the rate of their own; the callers beyond share those of
// [Others].
const MaxCallers = 1024

// Others names the caller that stands for the callers beyond
// [MaxCallers].
const Others = "(others)"

// New returns a guard. transient reports whether an error of a call is a
// failure of the server (it counts against the caller's circuit, and a
// repeatable call is retried) rather than an answer (a refusal of the
// caller's input, which proves the server works). onState, when not nil,
// hears a caller's circuit change state: "closed", "open" or "half-open".
func New(cfg Config, transient func(error) bool, onState func(caller, state string)) *Guard {
	cfg = cfg.withDefaults()
	g := &Guard{cfg: cfg, transient: transient, onStateChan: onState, callers: map[string]*callerState{},
		share: max(int64(cfg.MaxInFlight-cfg.MaxInFlight/4), 1)}
	g.bulkhead = bulkhead.New[any](cfg.MaxInFlight)
	if cfg.RatePerSecond > 0 {
		g.limiter = ratelimiter.NewSmoothWithMaxRate[any](g.period(1))
	}
	return g
}

// failure reports whether err is a failure of the server: it counts
// against the circuit, and a repeatable call is tried again.
func (g *Guard) failure(err error) bool {
	return err != nil && (errors.Is(err, ErrTimeout) || g.transient(err))
}

// stateOf returns what the guard keeps of the caller name, made on its
// first call with a closed circuit.
func (g *Guard) stateOf(name string) *callerState {
	g.mu.RLock()
	c, ok := g.callers[name]
	g.mu.RUnlock()
	if ok {
		return c
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if len(g.callers) >= MaxCallers {
		name = Others
	}
	if c, ok := g.callers[name]; ok {
		return c
	}
	c = &callerState{circuit: circuitbreaker.NewBuilder[any]().
		HandleIf(func(_ any, err error) bool { return g.failure(err) }).
		WithFailureThreshold(g.cfg.BreakerFailures).
		WithDelay(g.cfg.BreakerDelay).
		OnStateChanged(func(e circuitbreaker.StateChangedEvent) { g.stateChanged(name, e.NewState) }).
		Build()}
	g.callers[name] = c
	return c
}

// takeRate lets c call if its share of the rate and the rate allow it. A
// call the rate refuses leaves c's share as it was: the share is checked
// first and spent only with the rate's permit, so that refusals cannot use
// it up.
func (g *Guard) takeRate(c *callerState) error {
	if g.limiter == nil {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	now := time.Now()
	if now.Before(c.next) {
		return &Rejected{Reason: RateLimited, RetryAfter: c.next.Sub(now)}
	}
	if !g.limiter.TryAcquirePermit() {
		return &Rejected{Reason: RateLimited, RetryAfter: g.period(1)}
	}
	c.next = now.Add(g.period(0.75))
	return nil
}

// period is the time between two calls at share of the rate.
func (g *Guard) period(share float64) time.Duration {
	return time.Duration(float64(time.Second) / (share * g.cfg.RatePerSecond))
}

func (g *Guard) stateChanged(name string, s circuitbreaker.State) {
	if g.onStateChan == nil {
		return
	}
	switch s {
	case circuitbreaker.OpenState:
		g.onStateChan(name, "open")
	case circuitbreaker.HalfOpenState:
		g.onStateChan(name, "half-open")
	default:
		g.onStateChan(name, "closed")
	}
}

// Do makes the call fn for caller under the guard. repeatable says the
// call may be made more than once (a read-only or idempotent tool): only
// then is a transient failure retried, after a backoff that doubles, each
// attempt passing the rate limit and the bulkhead (and the caller's shares
// of them) and the caller's circuit again, with a timeout of its own. A
// call the guard does not make returns a [*Rejected]; an attempt over the timeout returns [ErrTimeout] (with the
// context fn saw cancelled); any other error is fn's own (the last
// attempt's, when retries ran out), or the context's when it ended while
// a retry waited.
func (g *Guard) Do(ctx context.Context, caller string, repeatable bool, fn func(ctx context.Context) error) error {
	c := g.stateOf(caller)
	retries := 0
	if repeatable && g.cfg.Retries > 0 {
		retries = g.cfg.Retries
	}
	delay := g.cfg.Backoff
	for attempt := 0; ; attempt++ {
		err := g.attempt(ctx, c, fn)
		var rejected *Rejected
		if attempt >= retries || !g.failure(err) || errors.As(err, &rejected) {
			return err
		}
		wait := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			wait.Stop()
			return ctx.Err()
		case <-wait.C:
		}
		delay = min(2*delay, g.cfg.MaxBackoff)
	}
}

// attempt makes one attempt of fn for c, if c's share of the rate, the
// rate, the bulkhead, c's share of it and c's circuit let it, in that
// order.
func (g *Guard) attempt(ctx context.Context, c *callerState, fn func(ctx context.Context) error) error {
	if err := g.takeRate(c); err != nil {
		return err
	}
	if !g.bulkhead.TryAcquirePermit() {
		return &Rejected{Reason: BulkheadFull, RetryAfter: time.Second}
	}
	defer g.bulkhead.ReleasePermit()
	defer c.inFlight.Add(-1)
	if c.inFlight.Add(1) > g.share {
		return &Rejected{Reason: BulkheadFull, RetryAfter: time.Second}
	}
	if !c.circuit.TryAcquirePermit() {
		return &Rejected{Reason: CircuitOpen, RetryAfter: c.circuit.RemainingDelay()}
	}
	actx, cancel := context.WithTimeoutCause(ctx, g.cfg.Timeout, ErrTimeout)
	err := fn(actx)
	if errors.Is(context.Cause(actx), ErrTimeout) && ctx.Err() == nil {
		err = ErrTimeout
	}
	cancel()
	c.circuit.RecordError(err)
	return err
}

// Reset closes every caller's circuit: a server that was started again
// has not failed yet, and its first calls must reach it.
func (g *Guard) Reset() {
	g.mu.RLock()
	defer g.mu.RUnlock()
	for _, c := range g.callers {
		if !c.circuit.IsClosed() {
			c.circuit.Close()
		}
	}
}

// State returns the state of caller's circuit: "closed", "open" or
// "half-open".
func (g *Guard) State(caller string) string {
	c := g.stateOf(caller).circuit
	switch {
	case c.IsOpen() && c.RemainingDelay() > 0:
		return "open"
	case c.IsOpen():
		// The delay is over: the next call is the half-open trial.
		return "half-open"
	case c.IsHalfOpen():
		return "half-open"
	}
	return "closed"
}
