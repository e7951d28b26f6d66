package resilience

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

var (
	errDown   = errors.New("connection refused") // transient
	errRefuse = errors.New("invalid arguments")  // an answer
)

func transient(err error) bool { return errors.Is(err, errDown) }

func TestRetriesOnlyRepeatableCalls(t *testing.T) {
	tests := []struct {
		name       string
		repeatable bool
		err        error
		wantCalls  int64
	}{
		{"repeatable, transient: retried", true, errDown, 3},
		{"repeatable, an answer: not retried", true, errRefuse, 1},
		{"not repeatable, transient: never retried", false, errDown, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				g := New(Config{}, transient, nil)
				var calls atomic.Int64
				start := time.Now()
				err := g.Do(context.Background(), "acme", tt.repeatable, func(context.Context) error {
					calls.Add(1)
					return tt.err
				})
				if !errors.Is(err, tt.err) || calls.Load() != tt.wantCalls {
					t.Errorf("err %v after %d calls, want %v after %d", err, calls.Load(), tt.err, tt.wantCalls)
				}
				if tt.wantCalls == 3 {
					// Backoff: 200ms, then 400ms.
					if waited := time.Since(start); waited != 600*time.Millisecond {
						t.Errorf("retries waited %v, want 600ms of backoff", waited)
					}
				}
			})
		})
	}
}

func TestRetrySucceedsAfterAFailure(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := New(Config{}, transient, nil)
		var calls atomic.Int64
		err := g.Do(context.Background(), "acme", true, func(context.Context) error {
			if calls.Add(1) == 1 {
				return errDown
			}
			return nil
		})
		if err != nil || calls.Load() != 2 {
			t.Errorf("err %v after %d calls", err, calls.Load())
		}
	})
}

func TestBreaker(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var mu sync.Mutex
		var states []string
		g := New(Config{Retries: -1}, transient, func(_, s string) { mu.Lock(); states = append(states, s); mu.Unlock() })
		fail := func(context.Context) error { return errDown }
		for range 9 {
			g.Do(context.Background(), "acme", false, fail)
		}
		if g.State("acme") != "closed" {
			t.Fatalf("open after 9 failures")
		}
		// An answer (not transient) proves the server works: it resets
		// the count of consecutive failures.
		g.Do(context.Background(), "acme", false, func(context.Context) error { return errRefuse })
		for range 9 {
			g.Do(context.Background(), "acme", false, fail)
		}
		if g.State("acme") != "closed" {
			t.Fatalf("an answer did not reset the failure count")
		}
		g.Do(context.Background(), "acme", false, fail)
		if g.State("acme") != "open" {
			t.Fatalf("state %s after 10 consecutive failures", g.State("acme"))
		}
		ran := false
		err := g.Do(context.Background(), "acme", false, func(context.Context) error { ran = true; return nil })
		var r *Rejected
		if !errors.As(err, &r) || r.Reason != CircuitOpen || r.RetryAfter != 60*time.Second || ran {
			t.Fatalf("open circuit: err %v, ran %v", err, ran)
		}
		time.Sleep(30 * time.Second)
		if errors.As(g.Do(context.Background(), "acme", false, fail), &r); r.RetryAfter != 30*time.Second {
			t.Errorf("retry after %v half-way through the delay", r.RetryAfter)
		}
		time.Sleep(30 * time.Second)
		if g.State("acme") != "half-open" {
			t.Fatalf("state %s after the delay", g.State("acme"))
		}
		if err := g.Do(context.Background(), "acme", false, func(context.Context) error { return nil }); err != nil || g.State("acme") != "closed" {
			t.Errorf("a success when half-open: %v, state %s", err, g.State("acme"))
		}
		mu.Lock()
		defer mu.Unlock()
		if len(states) != 3 || states[0] != "open" || states[1] != "half-open" || states[2] != "closed" {
			t.Errorf("state changes = %v", states)
		}
	})
}

func TestTimeoutPerAttempt(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := New(Config{Timeout: time.Second, Retries: -1}, transient, nil)
		start := time.Now()
		err := g.Do(context.Background(), "acme", false, func(ctx context.Context) error {
			<-ctx.Done()
			return ctx.Err()
		})
		if !errors.Is(err, ErrTimeout) || time.Since(start) != time.Second {
			t.Errorf("err %v after %v", err, time.Since(start))
		}
	})
}

// TestBulkhead: a full bulkhead refuses at once (there is no queue), and
// one caller holds at most three quarters of it, so another caller's call
// still runs.
func TestBulkhead(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := New(Config{MaxInFlight: 4}, transient, nil)
		release := make(chan struct{})
		var wg sync.WaitGroup
		hold := func(caller string) {
			wg.Go(func() {
				g.Do(context.Background(), caller, false, func(context.Context) error { <-release; return nil })
			})
			synctest.Wait()
		}
		ran := false
		run := func(context.Context) error { ran = true; return nil }
		for range 3 {
			hold("mallory")
		}
		var r *Rejected
		if err := g.Do(context.Background(), "mallory", false, run); !errors.As(err, &r) || r.Reason != BulkheadFull || ran {
			t.Errorf("the fourth call of one caller: %v, ran %v", err, ran)
		}
		hold("acme")
		if err := g.Do(context.Background(), "acme", false, run); !errors.As(err, &r) || r.Reason != BulkheadFull || ran {
			t.Errorf("a call with the bulkhead full: %v, ran %v", err, ran)
		}
		close(release)
		wg.Wait()
		if err := g.Do(context.Background(), "mallory", false, run); err != nil || !ran {
			t.Errorf("once the calls finished: %v, ran %v", err, ran)
		}
	})
}

