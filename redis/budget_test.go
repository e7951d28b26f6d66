package redis_test

import (
	"context"
	"encoding/json"
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
