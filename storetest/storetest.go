// Package storetest checks that a token store and a budget store keep the
// gate's rules. A confirm token is live only until its expiry and only
// while it is its binding's newest, and is consumed exactly once. A
// budget counts calls in a sliding window and says how long until it has
// room, counts a call under several budgets in all of them or in none,
// naming the one with the longest wait, refuses takes no policy makes,
// and never lets more calls run than its limit, however many gateways
// race for it.
//
// Every race is tried from two handles on one store, as two gateways
// sharing it would, and [TokensAcrossProcesses] and
// [BudgetsAcrossProcesses] race from two processes, so a store that
// serialises only within one process fails.
package storetest

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/interlock-mcp/interlock"
	"github.com/interlock-mcp/interlock/budget"
	"github.com/interlock-mcp/interlock/internal/testproc"
)

// OpenTokens returns two handles on one fresh, empty token store (two
// gateways sharing it); they may be the same value for a store of one
// process.
type OpenTokens func(t *testing.T) (interlock.TokenStore, interlock.TokenStore)

// OpenBudgets returns two handles on one fresh, empty budget store.
type OpenBudgets func(t *testing.T) (interlock.BudgetStore, interlock.BudgetStore)

// Options says how a store keeps time.
type Options struct {
	// Synctest is set for a store that reads time.Now: its checks of
	// time then run in a synctest bubble, where time is fake, and every
	// wait and expiry is checked to the nanosecond; open is called in
	// the bubble. A store with a clock of its own, such as a Redis
	// server's, leaves it unset: those checks run on real time, ten
	// minutes of the bubble's becoming 100 ms, and a wait may be off by
	// as much as the check fell behind its schedule, and 2 ms more for a
	// store that counts in milliseconds; a check that fell behind by half
	// a unit and failed is run again.
	Synctest bool
}

// Both is what a conformance suite of any store opens, made from open,
// which opens two handles on one fresh store: the view of of on each.
func Both[H, S any](open func(*testing.T) (H, H), of func(H) S) func(*testing.T) (S, S) {
	return func(t *testing.T) (S, S) {
		a, b := open(t)
		return of(a), of(b)
	}
}

// clock is the time of one check: fake, or real and scaled down.
type clock struct {
	fake bool
	// unit is ten minutes of the bubble, or 100 ms of real time.
	unit  time.Duration
	start time.Time
	// slept is how long the check meant to sleep so far.
	slept time.Duration
	// excused are the failures of a check on real time that came after
	// it fell behind its schedule by half a unit (see errorf).
	excused []string
}

// timed runs fn in a bubble when o.Synctest, else on real time. A check
// on real time whose failures were all excused, having fallen behind its
// schedule on a loaded machine, is run again on a fresh store, up to five
// times; a failure that comes while it keeps its schedule fails at once.
func timed(t *testing.T, o Options, fn func(t *testing.T, c *clock)) {
	t.Helper()
	if o.Synctest {
		synctest.Test(t, func(t *testing.T) { fn(t, &clock{fake: true, unit: 10 * time.Minute, start: time.Now()}) })
		return
	}
	for try := 1; ; try++ {
		c := &clock{unit: 100 * time.Millisecond, start: time.Now()}
		fn(t, c)
		if len(c.excused) == 0 || t.Failed() {
			return
		}
		if try == 5 {
			t.Errorf("each of %d runs fell behind its schedule by half a unit and failed; the last: %s", try, strings.Join(c.excused, "; "))
			return
		}
		t.Logf("run %d fell %v behind its schedule, which excuses: %s; running it again", try, c.behind().Round(time.Millisecond), strings.Join(c.excused, "; "))
	}
}

// behind is how far a check on real time has fallen behind its schedule.
func (c *clock) behind() time.Duration { return time.Since(c.start) - c.slept }

// errorf fails t, unless the check is on real time and has fallen behind
// its schedule by half a unit or more: then a window may have moved on
// under it (the tightest expectation, a call leaving a unit after the one
// before, holds only while the check is less than a unit late), the
// failure says nothing of the store, and timed runs the check again.
func (c *clock) errorf(t *testing.T, format string, args ...any) {
	t.Helper()
	if !c.fake && c.behind() >= c.unit/2 {
		c.excused = append(c.excused, fmt.Sprintf(format, args...))
		return
	}
	t.Errorf(format, args...)
}

func (c *clock) sleep(d time.Duration) {
	c.slept += d
	time.Sleep(d)
}

// near reports whether a wait is want: exactly on fake time, else within
// how far the check fell behind its schedule.
func (c *clock) near(got, want time.Duration) bool {
	if c.fake {
		return got == want
	}
	slack := time.Since(c.start) - c.slept + 2*time.Millisecond
	return got >= want-slack && got <= want+slack
}

