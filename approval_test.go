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

	"github.com/interlock-mcp/interlock/approval"
	"github.com/interlock-mcp/interlock/audit"
)

// approvalRig is a gate whose refund tool needs approval by finance.
type approvalRig struct {
	gate *Gate
	tool *Tool
	rec  recorder
	log  *memoryAudit
}

func newApprovalRig(t *testing.T, quorum int, dryRun string) *approvalRig {
	t.Helper()
	r := &approvalRig{log: &memoryAudit{}}
	d := Decision{Mode: ModeApproval, Rule: "large-refunds", Approvers: []string{"bob", "carol", "group:finance"}, Quorum: quorum,
		Summarize: func(any) string { return "Refund 5,000.00 on inv_1001." }}
	r.gate = newGate(t, fixedPolicy{d: d}, &GateOptions{Getenv: env(dryRun), Logger: quiet, Audit: r.log,
		ApprovalURL: "http://127.0.0.1:8740/console/approvals"})
	r.tool, _ = NewTool("refund_invoice", "", HintsOf(nil), nil)
	return r
}

func (r *approvalRig) call(id Identity, args string) Body {
	return BodyOfResult(r.gate.Call(context.Background(), r.tool, id, json.RawMessage(args), r.rec.run))
}

const refundArgs = `{"invoice_id":"inv_1001","amount":5000}`

var (
	bob   = Identity{Principal: "bob", Tenant: "acme"}
	carol = Identity{Principal: "carol", Tenant: "acme"}
	dave  = Identity{Principal: "dave", Tenant: "acme", Groups: []string{"finance"}}
)

