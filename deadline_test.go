package interlock_test

import (
	"context"
	"encoding/json"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/interlock-mcp/interlock"
	"github.com/interlock-mcp/interlock/approval"
	"github.com/interlock-mcp/interlock/config"
)

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
