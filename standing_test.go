// Approvals at the gate through its public API, with conditions compiled
// by package policy: an approved call's deadline to run, and standing
// grants, which cover calls only under the rule they were made under.

package interlock_test

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/interlock-mcp/interlock"
	"github.com/interlock-mcp/interlock/approval"
	"github.com/interlock-mcp/interlock/config"
	"github.com/interlock-mcp/interlock/policy"
)

// TestStandingGrants: an approver grants a scope from one approval; the
// next calls inside it run at once, a call outside its condition waits,
// and the grant ends with its uses, its lifetime, or a revocation.
func TestStandingGrants(t *testing.T) {
	ctx := context.Background()
	alice := interlock.Identity{Principal: "alice", Tenant: "acme"}
	bob := interlock.Identity{Principal: "bob", Tenant: "acme"}
	setup := func(t *testing.T) (*interlock.Gate, *interlock.Tool, *atomic.Int64) {
		g := approvalGate(t, `
rules:
  - name: refunds
    match: {tools: [refund_invoice]}
    mode: approval
    approvers: [bob, carol]
  - name: payouts
    match: {tools: [pay_out]}
    mode: approval
    approvers: [bob, carol]
    quorum: 2
`)
		tool, _ := interlock.NewTool("refund_invoice", "", interlock.HintsOf(nil), nil)
		return g, tool, &atomic.Int64{}
	}
	call := func(g *interlock.Gate, tool *interlock.Tool, runs *atomic.Int64, args string) interlock.Body {
		return interlock.BodyOfResult(g.Call(ctx, tool, alice, json.RawMessage(args), func(context.Context, json.RawMessage) (*mcp.CallToolResult, error) {
			runs.Add(1)
			return &mcp.CallToolResult{Content: []mcp.Content{}}, nil
		}))
	}

	t.Run("covers the calls its condition admits, up to its uses", func(t *testing.T) {
		g, tool, runs := setup(t)
		id := call(g, tool, runs, `{"invoice_id":"inv_1","amount":50}`).ApprovalID
		sg, err := g.Approvals().GrantScope(ctx, id, bob, interlock.GrantRequest{When: "num(args.amount) <= 100", TTL: time.Hour, Uses: 2, Reason: "small refunds today"})
		if err != nil {
			t.Fatal(err)
		}
		if b := call(g, tool, runs, `{"invoice_id":"inv_1","amount":50}`); b.Code != "" {
			t.Fatalf("the approved call: %+v", b)
		}
		if b := call(g, tool, runs, `{"invoice_id":"inv_2","amount":80}`); b.Code != "" {
			t.Fatalf("a call inside the grant: %+v", b)
		}
		if b := call(g, tool, runs, `{"invoice_id":"inv_3","amount":5000}`); b.Code != interlock.CodeApprovalPending {
			t.Errorf("a call outside the condition: %+v", b)
		}
		if b := call(g, tool, runs, `{"invoice_id":"inv_5","amount":10}`); b.Code != interlock.CodeApprovalPending {
			t.Errorf("after its two uses: %+v", b)
		}
		if runs.Load() != 2 {
			t.Errorf("ran %d times, want 2 (the waiting call, the grant's first use, and one more)", runs.Load())
		}
		if got, _ := g.Approvals().Grants().Grant(ctx, sg.ID); got.Used != 2 || got.Live(time.Now()) {
			t.Errorf("grant after use: %+v", got)
		}
	})
	t.Run("revoked", func(t *testing.T) {
		g, tool, runs := setup(t)
		id := call(g, tool, runs, `{"invoice_id":"inv_1","amount":50}`).ApprovalID
		sg, _ := g.Approvals().GrantScope(ctx, id, bob, interlock.GrantRequest{TTL: time.Hour, Uses: 10})
		if _, err := g.Approvals().RevokeGrant(ctx, sg.ID, interlock.Identity{Principal: "mallory", Tenant: "acme"}); !errors.Is(err, approval.ErrGrantUnknown) {
			t.Errorf("a stranger revokes: %v", err)
		}
		if _, err := g.Approvals().RevokeGrant(ctx, sg.ID, interlock.Identity{Principal: "carol", Tenant: "acme"}); err != nil {
			t.Fatalf("another approver revokes: %v", err)
		}
		if b := call(g, tool, runs, `{"invoice_id":"inv_1","amount":50}`); b.Code != interlock.CodeApprovalPending {
			t.Errorf("after revocation: %+v", b)
		}
	})
	t.Run("expires", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			g, tool, runs := setup(t)
			id := call(g, tool, runs, `{"invoice_id":"inv_1","amount":50}`).ApprovalID
			g.Approvals().GrantScope(ctx, id, bob, interlock.GrantRequest{TTL: time.Hour, Uses: 10})
			call(g, tool, runs, `{"invoice_id":"inv_1","amount":50}`)
			time.Sleep(time.Hour)
			if b := call(g, tool, runs, `{"invoice_id":"inv_2","amount":50}`); b.Code != interlock.CodeApprovalPending {
				t.Errorf("after its lifetime: %+v", b)
			}
		})
	})
	t.Run("limits", func(t *testing.T) {
		g, tool, runs := setup(t)
		id := call(g, tool, runs, `{"invoice_id":"inv_1","amount":50}`).ApprovalID
		for _, req := range []interlock.GrantRequest{
			{TTL: 25 * time.Hour, Uses: 1}, {TTL: time.Hour, Uses: 0}, {TTL: time.Hour, Uses: 1, When: "args.amount >"},
		} {
			if _, err := g.Approvals().GrantScope(ctx, id, bob, req); err == nil {
				t.Errorf("%+v was accepted", req)
			}
		}
		if _, err := g.Approvals().GrantScope(ctx, id, interlock.Identity{Principal: "alice", Tenant: "acme"}, interlock.GrantRequest{TTL: time.Hour, Uses: 1}); !errors.Is(err, approval.ErrSelfApproval) {
			t.Errorf("the caller grants themselves: %v", err)
		}
	})
	t.Run("not where a rule asks for a quorum", func(t *testing.T) {
		g, _, runs := setup(t)
		payout, _ := interlock.NewTool("pay_out", "", interlock.HintsOf(nil), nil)
		id := call(g, payout, runs, `{"amount":50}`).ApprovalID
		_, err := g.Approvals().GrantScope(ctx, id, bob, interlock.GrantRequest{TTL: time.Hour, Uses: 10})
		if e, ok := errors.AsType[*interlock.Error](err); !ok || e.Code != interlock.CodePermissionDenied {
			t.Fatalf("a grant under a quorum of two: %v", err)
		}
		if a, _ := g.Approvals().Store().Get(ctx, id); len(a.Approvals) != 0 {
			t.Errorf("the refused grant counted as a vote: %+v", a.Approvals)
		}
		if b := call(g, payout, runs, `{"amount":50}`); b.Code != interlock.CodeApprovalPending || runs.Load() != 0 {
			t.Errorf("the call after a refused grant: %+v, ran %d times", b, runs.Load())
		}
	})
}

