package interlock

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/interlock-mcp/interlock/audit"
)

func TestMemoryBudgetsSlideTheirWindow(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		m := NewMemoryBudgets()
		take := func(want bool, wantWait time.Duration) {
			t.Helper()
			ok, wait, err := m.Take(ctx, "k", 3, time.Hour)
			if err != nil || ok != want || wait != wantWait {
				t.Fatalf("Take = %v, %v, %v; want %v, %v", ok, wait, err, want, wantWait)
			}
		}
		take(true, 0)
		time.Sleep(10 * time.Minute)
		take(true, 0)
		time.Sleep(10 * time.Minute)
		take(true, 0)
		// The first run leaves the window an hour after it ran.
		take(false, 40*time.Minute)
		if wait, _ := m.Peek(ctx, "k", 3, time.Hour); wait != 40*time.Minute {
			t.Errorf("Peek = %v, want 40m", wait)
		}
		if wait, _ := m.Peek(ctx, "other", 3, time.Hour); wait != 0 {
			t.Errorf("Peek of another key = %v, want 0", wait)
		}
		time.Sleep(40*time.Minute - time.Nanosecond)
		take(false, time.Nanosecond)
		time.Sleep(time.Nanosecond)
		take(true, 0)
		// The second run, at 10m, is the next to leave.
		take(false, 10*time.Minute)
	})
}

func TestGateBudgets(t *testing.T) {
	const confirmed = `{"customer_id":"acct_9931","__confirm":true}`
	bob := Identity{Principal: "bob", Tenant: "acme"}
	carol := Identity{Principal: "carol", Tenant: "globex"}
	tests := []struct {
		name      string
		perTenant bool
		calls     []Identity
		want      []Code // "" for a call that ran
	}{
		{"per principal", false, []Identity{alice, alice, alice, bob, bob, bob, carol},
			[]Code{"", "", CodeRateLimited, "", "", CodeRateLimited, ""}},
		{"per tenant", true, []Identity{alice, bob, bob, carol, carol, carol},
			[]Code{"", "", CodeRateLimited, "", "", CodeRateLimited}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			log := &memoryAudit{}
			d := Decision{Mode: ModeFlag, Rule: "reminders",
				Budgets: []Budget{{Name: "reminders-per-hour", PerTenant: tt.perTenant, Limit: 2, Window: time.Hour}}}
			meter := &budgetMeter{}
			g := newGate(t, fixedPolicy{d: d}, &GateOptions{Getenv: env("false"), Logger: quiet, Audit: log, Meter: meter})
			var ran atomic.Int32
			run := func(context.Context, json.RawMessage) (*mcp.CallToolResult, error) {
				ran.Add(1)
				return &mcp.CallToolResult{}, nil
			}
			for i, id := range tt.calls {
				body := BodyOfResult(g.Call(context.Background(), testTool(t), id, json.RawMessage(confirmed), run))
				if body.Code != tt.want[i] {
					t.Fatalf("call %d by %s/%s: code %q, want %q (%s)", i, id.Tenant, id.Principal, body.Code, tt.want[i], body.Message)
				}
				if body.Code == CodeRateLimited && (body.RetryAfterMS <= 0 || body.RetryAfterMS > time.Hour.Milliseconds()) {
					t.Errorf("call %d: retry_after_ms = %d, want the time until the budget frees", i, body.RetryAfterMS)
				}
			}
			refused := 0
			for r := range log.Records(context.Background(), 1) {
				if r.Outcome == string(CodeRateLimited) {
					refused++
					if r.Decision != audit.DecisionDenied || r.Detail != `budget "reminders-per-hour" is spent` || r.Rule != "reminders" {
						t.Errorf("refusal record: decision %q detail %q rule %q", r.Decision, r.Detail, r.Rule)
					}
				}
			}
			if want := 2; refused != want {
				t.Errorf("%d refusals on record, want %d", refused, want)
			}
			if meter.refused["reminders-per-hour"] != 2 {
				t.Errorf("the meter heard of %v budget refusals, want 2", meter.refused)
			}
			if int(ran.Load()) != len(tt.calls)-2 {
				t.Errorf("%d calls ran, want %d", ran.Load(), len(tt.calls)-2)
			}
		})
	}
}

// budgetMeter counts the calls each budget refused.
type budgetMeter struct {
	mu      sync.Mutex
	refused map[string]int
}

func (m *budgetMeter) ObserveCall(s CallStats) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if s.Budget != "" {
		if m.refused == nil {
			m.refused = map[string]int{}
		}
		m.refused[s.Budget]++
	}
}

func TestSpentBudgetAsksNobody(t *testing.T) {
	const args = `{"customer_id":"acct_9931"}`
	d := Decision{Mode: ModeToken, Rule: "reminders", Budgets: []Budget{{Name: "once", Limit: 1, Window: time.Hour}}}
	g := newGate(t, fixedPolicy{d: d}, &GateOptions{Getenv: env("false"), Logger: quiet})
	run := func(context.Context, json.RawMessage) (*mcp.CallToolResult, error) { return &mcp.CallToolResult{}, nil }
	call := func(raw string) Body {
		return BodyOfResult(g.Call(context.Background(), testTool(t), alice, json.RawMessage(raw), run))
	}
	first := call(args)
	second := call(args)
	if first.Code != CodeConfirmationRequired || second.Code != CodeConfirmationRequired {
		t.Fatalf("codes %q, %q: want two confirmations asked while the budget has room", first.Code, second.Code)
	}
	if b := call(withToken(args, second.ConfirmToken)); b.Code != "" {
		t.Fatalf("the confirmed call did not run: %s %s", b.Code, b.Message)
	}
	// The budget is spent: the next call is refused before a token is
	// issued, so no human is asked to confirm what cannot run.
	if b := call(args); b.Code != CodeRateLimited || b.ConfirmToken != "" {
		t.Errorf("call on a spent budget: code %q, token %q; want RATE_LIMITED and no token", b.Code, b.ConfirmToken)
	}
}

// failingBudgets cannot be reached.
type failingBudgets struct{}

var errBudgetsDown = errors.New("connection refused")

func (failingBudgets) Peek(context.Context, string, int, time.Duration) (time.Duration, error) {
	return 0, errBudgetsDown
}

func (failingBudgets) Take(context.Context, string, int, time.Duration) (bool, time.Duration, error) {
	return false, 0, errBudgetsDown
}

func TestUnreachableBudgetsFailClosed(t *testing.T) {
	d := Decision{Mode: ModeFlag, Budgets: []Budget{{Name: "b", Limit: 5, Window: time.Hour}}}
	g := newGate(t, fixedPolicy{d: d}, &GateOptions{Getenv: env("false"), Logger: quiet, Budgets: failingBudgets{}})
	ran := false
	res := g.Call(context.Background(), testTool(t), alice, json.RawMessage(`{"customer_id":"a","__confirm":true}`),
		func(context.Context, json.RawMessage) (*mcp.CallToolResult, error) {
			ran = true
			return &mcp.CallToolResult{}, nil
		})
	body := BodyOfResult(res)
	if ran || body.Code != CodeUpstreamUnavailable || body.RetryAfterMS <= 0 {
		t.Errorf("ran %v, code %q, retry_after_ms %d: want UPSTREAM_UNAVAILABLE with retry_after_ms and nothing run", ran, body.Code, body.RetryAfterMS)
	}
	if b, _ := json.Marshal(res); strings.Contains(string(b), errBudgetsDown.Error()) {
		t.Errorf("the store's error reached the client: %s", b)
	}
}
