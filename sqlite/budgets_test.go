package sqlite

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/interlock-mcp/interlock"
)

// one is the take of a single budget under key.
func one(key string, limit int, window time.Duration) []interlock.BudgetTake {
	return []interlock.BudgetTake{{Key: key, Limit: limit, Window: window}}
}

// TestBudgetsSlideTheirWindow takes on one handle and peeks on another,
// as two gateways on one data directory would, and finds the waits of
// [interlock.MemoryBudgets] to the nanosecond.
func TestBudgetsSlideTheirWindow(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state.db")
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		m, other := openState(t, path).Budgets(), openState(t, path).Budgets()
		take := func(want bool, wantWait time.Duration) {
			t.Helper()
			ok, wait, spent, err := m.Take(ctx, one("k", 3, time.Hour))
			if err != nil || ok != want || wait != wantWait || spent != 0 {
				t.Fatalf("Take = %v, %v, %d, %v; want %v, %v, 0", ok, wait, spent, err, want, wantWait)
			}
		}
		take(true, 0)
		time.Sleep(10 * time.Minute)
		take(true, 0)
		time.Sleep(10 * time.Minute)
		take(true, 0)
		// The first run leaves the window an hour after it ran.
		take(false, 40*time.Minute)
		if ok, wait, _, err := other.Peek(ctx, one("k", 3, time.Hour)); ok || wait != 40*time.Minute || err != nil {
			t.Errorf("Peek = %v, %v, %v; want false, 40m", ok, wait, err)
		}
		if ok, wait, _, err := other.Peek(ctx, one("other", 3, time.Hour)); !ok || wait != 0 || err != nil {
			t.Errorf("Peek of another key = %v, %v, %v; want true, 0", ok, wait, err)
		}
		time.Sleep(40*time.Minute - time.Nanosecond)
		take(false, time.Nanosecond)
		time.Sleep(time.Nanosecond)
		take(true, 0)
		// The second run, at 10m, is the next to leave.
		take(false, 10*time.Minute)
	})
}

// TestBudgetsWindow has the assertions of the Redis store's window test:
// a peek counts nothing, a refusal says how long until there is room, and
// keys count apart.
func TestBudgetsWindow(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state.db")
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		b := openState(t, path).Budgets()
		const window = 300 * time.Millisecond
		for i := range 2 {
			if ok, wait, _, err := b.Peek(ctx, one("k", 2, window)); err != nil || !ok || wait != 0 {
				t.Fatalf("Peek %d = %v, %v, %v: a peek must not count", i, ok, wait, err)
			}
			if ok, _, _, err := b.Take(ctx, one("k", 2, window)); !ok || err != nil {
				t.Fatalf("Take %d = %v, %v", i, ok, err)
			}
			time.Sleep(time.Millisecond)
		}
		ok, wait, _, err := b.Take(ctx, one("k", 2, window))
		if ok || err != nil || wait != window-2*time.Millisecond {
			t.Fatalf("Take over the limit = %v, %v, %v; want a refusal with a wait of %v", ok, wait, err, window-2*time.Millisecond)
		}
		if _, peek, _, _ := b.Peek(ctx, one("k", 2, window)); peek != wait {
			t.Errorf("Peek on a spent budget = %v, want %v", peek, wait)
		}
		if ok, _, _, _ := b.Take(ctx, one("other", 2, window)); !ok {
			t.Error("another key shares the count")
		}
		time.Sleep(wait)
		if ok, _, _, err := b.Take(ctx, one("k", 2, window)); !ok || err != nil {
			t.Errorf("Take after the wait = %v, %v; the oldest call left the window", ok, err)
		}
		if ok, _, _, err := b.Take(ctx, one("k", 0, window)); ok || err == nil {
			t.Errorf("Take under a limit of 0 = %v, %v; want an error", ok, err)
		}
	})
}