// approvalGate is a gate for the rules of policy, with dry run off.
func approvalGate(t *testing.T, rules string) *interlock.Gate {
	t.Helper()
	return approvalGateWith(t, rules, interlock.ApprovalOptions{})
}

// approvalGateWith is approvalGate with the approval service o
// describes, its conditions compiled by package policy; the gate records
// to the service's audit log, if o names one.
func approvalGateWith(t *testing.T, rules string, o interlock.ApprovalOptions) *interlock.Gate {
	t.Helper()
	f, err := config.Parse("approvals.yaml", []byte(rules), func(string) (string, bool) { return "", false })
	if err != nil {
		t.Fatal(err)
	}
	o.CompileCondition = policy.CompileCondition
	g, err := interlock.NewGate(&f.Policy, &interlock.GateOptions{Approvals: interlock.NewApprovalService(o), Logger: slog.New(slog.DiscardHandler), Audit: o.Audit,
		Getenv: func(k string) string {
			if k == "MCP_DRY_RUN" {
				return "false"
			}
			return strings.Repeat("s", 32)
		}})
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// TestApprovedCallsHaveADeadline: an approved call runs only before its
// deadline to run (run_within, or the rule's timeout, from the vote that
// approved it); after it the re-call is told, and asks anew.
func TestApprovedCallsHaveADeadline(t *testing.T) {
	ctx := context.Background()
	alice := interlock.Identity{Principal: "alice", Tenant: "acme"}
	bob := interlock.Identity{Principal: "bob", Tenant: "acme"}
	tests := []struct {
		name, extra string
		// decideAfter is when bob approves; window the deadline after it.
		decideAfter, window time.Duration
	}{
		{"the rule's timeout, from the decision", "    timeout: 10m\n", 9 * time.Minute, 10 * time.Minute},
		{"run_within", "    timeout: 10m\n    run_within: 2m\n", time.Minute, 2 * time.Minute},
		{"run_within longer than the timeout", "    timeout: 1m\n    run_within: 30m\n", 30 * time.Second, 30 * time.Minute},
		{"the default timeout", "", time.Minute, interlock.DefaultApprovalTimeout},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				g := approvalGate(t, "rules:\n  - name: refunds\n    match: {tools: [refund_invoice]}\n    mode: approval\n    approvers: [bob]\n"+tt.extra)
				tool, _ := interlock.NewTool("refund_invoice", "", interlock.HintsOf(nil), nil)
				var runs atomic.Int64
				call := func() interlock.Body {
					return interlock.BodyOfResult(g.Call(ctx, tool, alice, json.RawMessage(`{"amount":5000}`),
						func(context.Context, json.RawMessage) (*mcp.CallToolResult, error) {
							runs.Add(1)
							return &mcp.CallToolResult{Content: []mcp.Content{}}, nil
						}))
				}
				first := call()
				time.Sleep(tt.decideAfter)
				a, err := g.Approvals().Decide(ctx, first.ApprovalID, bob, approval.Approve, "ok")
				if err != nil {
					t.Fatal(err)
				}
				if want := a.Approvals[0].At.Add(tt.window); !a.RunBy.Equal(want) {
					t.Errorf("run by %s, want %s", a.RunBy, want)
				}
				time.Sleep(tt.window)
				late := call()
				if late.Code != interlock.CodeApprovalPending || late.ApprovalID == first.ApprovalID ||
					!strings.Contains(late.Message, first.ApprovalID) || !strings.Contains(late.Message, "did not") {
					t.Errorf("the call after the deadline: %+v", late)
				}
				if runs.Load() != 0 {
					t.Errorf("the approved call ran after its deadline")
				}
				if got, _ := g.Approvals().Store().Get(ctx, first.ApprovalID); got.State(time.Now()) != approval.Lapsed {
					t.Errorf("the old approval is %s", got.State(time.Now()))
				}
				// The new approval, approved in time, runs.
				g.Approvals().Decide(ctx, late.ApprovalID, bob, approval.Approve, "")
				time.Sleep(tt.window - time.Second)
				if b := call(); b.Code != "" || runs.Load() != 1 {
					t.Errorf("the call inside the deadline: %+v, %d runs", b, runs.Load())
				}
			})
		})
	}
}