// TestRateLimit: a call over the rate is refused at once, and one caller
// takes at most three quarters of the rate, so another caller's calls
// still run however fast the first one calls.
func TestRateLimit(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := New(Config{RatePerSecond: 4}, transient, nil)
		ok := func(context.Context) error { return nil }
		if err := g.Do(context.Background(), "acme", false, ok); err != nil {
			t.Fatal(err)
		}
		var r *Rejected
		if err := g.Do(context.Background(), "acme", false, ok); !errors.As(err, &r) || r.Reason != RateLimited || r.RetryAfter != time.Second/3 {
			t.Errorf("second call at once: %v", err)
		}
		time.Sleep(time.Second)
		// mallory calls every 10ms, acme every 100ms, never at the same
		// instant, for three seconds: 12 calls at the rate.
		ran := map[string]int{}
		var mu sync.Mutex
		var wg sync.WaitGroup
		for _, c := range []struct {
			name         string
			start, every time.Duration
		}{{"mallory", 0, 10 * time.Millisecond}, {"acme", 5 * time.Millisecond, 100 * time.Millisecond}} {
			wg.Go(func() {
				time.Sleep(c.start)
				for end := time.Now().Add(3 * time.Second); time.Now().Before(end); time.Sleep(c.every) {
					if g.Do(context.Background(), c.name, false, ok) == nil {
						mu.Lock()
						ran[c.name]++
						mu.Unlock()
					}
				}
			})
		}
		wg.Wait()
		if ran["mallory"] > 10 || ran["acme"] < 2 || ran["mallory"]+ran["acme"] > 13 {
			t.Errorf("calls that ran in three seconds: %v", ran)
		}
	})
}

// TestResetClosesTheCircuit: a server started again gets its calls at
// once, whatever the state its predecessor left the circuit in.
func TestResetClosesTheCircuit(t *testing.T) {
	for _, tc := range []struct {
		name     string
		failures int
		before   string
	}{
		{"open", 10, "open"},
		{"closed", 3, "closed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := New(Config{Retries: -1}, transient, nil)
			for range tc.failures {
				g.Do(context.Background(), "acme", false, func(context.Context) error { return errDown })
			}
			if g.State("acme") != tc.before {
				t.Fatalf("state %s before the reset, want %s", g.State("acme"), tc.before)
			}
			g.Reset()
			ran := false
			if err := g.Do(context.Background(), "acme", false, func(context.Context) error { ran = true; return nil }); err != nil || !ran {
				t.Errorf("after the reset: err %v, ran %v", err, ran)
			}
			if g.State("acme") != "closed" {
				t.Errorf("state %s after the reset", g.State("acme"))
			}
		})
	}
}

// TestCircuitPerCaller: the failures of one caller's calls open its own
// circuit, not another caller's, and callers beyond MaxCallers share one.
func TestCircuitPerCaller(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var mu sync.Mutex
		changed := map[string]string{}
		g := New(Config{Retries: -1}, transient, func(caller, s string) { mu.Lock(); changed[caller] = s; mu.Unlock() })
		for range 10 {
			g.Do(context.Background(), "mallory", false, func(context.Context) error { return errDown })
		}
		var r *Rejected
		if err := g.Do(context.Background(), "mallory", false, func(context.Context) error { return nil }); !errors.As(err, &r) || r.Reason != CircuitOpen {
			t.Fatalf("the failing caller's next call: %v", err)
		}
		ran := false
		if err := g.Do(context.Background(), "acme", false, func(context.Context) error { ran = true; return nil }); err != nil || !ran {
			t.Errorf("another caller's call: err %v, ran %v", err, ran)
		}
		if g.State("acme") != "closed" || changed["mallory"] != "open" || changed["acme"] != "" {
			t.Errorf("states: acme %s; changes %v", g.State("acme"), changed)
		}
		g.Reset()
		if g.State("mallory") != "closed" {
			t.Errorf("after a reset, mallory's circuit is %s", g.State("mallory"))
		}

		for i := range MaxCallers {
			g.Do(context.Background(), fmt.Sprint("caller ", i), false, func(context.Context) error { return nil })
		}
		for range 10 {
			g.Do(context.Background(), "one too many", false, func(context.Context) error { return errDown })
		}
		if g.State("yet another") != "open" || g.State(Others) != "open" || changed[Others] != "open" {
			t.Errorf("callers beyond the bound: %s, %v", g.State("yet another"), changed[Others])
		}
	})
}