// TestBudgetsWaitWithinWindow checks that a call counted after the time a
// peek read, as a take on another handle can be, or under a clock that
// then stepped back, makes no wait longer than the window.
func TestBudgetsWaitWithinWindow(t *testing.T) {
	ctx := context.Background()
	b := openState(t, filepath.Join(t.TempDir(), "state.db")).Budgets()
	later := time.Now().Add(time.Minute)
	if _, err := b.db.ExecContext(ctx, "INSERT INTO budget_runs (key, ran_at, ends_at) VALUES ('k', ?, ?)",
		later.UnixNano(), later.Add(time.Hour).UnixNano()); err != nil {
		t.Fatal(err)
	}
	if ok, wait, _, err := b.Peek(ctx, one("k", 1, time.Hour)); ok || wait != time.Hour || err != nil {
		t.Errorf("Peek = %v, %v, %v; want the window, 1h", ok, wait, err)
	}
	if ok, wait, _, err := b.Take(ctx, one("k", 1, time.Hour)); ok || wait != time.Hour || err != nil {
		t.Errorf("Take = %v, %v, %v; want a refusal for the window, 1h", ok, wait, err)
	}
}

// TestBudgetsDropIdle checks that a handle's first take drops the keys
// whose calls all left the window they were last counted under, and a
// take the calls of its own key that left the window.
func TestBudgetsDropIdle(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state.db")
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		s := openState(t, path).Budgets()
		takes := []struct {
			key    string
			window time.Duration
		}{
			{"idle", time.Minute}, {"idle", time.Minute},
			{"long", time.Hour},
			// A window made longer keeps the calls counted under the
			// shorter one.
			{"grown", time.Minute}, {"grown", time.Hour},
			{"busy", time.Minute}, {"busy", time.Minute},
		}
		for _, tk := range takes {
			if ok, _, _, err := s.Take(ctx, one(tk.key, 10, tk.window)); !ok || err != nil {
				t.Fatal(tk.key, ok, err)
			}
			time.Sleep(time.Second)
		}
		time.Sleep(2 * time.Minute)
		if ok, _, _, err := s.Take(ctx, one("busy", 10, time.Minute)); !ok || err != nil {
			t.Fatal(ok, err)
		}
		if ok, _, _, err := openState(t, path).Budgets().Take(ctx, one("new", 10, time.Minute)); !ok || err != nil {
			t.Fatal(ok, err)
		}
		rows, err := s.db.QueryContext(ctx, "SELECT key, count(*) FROM budget_runs GROUP BY key ORDER BY key")
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		var kept []string
		for rows.Next() {
			var key string
			var n int
			if err := rows.Scan(&key, &n); err != nil {
				t.Fatal(err)
			}
			kept = append(kept, fmt.Sprintf("%s %d", key, n))
		}
		if got, want := fmt.Sprint(kept), "[busy 1 grown 2 long 1 new 1]"; got != want {
			t.Errorf("kept %s, want %s", got, want)
		}
	})
}

// budgetPolicy confirms every call by flag and counts it against one
// budget.
type budgetPolicy struct{ budget interlock.Budget }

func (p budgetPolicy) Decide(context.Context, *interlock.Call) (interlock.Decision, error) {
	return interlock.Decision{Mode: interlock.ModeFlag, Rule: "refunds", Budgets: []interlock.Budget{p.budget}}, nil
}
func (budgetPolicy) ToolModes(string, string, interlock.Hints) []interlock.Mode {
	return []interlock.Mode{interlock.ModeFlag}
}
func (budgetPolicy) IsSecret(name string) bool                          { return interlock.IsSecretName(name, nil) }
func (budgetPolicy) HumanArgs(string, string, interlock.Hints) []string { return nil }