// justBefore is the latest a check can look and still be before d has
// passed: a nanosecond before on fake time, two units before on real.
func (c *clock) justBefore(d time.Duration) time.Duration {
	if c.fake {
		return d - time.Nanosecond
	}
	return d - 2*c.unit
}

// justAfter is the soonest a check can look and be sure d has passed.
func (c *clock) justAfter(d time.Duration) time.Duration {
	if c.fake {
		return d
	}
	return d + c.unit/2
}

// RunTokens runs the token store's conformance tests.
func RunTokens(t *testing.T, open OpenTokens, o Options) {
	ctx := context.Background()
	issue := func(t *testing.T, s interlock.TokenStore, binding, nonce string, ttl time.Duration) {
		t.Helper()
		if err := s.Issue(ctx, binding, nonce, ttl); err != nil {
			t.Fatal(err)
		}
	}
	consume := func(t *testing.T, s interlock.TokenStore, binding, nonce string) bool {
		t.Helper()
		ok, err := s.Consume(ctx, binding, nonce)
		if err != nil {
			t.Fatal(err)
		}
		return ok
	}
	// The cases issue on the first handle and mostly consume on the
	// second, as two gateways would. A step is "H issue BINDING NONCE",
	// for a minute, or "H issue BINDING NONCE UNITS", for that many units
	// of the clock; "H consume BINDING NONCE"; "sleep UNITS", or "sleep
	// before UNITS" or "sleep after UNITS", to just before or just after
	// that many have passed. H is s, the first handle, or r, the second;
	// want is what the consumes answered, in order.
	tests := []struct {
		name  string
		steps []string
		want  string
	}{
		{"issued token consumes", []string{"s issue b n1", "r consume b n1"}, "true"},
		{"consumes on the issuing handle", []string{"s issue b n1", "s consume b n1"}, "true"},
		{"second consume fails", []string{"s issue b n1", "r consume b n1", "s consume b n1"}, "true false"},
		{"superseded nonce fails", []string{"s issue b n1", "r issue b n2", "s consume b n1"}, "false"},
		{"a failed consume leaves the live token", []string{"s issue b n2", "r consume b n1", "r consume b n2"}, "false true"},
		{"other binding", []string{"s issue b n1", "r consume c n1"}, "false"},
		{"live until its expiry", []string{"s issue b n1 6", "sleep before 6", "r consume b n1"}, "true"},
		{"expired", []string{"s issue b n1 6", "sleep after 6", "r consume b n1"}, "false"},
		{"a reissue restarts the time", []string{"s issue b n1 6", "sleep 4", "s issue b n1 6", "sleep 4", "r consume b n1"}, "true"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			timed(t, o, func(t *testing.T, c *clock) {
				handles := map[string]interlock.TokenStore{}
				handles["s"], handles["r"] = open(t)
				units := func(n string) time.Duration {
					u, err := strconv.Atoi(n)
					if err != nil {
						t.Fatalf("bad step: %v", err)
					}
					return time.Duration(u) * c.unit
				}
				var got []string
				for _, step := range tt.steps {
					switch f := strings.Fields(step); {
					case len(f) == 2 && f[0] == "sleep":
						c.sleep(units(f[1]))
					case len(f) == 3 && f[1] == "before":
						c.sleep(c.justBefore(units(f[2])))
					case len(f) == 3 && f[1] == "after":
						c.sleep(c.justAfter(units(f[2])))
					case len(f) >= 4 && f[1] == "issue":
						ttl := time.Minute
						if len(f) == 5 {
							ttl = units(f[4])
						}
						issue(t, handles[f[0]], f[2], f[3], ttl)
					case len(f) == 4 && f[1] == "consume":
						got = append(got, fmt.Sprint(consume(t, handles[f[0]], f[2], f[3])))
					default:
						t.Fatalf("bad step %q", step)
					}
				}
				if g := strings.Join(got, " "); g != tt.want {
					c.errorf(t, "Consume = %s, want %s", g, tt.want)
				}
			})
		})
	}

	t.Run("consumed exactly once across handles", func(t *testing.T) {
		s, other := open(t)
		issue(t, s, "b", "n1", time.Minute)
		if won := testproc.AtOnce(t, 1000, s, other, func(h interlock.TokenStore, _ int) (bool, error) { return h.Consume(ctx, "b", "n1") }); won != 1 {
			t.Errorf("of 1,000 consumes at once %d won, want 1", won)
		}
	})
}