// TestGrantNeedsItsRuleUnchanged: even without a reload that voids it (a
// library's gate whose policy is swapped), a grant covers nothing once the
// rule that decides the call is not the one it was made under.
func TestGrantNeedsItsRuleUnchanged(t *testing.T) {
	ctx := context.Background()
	alice := interlock.Identity{Principal: "alice", Tenant: "acme"}
	bob := interlock.Identity{Principal: "bob", Tenant: "acme", Groups: []string{"finance"}}
	const base = "rules:\n  - name: refunds\n    match: {tools: [refund_invoice]}\n    mode: approval\n    approvers: [\"group:finance\"]\n"
	tests := []struct {
		name, next string
		covers     bool
	}{
		{"unchanged", base, true},
		{"its summary changed", base + "    summary: Refund {{.args.amount}}.\n", false},
		{"its timeout changed", base + "    timeout: 1m\n", false},
		{"another rule of the same approvers first", "rules:\n  - name: all-refunds\n    match: {tools: [refund_invoice]}\n    mode: approval\n    approvers: [\"group:finance\"]\n" + strings.TrimPrefix(base, "rules:\n"), false},
		{"now under a tenant's overlay", "tenants:\n  - name: acme\n    rules:\n      - name: refunds\n        match: {tools: [refund_invoice]}\n        mode: approval\n        approvers: [\"group:finance\"]\n", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := approvalGate(t, base)
			tool, _ := interlock.NewTool("refund_invoice", "", interlock.HintsOf(nil), nil)
			call := func() interlock.Body {
				return interlock.BodyOfResult(g.Call(ctx, tool, alice, json.RawMessage(`{"amount":5}`),
					func(context.Context, json.RawMessage) (*mcp.CallToolResult, error) {
						return &mcp.CallToolResult{Content: []mcp.Content{}}, nil
					}))
			}
			id := call().ApprovalID
			if _, err := g.Approvals().GrantScope(ctx, id, bob, interlock.GrantRequest{TTL: time.Hour, Uses: 5}); err != nil {
				t.Fatal(err)
			}
			if b := call(); b.Code != "" {
				t.Fatalf("the call the grant was made from: %+v", b)
			}
			f, err := config.Parse("next.yaml", []byte(tt.next), func(string) (string, bool) { return "", false })
			if err != nil {
				t.Fatal(err)
			}
			g.SetPolicy(&f.Policy, 0)
			b := call()
			if covered := b.Code == ""; covered != tt.covers {
				t.Errorf("covered: %t, want %t: %+v", covered, tt.covers, b)
			}
		})
	}
}