// TestBudgetExactAcrossHandles sends 200 confirmed calls at once to two
// gates, each with its own handle on one file, against a budget of 37:
// exactly 37 run, and every other call is RATE_LIMITED with the time
// until the budget frees.
func TestBudgetExactAcrossHandles(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state.db")
	budget := interlock.Budget{Name: "refunds-per-agent", Limit: 37, Window: time.Hour}
	newReplica := func() *interlock.Gate {
		g, err := interlock.NewGate(budgetPolicy{budget}, &interlock.GateOptions{
			Getenv: func(k string) string { return map[string]string{"MCP_DRY_RUN": "false"}[k] },
			Logger: slog.New(slog.DiscardHandler), Budgets: openState(t, path).Budgets(),
		})
		if err != nil {
			t.Fatal(err)
		}
		return g
	}
	replicas := []*interlock.Gate{newReplica(), newReplica()}
	tool, _ := interlock.NewTool("refund_invoice", "", interlock.HintsOf(nil), nil)
	id := interlock.Identity{Principal: "agent-7", Tenant: "acme"}
	var runs, limited, other atomic.Int64
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range 200 {
		wg.Go(func() {
			<-start
			res := replicas[i%2].Call(context.Background(), tool, id, json.RawMessage(`{"invoice_id":"inv_1","__confirm":true}`),
				func(context.Context, json.RawMessage) (*mcp.CallToolResult, error) {
					runs.Add(1)
					return &mcp.CallToolResult{Content: []mcp.Content{}}, nil
				})
			switch body := interlock.BodyOfResult(res); {
			case !res.IsError:
			case body.Code == interlock.CodeRateLimited && body.RetryAfterMS > 0 && body.RetryAfterMS <= time.Hour.Milliseconds():
				limited.Add(1)
			default:
				other.Add(1)
				t.Errorf("unexpected answer: %+v", body)
			}
		})
	}
	close(start)
	wg.Wait()
	if runs.Load() != 37 || limited.Load() != 163 || other.Load() != 0 {
		t.Errorf("ran %d, RATE_LIMITED %d, other %d; want 37, 163, 0", runs.Load(), limited.Load(), other.Load())
	}
}

// TestBudgetsAcrossProcesses has two gateway processes take 75 times
// each, from eight goroutines, under one limit of 50, six times over. In
// every other round each take is of two keys, the second holding 20
// calls already: between them exactly 50 takes succeed in a round of one
// key, exactly 30 in a round of two, and the first key then holds 30.
func TestBudgetsAcrossProcesses(t *testing.T) {
	ctx := context.Background()
	const limit, tries, held = 50, 75, 20
	path := filepath.Join(t.TempDir(), "state.db")
	s := openState(t, path).Budgets()
	procs := startProcesses(t, "budgets", path)
	for round := range 6 {
		keys, want := fmt.Sprintf("k%d", round), limit
		if round%2 == 1 {
			keys, want = fmt.Sprintf("k%d,full%d", round, round), limit-held
			for range held {
				if ok, _, _, err := s.Take(ctx, one(fmt.Sprintf("full%d", round), limit, time.Hour)); !ok || err != nil {
					t.Fatal(ok, err)
				}
			}
		}
		sendAll(t, procs, fmt.Sprintf("take %s %d %d", keys, limit, tries))
		took := make([]int, len(procs))
		total := 0
		for i, p := range procs {
			took[i] = p.number(t, "took")
			total += took[i]
		}
		if total != want {
			t.Errorf("round %d: two processes took %v over %s under a limit of %d; want %d in all", round, took, keys, limit, want)
		}
		if n := countOf(t, s, fmt.Sprintf("k%d", round)); n != want {
			t.Errorf("round %d: k%d holds %d calls, want %d", round, round, n, want)
		}
		if ok, wait, _, err := s.Take(ctx, takesOf(keys, limit)); ok || wait <= 0 || err != nil {
			t.Errorf("round %d: a take after both processes = %v, %v, %v; want a refusal", round, ok, wait, err)
		}
		t.Logf("round %d: takes by process %v", round, took)
	}
}

// takesOf returns the takes of the comma-separated keys, each under limit
// per hour.
func takesOf(keys string, limit int) []interlock.BudgetTake {
	var takes []interlock.BudgetTake
	for k := range strings.SplitSeq(keys, ",") {
		takes = append(takes, interlock.BudgetTake{Key: k, Limit: limit, Window: time.Hour})
	}
	return takes
}

