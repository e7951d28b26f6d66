package redis_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/interlock-mcp/interlock"
	"github.com/interlock-mcp/interlock/redact"
	"github.com/interlock-mcp/interlock/redis"
	"github.com/interlock-mcp/interlock/storetest"
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
func (budgetPolicy) IsSecret(name string) bool                          { return redact.IsSecret(name, nil) }
func (budgetPolicy) HumanArgs(string, string, interlock.Hints) []string { return nil }

// one is the take of a single budget under key.
func one(key string, limit int, window time.Duration) []interlock.BudgetTake {
	return []interlock.BudgetTake{{Key: key, Limit: limit, Window: window}}
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
	body := interlock.BodyOfResult(res)
	if ran || body.Code != interlock.CodeUpstreamUnavailable || body.RetryAfterMS <= 0 {
		t.Errorf("ran %v, %+v: want UPSTREAM_UNAVAILABLE with retry_after_ms", ran, body)
	}
	if b, _ := json.Marshal(res); strings.Contains(string(b), "127.0.0.1:1") {
		t.Errorf("the store's address reached the client: %s", b)
	}
}

// BenchmarkBudgets measures takes with room of one budget and of two,
// and a take of two the second refuses.
func BenchmarkBudgets(b *testing.B) {
	ctx := context.Background()
	storetest.BenchTakes(b, func(b *testing.B) interlock.BudgetStore { return store(b).Budgets() })
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
