package redis_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/interlock-mcp/interlock"
	"github.com/interlock-mcp/interlock/redis"
)

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

func bodyOf(res *mcp.CallToolResult) interlock.Body { return interlock.BodyOfResult(res) }

// TestBudgetExactAcrossReplicas sends 200 confirmed calls at once to two
// gates, each with its own connection to Redis, against a budget of 37:
// exactly 37 run, and every other call is RATE_LIMITED with the time until
// the budget frees.
func TestBudgetExactAcrossReplicas(t *testing.T) {
	first := store(t)
	second, err := redis.Open(context.Background(), redisURL, first.Prefix())
	if err != nil {
		t.Fatal(err)
	}
	defer second.Close()
	budget := interlock.Budget{Name: "refunds-per-agent", Limit: 37, Window: time.Hour}
	newReplica := func(s *redis.Tokens) *interlock.Gate {
		g, err := interlock.NewGate(budgetPolicy{budget}, &interlock.GateOptions{
			Getenv: func(k string) string { return map[string]string{"MCP_DRY_RUN": "false"}[k] },
			Logger: slog.New(slog.DiscardHandler), Tokens: s, Budgets: s.Budgets(),
		})
		if err != nil {
			t.Fatal(err)
		}
		return g
	}
	replicas := []*interlock.Gate{newReplica(first), newReplica(second)}
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
			switch body := bodyOf(res); {
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

// one is the take of a single budget under key.
func one(key string, limit int, window time.Duration) []interlock.BudgetTake {
	return []interlock.BudgetTake{{Key: key, Limit: limit, Window: window}}
}

func TestBudgetsWindow(t *testing.T) {
	ctx := context.Background()
	b := store(t).Budgets()
	const window = 300 * time.Millisecond
	for i := range 2 {
		if ok, wait, _, err := b.Peek(ctx, one("k", 2, window)); err != nil || !ok || wait != 0 {
			t.Fatalf("Peek %d = %v, %v, %v: a peek must not count", i, ok, wait, err)
		}
		if ok, _, _, err := b.Take(ctx, one("k", 2, window)); !ok || err != nil {
			t.Fatalf("Take %d = %v, %v", i, ok, err)
		}
	}
	ok, wait, spent, err := b.Take(ctx, one("k", 2, window))
	if ok || err != nil || wait <= 0 || wait > window || spent != 0 {
		t.Fatalf("Take over the limit = %v, %v, %d, %v; want a refusal with a wait within the window", ok, wait, spent, err)
	}
	if ok, peek, _, _ := b.Peek(ctx, one("k", 2, window)); ok || peek <= 0 || peek > wait {
		t.Errorf("Peek on a spent budget = %v, %v; want a wait up to %v", ok, peek, wait)
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
}

func TestBudgetsUnreachableFailClosed(t *testing.T) {
	b := redis.New(goredis.NewClient(&goredis.Options{Addr: "127.0.0.1:1", MaxRetries: -1}), "x:").Budgets()
	g, err := interlock.NewGate(budgetPolicy{interlock.Budget{Name: "b", Limit: 5, Window: time.Hour}}, &interlock.GateOptions{
		Getenv: func(k string) string { return map[string]string{"MCP_DRY_RUN": "false"}[k] },
		Logger: slog.New(slog.DiscardHandler), Budgets: b,
	})
	if err != nil {
		t.Fatal(err)
	}
	tool, _ := interlock.NewTool("refund_invoice", "", interlock.HintsOf(nil), nil)
	ran := false
	res := g.Call(context.Background(), tool, interlock.Identity{Principal: "a", Tenant: "t"}, json.RawMessage(`{"__confirm":true}`),
		func(context.Context, json.RawMessage) (*mcp.CallToolResult, error) {
			ran = true
			return &mcp.CallToolResult{}, nil
		})
	body := bodyOf(res)
	if ran || body.Code != interlock.CodeUpstreamUnavailable || body.RetryAfterMS <= 0 {
		t.Errorf("ran %v, %+v: want UPSTREAM_UNAVAILABLE with retry_after_ms", ran, body)
	}
	if b, _ := json.Marshal(res); strings.Contains(string(b), "127.0.0.1:1") {
		t.Errorf("the store's address reached the client: %s", b)
	}
}

// counter returns how many calls the budget key holds in s, read from
// Redis itself.
func counter(t testing.TB, s *redis.Tokens) func(key string) int64 {
	opts, _ := goredis.ParseURL(redisURL)
	c := goredis.NewClient(opts)
	t.Cleanup(func() { c.Close() })
	return func(key string) int64 {
		n, err := c.ZCard(context.Background(), s.Prefix()+"budget:"+key).Result()
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
}

// TestBudgetsAllOrNone takes over several keys at once: the call is
// counted under every key or, when one has no room, under none, and the
// answer names the take with the longest wait.
func TestBudgetsAllOrNone(t *testing.T) {
	ctx := context.Background()
	tests := []struct {
		name string
		// full are the keys filled before the take, under a limit of 1
		// per hour, or per 2 hours when "long".
		full  []string
		takes []interlock.BudgetTake
		spent int // -1 when the take succeeds
		// counts are the calls each key holds after the take.
		counts map[string]int64
	}{
		{"both with room", nil,
			[]interlock.BudgetTake{{Key: "a", Limit: 2, Window: time.Hour}, {Key: "b", Limit: 2, Window: time.Hour}}, -1,
			map[string]int64{"a": 1, "b": 1}},
		{"the second spent", []string{"b"},
			[]interlock.BudgetTake{{Key: "a", Limit: 2, Window: time.Hour}, {Key: "b", Limit: 1, Window: time.Hour}}, 1,
			map[string]int64{"a": 0, "b": 1}},
		{"the first spent", []string{"a"},
			[]interlock.BudgetTake{{Key: "a", Limit: 1, Window: time.Hour}, {Key: "b", Limit: 2, Window: time.Hour}}, 0,
			map[string]int64{"a": 1, "b": 0}},
		{"three with room", nil,
			[]interlock.BudgetTake{{Key: "a", Limit: 2, Window: time.Hour}, {Key: "b", Limit: 2, Window: time.Hour}, {Key: "c", Limit: 2, Window: time.Hour}}, -1,
			map[string]int64{"a": 1, "b": 1, "c": 1}},
		{"three, two spent: the longest wait", []string{"a", "long"},
			[]interlock.BudgetTake{{Key: "a", Limit: 1, Window: time.Hour}, {Key: "b", Limit: 2, Window: time.Hour}, {Key: "long", Limit: 1, Window: 2 * time.Hour}}, 2,
			map[string]int64{"a": 1, "b": 0, "long": 1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := store(t)
			b, count := s.Budgets(), counter(t, s)
			for _, k := range tt.full {
				window := time.Hour
				if k == "long" {
					window = 2 * time.Hour
				}
				if ok, _, _, err := b.Take(ctx, one(k, 1, window)); !ok || err != nil {
					t.Fatal(ok, err)
				}
			}
			for _, take := range []func(context.Context, []interlock.BudgetTake) (bool, time.Duration, int, error){b.Peek, b.Take} {
				ok, wait, spent, err := take(ctx, tt.takes)
				switch {
				case err != nil:
					t.Fatal(err)
				case tt.spent < 0 && (!ok || wait != 0):
					t.Errorf("= %v, %v; want room", ok, wait)
				case tt.spent >= 0 && (ok || spent != tt.spent || wait <= tt.takes[spent].Window-time.Minute || wait > tt.takes[spent].Window):
					t.Errorf("= %v, %v, %d; want take %d refused with about its window to wait", ok, wait, spent, tt.spent)
				}
			}
			for k, want := range tt.counts {
				if got := count(k); got != want {
					t.Errorf("key %s holds %d calls, want %d", k, got, want)
				}
			}
		})
	}
	b := store(t).Budgets()
	twice := []interlock.BudgetTake{{Key: "a", Limit: 2, Window: time.Hour}, {Key: "a", Limit: 2, Window: time.Hour}}
	if ok, _, _, err := b.Take(ctx, twice); ok || err == nil {
		t.Errorf("Take of one key twice = %v, %v; want an error", ok, err)
	}
	if ok, _, _, err := b.Take(ctx, nil); !ok || err != nil {
		t.Errorf("Take of no budget = %v, %v; want room", ok, err)
	}
}

// TestBudgetsExactOverSeveralKeys has 300 takes at once, from two
// connections as two gateways would, over the keys a, b and c in three
// combinations: no key holds more calls than its limit, and each holds
// exactly the takes of it that succeeded, so a refused take left no count
// anywhere.
func TestBudgetsExactOverSeveralKeys(t *testing.T) {
	first := store(t)
	second, err := redis.Open(context.Background(), redisURL, first.Prefix())
	if err != nil {
		t.Fatal(err)
	}
	defer second.Close()
	replicas := []*redis.Budgets{first.Budgets(), second.Budgets()}
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
			ok, wait, _, err := replicas[i%2].Take(context.Background(), takes)
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
	count := counter(t, first)
	want := map[string]int64{"a": took[0].Load() + took[2].Load(), "b": took[0].Load() + took[1].Load(), "c": took[1].Load()}
	for k, n := range want {
		if got := count(k); got != n || got > int64(limits[k]) {
			t.Errorf("key %s holds %d calls; its takes that succeeded were %d, its limit %d", k, got, n, limits[k])
		}
	}
	if got := count("a"); got != int64(limits["a"]) {
		t.Errorf("key a holds %d calls; with 100 takes of it alone it must be full at %d", got, limits["a"])
	}
}

// BenchmarkBudgets measures takes with room of one budget and of two,
// and a take of two the second refuses.
func BenchmarkBudgets(b *testing.B) {
	ctx := context.Background()
	two := func(i int) []interlock.BudgetTake {
		return []interlock.BudgetTake{
			{Key: fmt.Sprintf("a%d", i%64), Limit: 1_000_000, Window: time.Hour},
			{Key: fmt.Sprintf("b%d", i%64), Limit: 1_000_000, Window: time.Hour},
		}
	}
	b.Run("Take", func(b *testing.B) {
		s := store(b).Budgets()
		i := 0
		for b.Loop() {
			if ok, _, _, err := s.Take(ctx, one(fmt.Sprintf("k%d", i%64), 1_000_000, time.Hour)); !ok || err != nil {
				b.Fatal(ok, err)
			}
			i++
		}
	})
	b.Run("Take two", func(b *testing.B) {
		s := store(b).Budgets()
		i := 0
		for b.Loop() {
			if ok, _, _, err := s.Take(ctx, two(i)); !ok || err != nil {
				b.Fatal(ok, err)
			}
			i++
		}
	})
	b.Run("Take two refused", func(b *testing.B) {
		s := store(b).Budgets()
		s.Take(ctx, one("b", 1, time.Hour))
		takes := []interlock.BudgetTake{{Key: "a", Limit: 10, Window: time.Hour}, {Key: "b", Limit: 1, Window: time.Hour}}
		for b.Loop() {
			if ok, _, _, err := s.Take(ctx, takes); ok || err != nil {
				b.Fatal(ok, err)
			}
		}
	})
}