// countOf returns how many calls key holds in the file of b.
func countOf(t testing.TB, b *Budgets, key string) int {
	t.Helper()
	var n int
	if err := b.db.QueryRowContext(context.Background(), "SELECT count(*) FROM budget_runs WHERE key = ?", key).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// TestBudgetsAllOrNone takes over several keys at once, on one handle,
// and reads the counts on another: the call is counted under every key
// or, when one has no room, under none, and the answer names the take
// with the longest wait, to the nanosecond.
func TestBudgetsAllOrNone(t *testing.T) {
	tests := []struct {
		name string
		// full are the keys filled to their limit 15 minutes before the
		// take, under limit 1 per hour, or per 2 hours when "long".
		full  []string
		takes []interlock.BudgetTake
		ok    bool
		wait  time.Duration
		spent int
		// counts are the calls each key holds after the take.
		counts map[string]int
	}{
		{"both with room", nil,
			[]interlock.BudgetTake{{Key: "a", Limit: 2, Window: time.Hour}, {Key: "b", Limit: 2, Window: time.Hour}}, true, 0, 0,
			map[string]int{"a": 1, "b": 1}},
		{"the second spent", []string{"b"},
			[]interlock.BudgetTake{{Key: "a", Limit: 2, Window: time.Hour}, {Key: "b", Limit: 1, Window: time.Hour}}, false, 45 * time.Minute, 1,
			map[string]int{"a": 0, "b": 1}},
		{"the first spent", []string{"a"},
			[]interlock.BudgetTake{{Key: "a", Limit: 1, Window: time.Hour}, {Key: "b", Limit: 2, Window: time.Hour}}, false, 45 * time.Minute, 0,
			map[string]int{"a": 1, "b": 0}},
		{"three with room", nil,
			[]interlock.BudgetTake{{Key: "a", Limit: 2, Window: time.Hour}, {Key: "b", Limit: 2, Window: time.Hour}, {Key: "c", Limit: 2, Window: time.Hour}}, true, 0, 0,
			map[string]int{"a": 1, "b": 1, "c": 1}},
		{"three, two spent: the longest wait", []string{"a", "long"},
			[]interlock.BudgetTake{{Key: "a", Limit: 1, Window: time.Hour}, {Key: "b", Limit: 2, Window: time.Hour}, {Key: "long", Limit: 1, Window: 2 * time.Hour}}, false, 105 * time.Minute, 2,
			map[string]int{"a": 1, "b": 0, "long": 1}},
		{"none", nil, nil, true, 0, 0, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "state.db")
			synctest.Test(t, func(t *testing.T) {
				ctx := context.Background()
				b, other := openState(t, path).Budgets(), openState(t, path).Budgets()
				for _, k := range tt.full {
					window := time.Hour
					if k == "long" {
						window = 2 * time.Hour
					}
					if ok, _, _, err := b.Take(ctx, one(k, 1, window)); !ok || err != nil {
						t.Fatal(ok, err)
					}
				}
				time.Sleep(15 * time.Minute)
				if ok, wait, spent, err := other.Peek(ctx, tt.takes); ok != tt.ok || wait != tt.wait || spent != tt.spent || err != nil {
					t.Errorf("Peek = %v, %v, %d, %v; want %v, %v, %d", ok, wait, spent, err, tt.ok, tt.wait, tt.spent)
				}
				if ok, wait, spent, err := b.Take(ctx, tt.takes); ok != tt.ok || wait != tt.wait || spent != tt.spent || err != nil {
					t.Errorf("Take = %v, %v, %d, %v; want %v, %v, %d", ok, wait, spent, err, tt.ok, tt.wait, tt.spent)
				}
				for k, want := range tt.counts {
					if got := countOf(t, other, k); got != want {
						t.Errorf("key %s holds %d calls, want %d", k, got, want)
					}
				}
			})
		})
	}
	b := openState(t, filepath.Join(t.TempDir(), "state.db")).Budgets()
	if ok, _, _, err := b.Take(context.Background(), takesOf("a,b,a", 2)); ok || err == nil {
		t.Errorf("Take of one key twice = %v, %v; want an error", ok, err)
	}
	if n := countOf(t, b, "b"); n != 0 {
		t.Errorf("key b holds %d calls after a refused take, want none", n)
	}
}