func TestApprovalHandshake(t *testing.T) {
	ctx := context.Background()
	t.Run("pending, then approved, runs exactly once", func(t *testing.T) {
		r := newApprovalRig(t, 1, "false")
		first := r.call(alice, refundArgs)
		if first.Code != CodeApprovalPending || !first.Retriable || first.ApprovalID == "" || first.RetryAfterMS <= 0 ||
			first.ApprovalURL != "http://127.0.0.1:8740/console/approvals/"+first.ApprovalID || first.Summary != "Refund 5,000.00 on inv_1001." ||
			first.ExpiresAt == "" || !strings.Contains(first.Message, "bob, carol, group:finance") {
			t.Fatalf("first call: %+v", first)
		}
		if again := r.call(alice, refundArgs); again.ApprovalID != first.ApprovalID {
			t.Errorf("the same call while pending made another approval: %s", again.ApprovalID)
		}
		if other := r.call(alice, `{"invoice_id":"inv_1001","amount":5001}`); other.ApprovalID == first.ApprovalID {
			t.Error("other arguments share the approval")
		}
		if _, err := r.gate.Approvals().Decide(ctx, first.ApprovalID, bob, approval.Approve, "looks right"); err != nil {
			t.Fatal(err)
		}
		if b := r.call(alice, refundArgs); b.Code != "" {
			t.Fatalf("approved call: %+v", b)
		}
		if r.rec.runs.Load() != 1 {
			t.Fatalf("ran %d times", r.rec.runs.Load())
		}
		if b := r.call(alice, refundArgs); b.Code != CodeApprovalPending || b.ApprovalID == first.ApprovalID {
			t.Errorf("a second run needs a new approval: %+v", b)
		}
		var confirmed *audit.Record
		for rec := range r.log.Records(ctx, 1) {
			if rec.Decision == audit.DecisionConfirmed && rec.Outcome == audit.OutcomeOK {
				confirmed = rec
			}
		}
		if confirmed == nil || confirmed.ConfirmedBy != "approval" || strings.Join(confirmed.Approvers, ",") != "bob" {
			t.Errorf("the audit does not name the approver: %+v", confirmed)
		}
	})
	t.Run("who may decide", func(t *testing.T) {
		r := newApprovalRig(t, 1, "false")
		id := r.call(alice, refundArgs).ApprovalID
		tests := []struct {
			who  Identity
			want error
		}{
			{Identity{Principal: "alice", Tenant: "acme", Groups: []string{"finance"}}, approval.ErrSelfApproval},
			{Identity{Principal: "mallory", Tenant: "acme"}, approval.ErrNotAnApprover},
			{Identity{Principal: "mallory", Tenant: "acme", Groups: []string{"sales"}}, approval.ErrNotAnApprover},
			{Identity{Principal: "bob", Tenant: "globex"}, approval.ErrNotAnApprover},
			{Identity{Principal: "dave", Tenant: "globex", Groups: []string{"finance"}}, approval.ErrNotAnApprover},
		}
		for _, tt := range tests {
			if _, err := r.gate.Approvals().Decide(ctx, id, tt.who, approval.Approve, ""); !errors.Is(err, tt.want) {
				t.Errorf("%+v: %v, want %v", tt.who, err, tt.want)
			}
		}
		if _, err := r.gate.Approvals().Decide(ctx, id, dave, approval.Approve, ""); err != nil {
			t.Errorf("a member of the named group: %v", err)
		}
		if _, err := r.gate.Approvals().Decide(ctx, "apr_nonexistent", bob, approval.Approve, ""); !errors.Is(err, approval.ErrUnknown) {
			t.Errorf("unknown id: %v", err)
		}
	})
	t.Run("one denial ends it", func(t *testing.T) {
		r := newApprovalRig(t, 2, "false")
		id := r.call(alice, refundArgs).ApprovalID
		r.gate.Approvals().Decide(ctx, id, bob, approval.Approve, "")
		if _, err := r.gate.Approvals().Decide(ctx, id, carol, approval.Deny, "not this quarter"); err != nil {
			t.Fatal(err)
		}
		b := r.call(alice, refundArgs)
		if b.Code != CodeDeclined || b.Retriable || !strings.Contains(b.Message, "carol denied") || !strings.Contains(b.Message, "not this quarter") {
			t.Errorf("after a denial: %+v", b)
		}
		if _, err := r.gate.Approvals().Decide(ctx, id, dave, approval.Approve, ""); !errors.Is(err, approval.ErrAlreadyDecided) {
			t.Errorf("deciding a denied approval: %v", err)
		}
		if r.rec.runs.Load() != 0 {
			t.Error("the call ran")
		}
	})
	t.Run("a quorum of two distinct people", func(t *testing.T) {
		r := newApprovalRig(t, 2, "false")
		id := r.call(alice, refundArgs).ApprovalID
		r.gate.Approvals().Decide(ctx, id, bob, approval.Approve, "")
		if _, err := r.gate.Approvals().Decide(ctx, id, bob, approval.Approve, ""); !errors.Is(err, approval.ErrAlreadyVoted) {
			t.Errorf("the same approver twice: %v", err)
		}
		if b := r.call(alice, refundArgs); b.Code != CodeApprovalPending {
			t.Fatalf("one of two: %+v", b)
		}
		r.gate.Approvals().Decide(ctx, id, dave, approval.Approve, "")
		if b := r.call(alice, refundArgs); b.Code != "" || r.rec.runs.Load() != 1 {
			t.Errorf("two of two: %+v, ran %d", b, r.rec.runs.Load())
		}
	})
	t.Run("no decision in time", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			r := newApprovalRig(t, 1, "false")
			id := r.call(alice, refundArgs).ApprovalID
			time.Sleep(DefaultApprovalTimeout)
			if b := r.call(alice, refundArgs); b.Code != CodeCancelled || !b.Retriable {
				t.Errorf("after the timeout: %+v", b)
			}
			if _, err := r.gate.Approvals().Decide(ctx, id, bob, approval.Approve, ""); !errors.Is(err, approval.ErrAlreadyDecided) {
				t.Errorf("approving an expired approval: %v", err)
			}
			if b := r.call(alice, refundArgs); b.Code != CodeApprovalPending || b.ApprovalID == id {
				t.Errorf("the call after that asks anew: %+v", b)
			}
		})
	})
	t.Run("dry run asks nobody", func(t *testing.T) {
		r := newApprovalRig(t, 1, "")
		if b := r.call(alice, refundArgs); b.Code != CodeDryRunPreview || b.ApprovalID != "" {
			t.Errorf("%+v", b)
		}
		if pending, _ := r.gate.Approvals().Store().List(ctx); len(pending) != 0 {
			t.Errorf("dry run made %d approvals", len(pending))
		}
	})
	t.Run("concurrent re-calls run once", func(t *testing.T) {
		r := newApprovalRig(t, 1, "false")
		id := r.call(alice, refundArgs).ApprovalID
		r.gate.Approvals().Decide(ctx, id, bob, approval.Approve, "")
		var wg sync.WaitGroup
		for range 50 {
			wg.Go(func() { r.call(alice, refundArgs) })
		}
		wg.Wait()
		if r.rec.runs.Load() != 1 {
			t.Errorf("ran %d times", r.rec.runs.Load())
		}
	})
}

