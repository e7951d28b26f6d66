package interlock

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/interlock-mcp/interlock/audit"
	"github.com/interlock-mcp/interlock/budget"
)

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

// blindPeek sees room in every budget, as a peek does that a concurrent
// call's take followed: the take, as the call is about to run, refuses.
type blindPeek struct{ *budget.Memory }

func (blindPeek) Peek(context.Context, []BudgetTake) (bool, time.Duration, int, error) {
	return true, 0, 0, nil
}

// TestGateBudgetsAllOrNone has a call under several budgets, some of them
// spent, refused before anyone is asked and as it is about to run: a call
// refused by one budget counts against none, and the refusal names the
// budget with the longest wait and that wait.
func TestGateBudgetsAllOrNone(t *testing.T) {
	const confirmed = `{"customer_id":"acct_9931","__confirm":true}`
	a := Budget{Name: "a", Limit: 2, Window: time.Hour}
	b := Budget{Name: "b", Limit: 1, Window: time.Hour}
	c := Budget{Name: "c", Limit: 3, Window: time.Hour}
	long := Budget{Name: "long", Limit: 1, Window: 2 * time.Hour, PerTenant: true}
	tests := []struct {
		name    string
		budgets []Budget
		// full are the budgets filled to their limit 15 minutes before
		// the call.
		full []Budget
		// spent names the budget that refuses the call, "" when it runs;
		// wait is the retry_after then.
		spent string
		wait  time.Duration
		// counts are the calls each budget holds after the call.
		counts map[string]int
	}{
		{"two with room", []Budget{a, b}, nil, "", 0, map[string]int{"a": 1, "b": 1}},
		{"two, the second spent", []Budget{a, b}, []Budget{b}, "b", 45 * time.Minute, map[string]int{"a": 0, "b": 1}},
		{"two, the first spent", []Budget{b, a}, []Budget{b}, "b", 45 * time.Minute, map[string]int{"a": 0, "b": 1}},
		{"three with room", []Budget{a, c, long}, nil, "", 0, map[string]int{"a": 1, "c": 1, "long": 1}},
		{"three, the last spent", []Budget{a, c, b}, []Budget{b}, "b", 45 * time.Minute, map[string]int{"a": 0, "c": 0, "b": 1}},
		{"three, two spent: the longest wait", []Budget{b, c, long}, []Budget{b, long}, "long", 105 * time.Minute,
			map[string]int{"b": 1, "c": 0, "long": 1}},
		{"one budget twice counts once", []Budget{a, a}, nil, "", 0, map[string]int{"a": 1}},
	}
	for _, tt := range tests {
		for _, when := range []string{"before asking", "as it runs"} {
			t.Run(tt.name+"/"+when, func(t *testing.T) {
				synctest.Test(t, func(t *testing.T) {
					ctx := context.Background()
					m := budget.NewMemory()
					var store BudgetStore = m
					if when == "as it runs" {
						store = blindPeek{m}
					}
					log := &memoryAudit{}
					d := Decision{Mode: ModeFlag, Rule: "reminders", Budgets: tt.budgets}
					g := newGate(t, fixedPolicy{d: d}, &GateOptions{Getenv: env("false"), Logger: quiet, Audit: log, Budgets: store})
					c := &Call{Identity: alice}
					for _, f := range tt.full {
						_, takes := budgetsOf(c, Decision{Budgets: []Budget{f}})
						for range f.Limit {
							if ok, _, _, err := m.Take(ctx, takes); !ok || err != nil {
								t.Fatal(ok, err)
							}
						}
					}
					time.Sleep(15 * time.Minute)
					ran := false
					res := g.Call(ctx, testTool(t), alice, json.RawMessage(confirmed),
						func(context.Context, json.RawMessage) (*mcp.CallToolResult, error) {
							ran = true
							return &mcp.CallToolResult{}, nil
						})
					body := BodyOfResult(res)
					if tt.spent == "" {
						if !ran || body.Code != "" {
							t.Errorf("the call did not run: %s %s", body.Code, body.Message)
						}
					} else {
						if ran || body.Code != CodeRateLimited || !strings.Contains(body.Message, fmt.Sprintf("Budget %q ", tt.spent)) {
							t.Errorf("ran %v, code %q, message %q; want RATE_LIMITED by budget %q", ran, body.Code, body.Message, tt.spent)
						}
						if body.RetryAfterMS != tt.wait.Milliseconds() {
							t.Errorf("retry_after_ms = %d, want %d", body.RetryAfterMS, tt.wait.Milliseconds())
						}
						for r := range log.Records(ctx, 1) {
							if want := fmt.Sprintf("budget %q is spent", tt.spent); r.Detail != want {
								t.Errorf("the audit record's detail is %q, want %q", r.Detail, want)
							}
						}
					}
					for _, bu := range tt.budgets {
						_, takes := budgetsOf(c, Decision{Budgets: []Budget{bu}})
						if got, want := m.Count(takes[0].Key), tt.counts[bu.Name]; got != want {
							t.Errorf("budget %s holds %d calls, want %d", bu.Name, got, want)
						}
					}
				})
			})
		}
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

func (failingBudgets) Peek(context.Context, []BudgetTake) (bool, time.Duration, int, error) {
	return false, 0, 0, errBudgetsDown
}

func (failingBudgets) Take(context.Context, []BudgetTake) (bool, time.Duration, int, error) {
	return false, 0, 0, errBudgetsDown
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
	if want := "interlock's budget store cannot be reached, so " + testTool(t).Name + " cannot run now; nothing ran."; body.Message != want {
		t.Errorf("message %q, want %q", body.Message, want)
	}
	if b, _ := json.Marshal(res); strings.Contains(string(b), errBudgetsDown.Error()) {
		t.Errorf("the store's error reached the client: %s", b)
	}
}