// TestBudgetsExactOverSeveralKeys has 300 takes at once, on two handles
// on one file, over the keys a, b and c in three combinations: no key
// holds more calls than its limit, and each holds exactly the takes of it
// that succeeded, so a refused take left no count anywhere.
func TestBudgetsExactOverSeveralKeys(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state.db")
	handles := []*Budgets{openState(t, path).Budgets(), openState(t, path).Budgets()}
	limits := map[string]int{"a": 37, "b": 50, "c": 23}
	combos := [][]string{{"a", "b"}, {"b", "c"}, {"a"}}
	var took [3]atomic.Int64
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range 300 {
		wg.Go(func() {
			var takes []interlock.BudgetTake
			for _, k := range combos[i%3] {
				takes = append(takes, interlock.BudgetTake{Key: k, Limit: limits[k], Window: time.Hour})
			}
			<-start
			ok, wait, _, err := handles[i%2].Take(context.Background(), takes)
			if err != nil || ok == (wait > 0) {
				t.Errorf("Take = %v, %v, %v", ok, wait, err)
			}
			if ok {
				took[i%3].Add(1)
			}
		})
	}
	close(start)
	wg.Wait()
	want := map[string]int64{"a": took[0].Load() + took[2].Load(), "b": took[0].Load() + took[1].Load(), "c": took[1].Load()}
	for k, n := range want {
		if got := countOf(t, handles[0], k); int64(got) != n || got > limits[k] {
			t.Errorf("key %s holds %d calls; its takes that succeeded were %d, its limit %d", k, got, n, limits[k])
		}
	}
	if got := countOf(t, handles[1], "a"); got != limits["a"] {
		t.Errorf("key a holds %d calls; with 100 takes of it alone it must be full at %d", got, limits["a"])
	}
}

// BenchmarkBudgets measures a peek, takes of one budget and of two, with
// room and refused, and takes of one with room from several goroutines on
// two handles on one file.
func BenchmarkBudgets(b *testing.B) {
	ctx := context.Background()
	b.Run("Peek", func(b *testing.B) {
		s := openState(b, filepath.Join(b.TempDir(), "state.db")).Budgets()
		for range 10 {
			s.Take(ctx, one("k", 10, time.Hour))
		}
		for b.Loop() {
			if _, wait, _, err := s.Peek(ctx, one("k", 10, time.Hour)); wait == 0 || err != nil {
				b.Fatal(wait, err)
			}
		}
	})
	b.Run("Take", func(b *testing.B) {
		s := openState(b, filepath.Join(b.TempDir(), "state.db")).Budgets()
		i := 0
		for b.Loop() {
			if ok, _, _, err := s.Take(ctx, one(fmt.Sprintf("k%d", i%64), 1_000_000, time.Hour)); !ok || err != nil {
				b.Fatal(ok, err)
			}
			i++
		}
	})
	b.Run("Take two", func(b *testing.B) {
		s := openState(b, filepath.Join(b.TempDir(), "state.db")).Budgets()
		i := 0
		for b.Loop() {
			if ok, _, _, err := s.Take(ctx, takesOf(fmt.Sprintf("a%d,b%d", i%64, i%64), 1_000_000)); !ok || err != nil {
				b.Fatal(ok, err)
			}
			i++
		}
	})
	b.Run("Take two refused", func(b *testing.B) {
		s := openState(b, filepath.Join(b.TempDir(), "state.db")).Budgets()
		for range 10 {
			s.Take(ctx, one("b", 10, time.Hour))
		}
		for b.Loop() {
			if ok, _, _, err := s.Take(ctx, takesOf("a,b", 10)); ok || err != nil {
				b.Fatal(ok, err)
			}
		}
	})
	b.Run("Take refused", func(b *testing.B) {
		s := openState(b, filepath.Join(b.TempDir(), "state.db")).Budgets()
		for range 10 {
			s.Take(ctx, one("k", 10, time.Hour))
		}
		for b.Loop() {
			if ok, _, _, err := s.Take(ctx, one("k", 10, time.Hour)); ok || err != nil {
				b.Fatal(ok, err)
			}
		}
	})
	b.Run("Take two handles", func(b *testing.B) {
		path := filepath.Join(b.TempDir(), "state.db")
		handles := []*Budgets{openState(b, path).Budgets(), openState(b, path).Budgets()}
		var n atomic.Int64
		b.SetParallelism(4)
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				i := n.Add(1)
				if ok, _, _, err := handles[i%2].Take(ctx, one(fmt.Sprintf("k%d", i%64), 1_000_000, time.Hour)); !ok || err != nil {
					b.Error(ok, err)
					return
				}
			}
		})
	})
}
