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
// describes, its conditions compiled by package policy.
func approvalGateWith(t *testing.T, rules string, o interlock.ApprovalOptions) *interlock.Gate {
	t.Helper()
	f, err := config.Parse("approvals.yaml", []byte(rules), func(string) (string, bool) { return "", false })
	if err != nil {
		t.Fatal(err)
	}
	o.CompileCondition = policy.CompileCondition
	g, err := interlock.NewGate(&f.Policy, &interlock.GateOptions{Approvals: interlock.NewApprovalService(o), Logger: slog.New(slog.DiscardHandler),
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
