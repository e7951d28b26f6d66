package interlock_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/interlock-mcp/interlock"
	"github.com/interlock-mcp/interlock/approval"
	"github.com/interlock-mcp/interlock/audit"
)

// payoutsNeedAPasskey is the policy of the passkey tests: bob approves
// pay_out, with a passkey.
const payoutsNeedAPasskey = `
rules:
  - name: payouts
    match: {tools: [pay_out]}
    mode: approval
    approvers: [bob]
    require_passkey: true
`

// signingVerifier stands in for the console: an "assertion" is the JSON
// encoding of the challenge it signs, made by the approver it names.
type signingVerifier struct{}

func (signingVerifier) VerifyPasskey(_ context.Context, _ *approval.Approval, v approval.Vote, challenge []byte) error {
	var signed []byte
	if err := json.Unmarshal(v.Passkey, &signed); err != nil {
		return err
	}
	if !bytes.Equal(signed, challenge) {
		return errors.New("signed another challenge")
	}
	return nil
}

func assertionOver(t *testing.T, a *approval.Approval, approve approval.Verdict) json.RawMessage {
	t.Helper()
	challenge, err := a.PasskeyChallenge(approve)
	if err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(challenge)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestPasskeyApprovals: an approval whose rule requires a passkey is
// decided only with an assertion over its own challenge, never through
// Decide, a grant, or a vote written into the store.
func TestPasskeyApprovals(t *testing.T) {
	ctx := context.Background()
	alice := interlock.Identity{Principal: "alice", Tenant: "acme"}
	bob := interlock.Identity{Principal: "bob", Tenant: "acme"}
	setup := func(t *testing.T, verifier interlock.PasskeyVerifier) (*interlock.Gate, func(args string) interlock.Body, *atomic.Int64) {
		g := approvalGateWith(t, payoutsNeedAPasskey, interlock.ApprovalOptions{Passkeys: verifier})
		tool, _ := interlock.NewTool("pay_out", "", interlock.HintsOf(nil), nil)
		runs := &atomic.Int64{}
		call := func(args string) interlock.Body {
			return interlock.BodyOfResult(g.Call(ctx, tool, alice, json.RawMessage(args), func(context.Context, json.RawMessage) (*mcp.CallToolResult, error) {
				runs.Add(1)
				return &mcp.CallToolResult{Content: []mcp.Content{}}, nil
			}))
		}
		return g, call, runs
	}
	pending := func(t *testing.T, g *interlock.Gate, call func(string) interlock.Body, args string) *approval.Approval {
		t.Helper()
		b := call(args)
		if b.Code != interlock.CodeApprovalPending {
			t.Fatalf("first call: %+v", b)
		}
		a, err := g.Approvals().Store().Get(ctx, b.ApprovalID)
		if err != nil {
			t.Fatal(err)
		}
		if !a.RequirePasskey {
			t.Fatalf("the approval does not record require_passkey: %+v", a)
		}
		return a
	}

	refusals := []struct {
		name    string
		decide  func(t *testing.T, g *interlock.Gate, a, other *approval.Approval) error
		wantErr error
	}{
		{"approve without an assertion", func(_ *testing.T, g *interlock.Gate, a, _ *approval.Approval) error {
			_, err := g.Approvals().Decide(ctx, a.ID, bob, approval.Approve, "")
			return err
		}, interlock.ErrPasskeyRequired},
		{"deny without an assertion", func(_ *testing.T, g *interlock.Gate, a, _ *approval.Approval) error {
			_, err := g.Approvals().Decide(ctx, a.ID, bob, approval.Deny, "")
			return err
		}, interlock.ErrPasskeyRequired},
		{"an assertion for another approval", func(t *testing.T, g *interlock.Gate, a, other *approval.Approval) error {
			_, err := g.Approvals().DecideWithPasskey(ctx, a.ID, bob, approval.Approve, "", assertionOver(t, other, approval.Approve))
			return err
		}, interlock.ErrPasskeyInvalid},
		{"a denial's assertion used to approve", func(t *testing.T, g *interlock.Gate, a, _ *approval.Approval) error {
			_, err := g.Approvals().DecideWithPasskey(ctx, a.ID, bob, approval.Approve, "", assertionOver(t, a, approval.Deny))
			return err
		}, interlock.ErrPasskeyInvalid},
		{"a standing grant", func(_ *testing.T, g *interlock.Gate, a, _ *approval.Approval) error {
			_, err := g.Approvals().GrantScope(ctx, a.ID, bob, interlock.GrantRequest{TTL: time.Hour, Uses: 5})
			if ie := (*interlock.Error)(nil); errors.As(err, &ie) && ie.Code == interlock.CodePermissionDenied {
				return interlock.ErrPasskeyRequired
			}
			return err
		}, interlock.ErrPasskeyRequired},
	}
	for _, tt := range refusals {
		t.Run("refused: "+tt.name, func(t *testing.T) {
			g, call, runs := setup(t, signingVerifier{})
			a := pending(t, g, call, `{"amount":100}`)
			other := pending(t, g, call, `{"amount":999}`)
			if err := tt.decide(t, g, a, other); !errors.Is(err, tt.wantErr) {
				t.Fatalf("decision: %v, want %v", err, tt.wantErr)
			}
			if b := call(`{"amount":100}`); b.Code != interlock.CodeApprovalPending || runs.Load() != 0 {
				t.Errorf("after the refusal the call answers %+v and ran %d times", b, runs.Load())
			}
		})
	}

	t.Run("without a verifier nothing can be decided", func(t *testing.T) {
		g, call, _ := setup(t, nil)
		a := pending(t, g, call, `{"amount":100}`)
		if _, err := g.Approvals().DecideWithPasskey(ctx, a.ID, bob, approval.Approve, "", assertionOver(t, a, approval.Approve)); !errors.Is(err, interlock.ErrPasskeyRequired) {
			t.Errorf("DecideWithPasskey: %v, want ErrPasskeyRequired", err)
		}
	})

	t.Run("an assertion over the approval's challenge approves it; the call runs once", func(t *testing.T) {
		g, call, runs := setup(t, signingVerifier{})
		a := pending(t, g, call, `{"amount":100}`)
		decided, err := g.Approvals().DecideWithPasskey(ctx, a.ID, bob, approval.Approve, "signed", assertionOver(t, a, approval.Approve))
		if err != nil {
			t.Fatal(err)
		}
		if decided.State(time.Now()) != approval.Approved || decided.Approvals[0].Tenant != "acme" || len(decided.Approvals[0].Passkey) == 0 {
			t.Fatalf("after the decision: %+v", decided)
		}
		if b := call(`{"amount":100}`); b.Code != "" || runs.Load() != 1 {
			t.Fatalf("the re-call: %+v, ran %d times", b, runs.Load())
		}
		if b := call(`{"amount":100}`); b.Code != interlock.CodeApprovalPending || runs.Load() != 1 {
			t.Errorf("a second re-call: %+v, ran %d times", b, runs.Load())
		}
	})

	t.Run("a vote written into the store around the gate does not run the call", func(t *testing.T) {
		g, call, runs := setup(t, signingVerifier{})
		a := pending(t, g, call, `{"amount":100}`)
		if _, err := g.Approvals().Store().Decide(ctx, a.ID, approval.Vote{Principal: "bob", Verdict: approval.Approve, At: time.Now()}); err != nil {
			t.Fatal(err)
		}
		if b := call(`{"amount":100}`); b.Code != interlock.CodePermissionDenied || runs.Load() != 0 {
			t.Errorf("the re-call: %+v, ran %d times", b, runs.Load())
		}
	})
}

// failingVerifier refuses every assertion with err.
type failingVerifier struct{ err error }

func (f failingVerifier) VerifyPasskey(context.Context, *approval.Approval, approval.Vote, []byte) error {
	return f.err
}

// TestPasskeyReplayIsRecorded: an assertion the verifier refuses as
// replayed, by its signature counter, is refused and recorded as
// passkey_refused, naming the approver, the approval and its caller; other
// refusals are only refused.
func TestPasskeyReplayIsRecorded(t *testing.T) {
	ctx := context.Background()
	alice := interlock.Identity{Principal: "alice", Tenant: "acme"}
	bob := interlock.Identity{Principal: "bob", Tenant: "acme"}
	tests := []struct {
		name     string
		err      error
		recorded bool
	}{
		{"a counter that did not grow", fmt.Errorf("%w: 4 after 5, credential q0pVkw5r1uwd", interlock.ErrPasskeyReplayed), true},
		{"a bad signature", errors.New("signature mismatch"), false},
		{"an unknown credential", errors.New("the assertion's credential is not one the approver registered"), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			log := &audit.Memory{}
			g := approvalGateWith(t, payoutsNeedAPasskey, interlock.ApprovalOptions{Passkeys: failingVerifier{tt.err}, Audit: log})
			tool, _ := interlock.NewTool("pay_out", "", interlock.HintsOf(nil), nil)
			b := interlock.BodyOfResult(g.Call(ctx, tool, alice, json.RawMessage(`{"amount":100}`), nil))
			if b.Code != interlock.CodeApprovalPending {
				t.Fatalf("the call: %+v", b)
			}
			_, err := g.Approvals().DecideWithPasskey(ctx, b.ApprovalID, bob, approval.Deny, "", json.RawMessage(`{}`))
			if !errors.Is(err, interlock.ErrPasskeyInvalid) || errors.Is(err, interlock.ErrPasskeyReplayed) != tt.recorded {
				t.Fatalf("DecideWithPasskey: %v", err)
			}
			recs := log.Events("passkey_refused")
			if !tt.recorded {
				if len(recs) != 0 {
					t.Errorf("recorded %+v", recs[0])
				}
				return
			}
			want := fmt.Sprintf("%s: bob's passkey to deny alice's call refused: %v", b.ApprovalID, tt.err)
			if len(recs) != 1 || recs[0].Tenant != "acme" || recs[0].Principal != "bob" || recs[0].Caller != "alice" ||
				recs[0].Approval != b.ApprovalID || recs[0].Tool != "pay_out" || recs[0].Rule != "payouts" ||
				!slices.Equal(recs[0].RuleApprovers, []string{"bob"}) || recs[0].Detail != want {
				t.Errorf("records %+v, want one with detail %q", *recs[0], want)
			}
		})
	}
}
