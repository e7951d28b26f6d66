package gateway

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/interlock-mcp/interlock"
)

// How the shared link to an upstream that is down is restored: attempts
// in the background, the wait between them doubling from reconnectFirst
// to reconnectMax. A link that lived at least stableAfter counts as a
// recovery, and the next loss starts again from reconnectFirst; one that
// died sooner (a child that crashes on start, an upstream that flaps)
// makes the next loop start where the last one left off.
const (
	reconnectFirst = 500 * time.Millisecond
	reconnectMax   = 30 * time.Second
	stableAfter    = 30 * time.Second
)

// retryDelay is the wait before attempt n (from 0) of a reconnect loop.
func retryDelay(n int) time.Duration {
	d := reconnectFirst
	for range n {
		d *= 2
		if d >= reconnectMax {
			return reconnectMax
		}
	}
	return d
}

// retryUntil calls try until it succeeds or ctx ends, waiting
// retryDelay(n) before attempt n, n counting from first.
func retryUntil(ctx context.Context, first int, try func(context.Context) error) error {
	for n := first; ; n++ {
		t := time.NewTimer(retryDelay(n))
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
		if try(ctx) == nil {
			return nil
		}
	}
}

// errLinkDown marks the failure to make an upstream's shared link,
// which the gateway survives by retrying in the background, as opposed to
// a configuration error (two upstreams offering one tool name).
var errLinkDown = errors.New("upstream unreachable")

// unreachable wraps a failure to connect; its text stays that of err.
type unreachable struct{ err error }

func (e unreachable) Error() string   { return e.err.Error() }
func (e unreachable) Unwrap() []error { return []error{e.err, errLinkDown} }

// reconnectLater starts the background loop that restores the shared
// link, unless one runs or the gateway is closing. While it runs, calls
// wait for it (see connect) instead of each starting a child or dialling
// of its own. The caller holds u.mu.
func (u *upstream) reconnectLater() {
	if u.reconnecting || u.closed || u.life == nil {
		return
	}
	u.reconnecting = true
	first := u.quickDeaths
	go func() {
		_ = retryUntil(u.life, first, func(ctx context.Context) error {
			u.mu.Lock()
			defer u.mu.Unlock()
			if u.closed {
				return nil
			}
			if _, err := u.connectLocked(ctx); err != nil {
				u.log().Warn("upstream still unreachable; retrying in the background", "upstream", u.cfg.Name, "error", logText(err.Error()))
				return err
			}
			return nil
		})
		u.mu.Lock()
		u.reconnecting = false
		u.relink()
		u.mu.Unlock()
	}()
}

// lost records that the shared link, made at upSince, is gone, for the
// backoff of the loop that restores it. The caller holds u.mu.
func (u *upstream) lost(upSince time.Time) {
	if time.Since(upSince) >= stableAfter {
		u.quickDeaths = 0
	} else {
		u.quickDeaths++
	}
}

// connected reports whether the upstream's shared link is up.
func (u *upstream) connected() bool {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.session != nil
}

// Unreachable returns, by upstream name, why each upstream whose shared
// link is down could not be started or reached the last time it was
// tried: the command, the failure and the child's last lines on standard
// error. For the operator only: a client learns that the upstream is down,
// never why.
func (g *Gateway) Unreachable() map[string]string {
	out := map[string]string{}
	for _, u := range g.upstreams {
		u.mu.Lock()
		if u.session == nil && u.down != "" {
			out[u.cfg.Name] = u.down
		}
		u.mu.Unlock()
	}
	return out
}

// Probe checks that something the gateway needs answers: a store, a log.
type Probe struct {
	// Name says what it checks, for /readyz ("token store", "audit log").
	Name  string
	Check func(context.Context) error
}

// probeTimeout bounds each probe of a readiness check, so a store that
// hangs makes the gateway not ready rather than the check slow.
const probeTimeout = 2 * time.Second

// NotReady is one thing the gateway needs that is not ready, and why, in
// the gateway's words.
type NotReady struct {
	Name   string `json:"name"`
	Reason string `json:"reason"`
}

// Ready reports what keeps the gateway from serving every call: draining
// for shutdown, each upstream without a link, and each probe of
// [Options.Probes] that fails.
// Nothing when all is ready. The probes' errors go to the log.
func (g *Gateway) Ready(ctx context.Context) []NotReady {
	var out []NotReady
	g.inFlight.mu.Lock()
	draining := g.inFlight.draining
	g.inFlight.mu.Unlock()
	if draining {
		// A load balancer stops sending calls that would be refused.
		out = append(out, NotReady{Name: "gateway", Reason: "shutting down"})
	}
	for _, u := range g.upstreams {
		if !u.connected() {
			out = append(out, NotReady{Name: "upstream " + u.cfg.Name, Reason: "not connected; retrying in the background"})
		}
	}
	for _, p := range g.probes {
		pctx, cancel := context.WithTimeout(ctx, probeTimeout)
		err := p.Check(pctx)
		cancel()
		if err != nil {
			g.log.Warn("readiness probe failed", "probe", p.Name, "error", logText(err.Error()))
			out = append(out, NotReady{Name: p.Name, Reason: "does not answer"})
		}
	}
	return out
}

// inFlight counts the tool calls, REST requests and reads passed on to the
// upstreams being served, so that a gateway shutting down can let them
// finish (see [Gateway.Drain]).
type inFlight struct {
	mu       sync.Mutex
	n        int
	draining bool
	idle     chan struct{} // closed when n falls to 0 while draining
}

// enter counts a call in; false once the gateway drains, when no call may
// start.
func (f *inFlight) enter() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.draining {
		return false
	}
	f.n++
	return true
}

func (f *inFlight) leave() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.n--
	if f.n == 0 && f.idle != nil {
		close(f.idle)
		f.idle = nil
	}
}

// Drain refuses every tool call, REST request and read of resources and
// prompts from now on (UPSTREAM_UNAVAILABLE, retriable: nothing ran; 503
// on the REST face; a JSON-RPC error for a read) and waits until those in
// flight have ended, or ctx has. Upstreams keep running until
// [Gateway.Close].
func (g *Gateway) Drain(ctx context.Context) error {
	f := &g.inFlight
	f.mu.Lock()
	f.draining = true
	if f.n == 0 {
		f.mu.Unlock()
		return nil
	}
	if f.idle == nil {
		f.idle = make(chan struct{})
	}
	idle := f.idle
	f.mu.Unlock()
	select {
	case <-idle:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("draining tool calls: %w", ctx.Err())
	}
}

// errDraining answers a tool call or a REST request that arrives while the
// gateway shuts down.
var errDraining = &interlock.Error{
	Code:    interlock.CodeUpstreamUnavailable,
	Message: "The gateway is shutting down; nothing ran.",
	Hint:    "Retry in a few seconds, against a gateway that is running.",
}