// TestApprovalURLIsShown: a client of an earlier protocol that declared
// URL-mode elicitation is also sent the approval's link; the call answers
// APPROVAL_PENDING at once all the same.
func TestApprovalURLIsShown(t *testing.T) {
	shown := make(chan *mcp.ElicitParams, 1)
	server := mcp.NewServer(&mcp.Implementation{Name: "billing"}, nil)
	d := Decision{Mode: ModeApproval, Approvers: []string{"bob"}, Summarize: func(any) string { return "Refund." }}
	g := newGate(t, fixedPolicy{d: d}, &GateOptions{Getenv: env("false"), Logger: quiet, ApprovalURL: "http://127.0.0.1:8740/console/approvals"})
	g.AddTool(server, &mcp.Tool{Name: "refund_invoice", InputSchema: map[string]any{"type": "object"}},
		func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return &mcp.CallToolResult{}, nil
		})
	st, ct := mcp.NewInMemoryTransports()
	ss, err := server.Connect(context.Background(), st, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ss.Close()
	client := mcp.NewClient(&mcp.Implementation{Name: "c"}, &mcp.ClientOptions{
		Capabilities: &mcp.ClientCapabilities{Elicitation: &mcp.ElicitationCapabilities{URL: &mcp.URLElicitationCapabilities{}}},
		ElicitationHandler: func(_ context.Context, req *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
			shown <- req.Params
			return &mcp.ElicitResult{Action: "accept"}, nil
		}})
	cs, err := client.Connect(context.Background(), ct, &mcp.ClientSessionOptions{ProtocolVersion: "2025-11-25"})
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "refund_invoice", Arguments: map[string]any{"amount": 5000}})
	if err != nil {
		t.Fatal(err)
	}
	b := BodyOfResult(res)
	if b.Code != CodeApprovalPending {
		t.Fatalf("body %+v", b)
	}
	select {
	case p := <-shown:
		if p.Mode != "url" || p.URL != b.ApprovalURL || p.ElicitationID != b.ApprovalID {
			t.Errorf("shown %+v for %+v", p, b)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the approval URL was not shown")
	}
}

// slowWaiting is an approval store whose Waiting takes a while, as a remote
// store's may: calls made at once all count before any asks.
type slowWaiting struct{ *approval.Memory }

func (s slowWaiting) Waiting(ctx context.Context, tenant, principal string) ([]*approval.Approval, error) {
	time.Sleep(20 * time.Millisecond)
	return s.Memory.Waiting(ctx, tenant, principal)
}

