package metrics

import (
	"context"
	"encoding/json"
	"io"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/interlock-mcp/interlock"
	"github.com/interlock-mcp/interlock/audit"
)

// TestMetricsOfRealCalls sends calls of each kind through a gate and reads
// them back from the handler.
func TestMetricsOfRealCalls(t *testing.T) {
	m := New()
	policy := interlock.ByAnnotations{Mode: interlock.ModeFlag}
	g, err := interlock.NewGate(policy, &interlock.GateOptions{Meter: m, Getenv: func(k string) string {
		if k == "MCP_DRY_RUN" {
			return "false"
		}
		return strings.Repeat("k", 32)
	}})
	if err != nil {
		t.Fatal(err)
	}
	read, _ := interlock.NewTool("get", "billing", interlock.Hints{ReadOnly: true}, nil)
	write, _ := interlock.NewTool("delete", "billing", interlock.HintsOf(nil), nil)
	ok := func(context.Context, json.RawMessage) (*mcp.CallToolResult, error) {
		return &mcp.CallToolResult{Content: []mcp.Content{}}, nil
	}
	id := interlock.Identity{Principal: "p", Tenant: "t"}
	g.Call(context.Background(), read, id, json.RawMessage(`{}`), ok)
	g.Call(context.Background(), write, id, json.RawMessage(`{}`), ok)
	g.Call(context.Background(), write, id, json.RawMessage(`{"__confirm":true}`), ok)
	m.ObserveCall(interlock.CallStats{Tool: "refund", Mode: "token", Decision: audit.DecisionDenied,
		Outcome: string(interlock.CodeRateLimited), Budget: "refunds-per-agent"})
	m.Event("auth_refused")
	m.UpstreamUp("billing", true)

	rec := httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	body, _ := io.ReadAll(rec.Body)
	for _, want := range []string{
		`interlock_calls_total{decision="allowed",mode="allow",outcome="ok",tool="get"} 1`,
		`interlock_calls_total{decision="previewed",mode="flag",outcome="DRY_RUN_PREVIEW",tool="delete"} 1`,
		`interlock_calls_total{decision="confirmed",mode="flag",outcome="ok",tool="delete"} 1`,
		`interlock_confirmations_total{by="flag",stage="confirmed"} 1`,
		`interlock_gate_seconds_count{mode="flag"} 2`,
		`interlock_upstream_seconds_count{upstream="billing"} 2`,
		`interlock_events_total{event="auth_refused"} 1`,
		`interlock_budget_refusals_total{budget="refunds-per-agent"} 1`,
		`interlock_upstream_up{upstream="billing"} 1`,
		`go_goroutines`,
	} {
		if !strings.Contains(string(body), want) {
			t.Errorf("metrics lack %s", want)
		}
	}
}