// RunBudgets runs the budget store's conformance tests.
func RunBudgets(t *testing.T, open OpenBudgets, o Options) {
	ctx := context.Background()
	type answer struct {
		ok    bool
		wait  time.Duration
		spent int
	}
	// check fails the test unless the store answered want, with its wait
	// near want's.
	check := func(t *testing.T, c *clock, what string, want answer, ok bool, wait time.Duration, spent int, err error) {
		t.Helper()
		if err != nil {
			t.Errorf("%s: %v", what, err)
		} else if ok != want.ok || spent != want.spent || !c.near(wait, want.wait) {
			c.errorf(t, "%s = %v, %v, %d; want %v, %v, %d", what, ok, wait, spent, want.ok, want.wait, want.spent)
		}
	}

	t.Run("a window slides", func(t *testing.T) {
		timed(t, o, func(t *testing.T, c *clock) {
			b, other := open(t)
			u, k := c.unit, one("k", 3, 6*c.unit)
			take := func(want answer) {
				t.Helper()
				ok, wait, spent, err := b.Take(ctx, k)
				check(t, c, "Take", want, ok, wait, spent, err)
			}
			for i := range 3 {
				ok, wait, spent, err := other.Peek(ctx, k)
				check(t, c, "Peek, which counts nothing,", answer{true, 0, 0}, ok, wait, spent, err)
				take(answer{true, 0, 0})
				if i < 2 {
					c.sleep(u)
				}
			}
			// The first call leaves the window six units after it ran.
			take(answer{false, 4 * u, 0})
			ok, wait, spent, err := other.Peek(ctx, k)
			check(t, c, "Peek on the other handle", answer{false, 4 * u, 0}, ok, wait, spent, err)
			ok, wait, spent, err = other.Peek(ctx, one("other", 3, 6*u))
			check(t, c, "Peek of another key", answer{true, 0, 0}, ok, wait, spent, err)
			if c.fake {
				c.sleep(4*u - time.Nanosecond)
				take(answer{false, time.Nanosecond, 0})
				c.sleep(time.Nanosecond)
			} else {
				c.sleep(4 * u)
				// A store counting in milliseconds may see the call
				// leave a millisecond late.
				time.Sleep(5 * time.Millisecond)
			}
			take(answer{true, 0, 0})
			// The second call, a unit after the first, leaves next.
			take(answer{false, u, 0})
		})
	})

	t.Run("all or none", func(t *testing.T) {
		tests := []struct {
			name string
			// full are the keys filled 1.5 units before the take, under
			// a limit of 1 per their take's window.
			full []string
			// takes' windows are in units, want's wait in half units.
			takes  []spec
			want   answer
			counts map[string]int
		}{
			{"both with room", nil, []spec{{"a", 2, 6}, {"b", 2, 6}}, answer{true, 0, 0}, map[string]int{"a": 1, "b": 1}},
			{"the second spent", []string{"b"}, []spec{{"a", 2, 6}, {"b", 1, 6}}, answer{false, 9, 1}, map[string]int{"a": 0, "b": 1}},
			{"the first spent", []string{"a"}, []spec{{"a", 1, 6}, {"b", 2, 6}}, answer{false, 9, 0}, map[string]int{"a": 1, "b": 0}},
			{"three with room", nil, []spec{{"a", 2, 6}, {"b", 2, 6}, {"c", 2, 6}}, answer{true, 0, 0},
				map[string]int{"a": 1, "b": 1, "c": 1}},
			{"three, two spent: the longest wait", []string{"a", "long"}, []spec{{"a", 1, 6}, {"b", 2, 6}, {"long", 1, 12}},
				answer{false, 21, 2}, map[string]int{"a": 1, "b": 0, "long": 1}},
			{"three, the middle spent", []string{"b"}, []spec{{"a", 2, 6}, {"b", 1, 6}, {"c", 2, 6}}, answer{false, 9, 1},
				map[string]int{"a": 0, "b": 1, "c": 0}},
			{"none", nil, nil, answer{true, 0, 0}, nil},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				timed(t, o, func(t *testing.T, c *clock) {
					b, other := open(t)
					takes := takesOf(tt.takes, c.unit)
					windows := map[string]time.Duration{}
					for _, tk := range takes {
						windows[tk.Key] = tk.Window
					}
					for _, k := range tt.full {
						if ok, _, _, err := b.Take(ctx, one(k, 1, windows[k])); !ok || err != nil {
							t.Fatal(ok, err)
						}
					}
					c.sleep(3 * c.unit / 2)
					want := tt.want
					want.wait = want.wait * c.unit / 2
					ok, wait, spent, err := other.Peek(ctx, takes)
					check(t, c, "Peek", want, ok, wait, spent, err)
					ok, wait, spent, err = b.Take(ctx, takes)
					check(t, c, "Take", want, ok, wait, spent, err)
					for k, n := range tt.counts {
						if got := count(t, other, k, windows[k]); got != n {
							c.errorf(t, "key %s holds %d calls, want %d", k, got, n)
						}
					}
				})
			})
		}
	})

	t.Run("takes no policy makes are refused", func(t *testing.T) {
		tests := []struct {
			name  string
			takes []spec
		}{
			{"a key twice", []spec{{"a", 2, 1}, {"b", 2, 1}, {"a", 2, 1}}},
			{"a limit of 0", []spec{{"a", 2, 1}, {"b", 0, 1}}},
			{"no window", []spec{{"a", 2, 1}, {"b", 2, 0}}},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				b, other := open(t)
				takes := takesOf(tt.takes, time.Hour)
				if err := budget.CheckTakes(takes); err == nil {
					t.Error("CheckBudgetTakes = nil, want an error")
				}
				if ok, _, _, err := other.Peek(ctx, takes); ok || err == nil {
					t.Errorf("Peek = %v, %v; want an error", ok, err)
				}
				if ok, _, _, err := b.Take(ctx, takes); ok || err == nil {
					t.Errorf("Take = %v, %v; want an error", ok, err)
				}
				for _, k := range []string{"a", "b"} {
					if n := count(t, other, k, time.Hour); n != 0 {
						t.Errorf("key %s holds %d calls after a refused take, want none", k, n)
					}
				}
			})
		}
	})

	// 300 takes at once, from both handles, over the keys a, b and c in
	// three combinations: no key holds more calls than its limit, each
	// holds exactly the takes of it that succeeded, so a refused take
	// left no count anywhere, and a, with 100 takes of it alone, is full.
	t.Run("exact over several keys across handles", func(t *testing.T) {
		b, other := open(t)
		limits := map[string]int{"a": 37, "b": 50, "c": 23}
		combos := [][]string{{"a", "b"}, {"b", "c"}, {"a"}}
		var took [3]atomic.Int64
		var i atomic.Int64
		testproc.AtOnce(t, 300, b, other, func(h interlock.BudgetStore, _ int) (bool, error) {
			n := int(i.Add(1)) % 3
			var takes []interlock.BudgetTake
			for _, k := range combos[n] {
				takes = append(takes, interlock.BudgetTake{Key: k, Limit: limits[k], Window: time.Hour})
			}
			ok, wait, _, err := h.Take(ctx, takes)
			if err == nil && (ok == (wait > 0) || wait > time.Hour) {
				err = fmt.Errorf("Take = %v, %v: want room, or a wait within the window", ok, wait)
			}
			if ok {
				took[n].Add(1)
			}
			return ok, err
		})
		want := map[string]int64{"a": took[0].Load() + took[2].Load(), "b": took[0].Load() + took[1].Load(), "c": took[1].Load()}
		for k, n := range want {
			if got := count(t, b, k, time.Hour); int64(got) != n || got > limits[k] {
				t.Errorf("key %s holds %d calls; its takes that succeeded were %d, its limit %d", k, got, n, limits[k])
			}
		}
		if got := count(t, other, "a", time.Hour); got != limits["a"] {
			t.Errorf("key a holds %d calls; with 100 takes of it alone it must be full at %d", got, limits["a"])
		}
	})
}

// spec is a take with its window in units.
type spec struct {
	key          string
	limit, units int
}

// takesOf returns the takes of specs, with their windows in unit.
func takesOf(specs []spec, unit time.Duration) []interlock.BudgetTake {
	var takes []interlock.BudgetTake
	for _, s := range specs {
		takes = append(takes, interlock.BudgetTake{Key: s.key, Limit: s.limit, Window: time.Duration(s.units) * unit})
	}
	return takes
}

// one is the take of a single budget under key.
func one(key string, limit int, window time.Duration) []interlock.BudgetTake {
	return []interlock.BudgetTake{{Key: key, Limit: limit, Window: window}}
}

// count returns how many calls key holds under window, as a peek tells
// it: the smallest limit with room, less one.
func count(t *testing.T, s interlock.BudgetStore, key string, window time.Duration) int {
	t.Helper()
	for limit := 1; limit <= 1000; limit++ {
		ok, _, _, err := s.Peek(context.Background(), one(key, limit, window))
		if err != nil {
			t.Fatal(err)
		}
		if ok {
			return limit - 1
		}
	}
	t.Fatalf("key %s holds more than 1,000 calls", key)
	return 0
}