// TestPendingLimitAtOnce: calls with new arguments made at once by one
// caller ask for no more approvals than the limit, however slow the store.
func TestPendingLimitAtOnce(t *testing.T) {
	d := Decision{Mode: ModeApproval, Rule: "large-refunds", Approvers: []string{"bob"}, MaxPending: 3,
		Summarize: func(any) string { return "Refund." }}
	var rec recorder
	store := slowWaiting{approval.NewMemory()}
	gate := newGate(t, fixedPolicy{d: d}, &GateOptions{Getenv: env("false"), Logger: quiet,
		Approvals: NewApprovalService(ApprovalOptions{Store: store})})
	tool, _ := NewTool("refund_invoice", "", HintsOf(nil), nil)
	var wg sync.WaitGroup
	var limited atomic.Int32
	for amount := range 8 {
		wg.Go(func() {
			args := fmt.Sprintf(`{"invoice_id":"inv_1001","amount":%d}`, amount)
			if BodyOfResult(gate.Call(context.Background(), tool, alice, json.RawMessage(args), rec.run)).Code == CodeRateLimited {
				limited.Add(1)
			}
		})
	}
	wg.Wait()
	if pending, _ := store.Memory.List(context.Background()); len(pending) != 3 || limited.Load() != 5 {
		t.Errorf("%d approvals asked for and %d calls refused, want 3 and 5", len(pending), limited.Load())
	}
}

// TestPendingApprovalsPerCaller: a caller may have at most the rule's
// max_pending approvals waiting at once (DefaultMaxPending when it says
// none), so an agent looping over new arguments cannot flood the
// approvers; the same call again, another tenant's principal of the same
// name, and a new call once one is decided still get their approval.
func TestPendingApprovalsPerCaller(t *testing.T) {
	ctx := context.Background()
	for _, tt := range []struct {
		maxPending, limit int
	}{{3, 3}, {0, DefaultMaxPending}} {
		t.Run(fmt.Sprintf("max_pending %d", tt.maxPending), func(t *testing.T) {
			d := Decision{Mode: ModeApproval, Rule: "large-refunds", Approvers: []string{"bob"}, MaxPending: tt.maxPending,
				Summarize: func(any) string { return "Refund." }}
			var rec recorder
			gate := newGate(t, fixedPolicy{d: d}, &GateOptions{Getenv: env("false"), Logger: quiet})
			tool, _ := NewTool("refund_invoice", "", HintsOf(nil), nil)
			call := func(id Identity, amount int) Body {
				args := fmt.Sprintf(`{"invoice_id":"inv_1001","amount":%d}`, amount)
				return BodyOfResult(gate.Call(ctx, tool, id, json.RawMessage(args), rec.run))
			}
			var first string
			for amount := range tt.limit {
				b := call(alice, amount)
				if b.Code != CodeApprovalPending {
					t.Fatalf("approval %d of %d: %+v", amount+1, tt.limit, b)
				}
				if amount == 0 {
					first = b.ApprovalID
				}
			}
			over := call(alice, tt.limit)
			if over.Code != CodeRateLimited || !strings.Contains(over.Message, fmt.Sprintf("%d approvals waiting", tt.limit)) {
				t.Errorf("one more than the limit: %+v", over)
			}
			if pending, _ := gate.Approvals().Store().List(ctx); len(pending) != tt.limit {
				t.Errorf("%d approvals waiting for the approver, want %d", len(pending), tt.limit)
			}
			if again := call(alice, 0); again.Code != CodeApprovalPending || again.ApprovalID != first {
				t.Errorf("the first call again: %+v", again)
			}
			for _, other := range []Identity{{Principal: "alice", Tenant: "globex"}, {Principal: "erin", Tenant: "acme"}} {
				if b := call(other, tt.limit); b.Code != CodeApprovalPending {
					t.Errorf("%+v, with none waiting: %+v", other, b)
				}
			}
			if _, err := gate.Approvals().Decide(ctx, first, bob, approval.Deny, ""); err != nil {
				t.Fatal(err)
			}
			if b := call(alice, tt.limit); b.Code != CodeApprovalPending {
				t.Errorf("once one is decided: %+v", b)
			}
			if rec.runs.Load() != 0 {
				t.Errorf("%d calls ran", rec.runs.Load())
			}
		})
	}
}
