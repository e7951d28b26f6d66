package interlock

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/interlock-mcp/interlock/approval"
	"github.com/interlock-mcp/interlock/audit"
)

// PasskeyVerifier checks the WebAuthn assertion of a decision on an
// approval that requires a passkey. The console implements it: it holds
// the approvers' registered credentials, which the gate never sees.
type PasskeyVerifier interface {
	// VerifyPasskey returns nil when v.Passkey is an assertion, by a
	// credential v.Tenant and v.Principal registered, over challenge. The
	// same assertion is verified again before the approved call runs, so
	// one that was accepted once must pass again. An error that wraps
	// [ErrPasskeyReplayed] is recorded in the audit log.
	VerifyPasskey(ctx context.Context, a *approval.Approval, v approval.Vote, challenge []byte) error
}

// Errors of deciding an approval that requires a passkey.
var (
	ErrPasskeyRequired = errors.New("the rule accepts only decisions signed with a passkey in the console")
	ErrPasskeyInvalid  = errors.New("the passkey assertion does not sign this decision")
	// ErrPasskeyReplayed is an assertion whose signature counter is not
	// above the one its credential presented last: a copy of an earlier
	// assertion, or one made by a clone of the authenticator (WebAuthn
	// §6.1.1, "Signature Counter Considerations").
	ErrPasskeyReplayed = errors.New("the passkey's signature counter did not grow")
)

// verifyVote checks that v carries a verified assertion over a's
// challenge for this decision.
func (s *ApprovalService) verifyVote(ctx context.Context, a *approval.Approval, v approval.Vote) error {
	if len(v.Passkey) == 0 {
		return ErrPasskeyRequired
	}
	if s.passkeys == nil {
		return ErrPasskeyRequired
	}
	challenge, err := a.PasskeyChallenge(v.Verdict)
	if err != nil {
		return err
	}
	if err := s.passkeys.VerifyPasskey(ctx, a, v, challenge); err != nil {
		if errors.Is(err, ErrPasskeyReplayed) {
			// A valid signature with a stale counter means the approver's
			// key may be in two places: worth a record, not only a refusal.
			s.RecordEvent(ctx, &audit.Record{Event: "passkey_refused", Tenant: a.Tenant, Principal: v.Principal, Tool: a.Tool,
				Upstream: a.Upstream, Rule: a.Rule, Approval: a.ID, Caller: a.Principal, RuleApprovers: a.Approvers,
				Detail: clip(fmt.Sprintf("%s: %s's passkey to %s %s's call refused: %v", a.ID, v.Principal,
					v.Verdict, a.Principal, err))})
		}
		return fmt.Errorf("%w: %w", ErrPasskeyInvalid, err)
	}
	return nil
}

// verifySignedVotes checks every approval of an approved approval again
// before its call runs, so approvals written into the store around the
// console do not count.
func (s *ApprovalService) verifySignedVotes(ctx context.Context, a *approval.Approval) error {
	for _, v := range a.Approvals {
		if v.Verdict == "" {
			v.Verdict = approval.Approve
		}
		if err := s.verifyVote(ctx, a, v); err != nil {
			s.log.WarnContext(ctx, "an approval without a valid passkey signature", "approval", a.ID, "approver", v.Principal, "error", clip(err.Error()))
			return &Error{Code: CodePermissionDenied,
				Message: fmt.Sprintf("The approval %s of %s is not signed with an approver's passkey; nothing ran.", a.ID, a.Tool),
				Hint:    "Ask the approvers to decide the call in the console with their passkeys."}
		}
	}
	return nil
}

// DecideWithPasskey records who's decision on the approval id together
// with the WebAuthn assertion they signed in the console. An approval that
// requires a passkey can only be decided this way; the assertion is
// verified now and again before the call runs.
func (s *ApprovalService) DecideWithPasskey(ctx context.Context, id string, who Identity, v approval.Verdict, reason string, assertion json.RawMessage) (*approval.Approval, error) {
	return s.decide(ctx, id, who, v, reason, assertion)
}
