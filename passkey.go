package interlock

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
)

// PasskeyVerifier checks the WebAuthn assertion of a decision on an
// approval that requires a passkey. The console implements it: it holds
// the approvers' registered credentials, which the gate never sees.
type PasskeyVerifier interface {
	// VerifyPasskey returns nil when v.Passkey is an assertion, by a
	// credential v.Tenant and v.Principal registered, over challenge.
	VerifyPasskey(ctx context.Context, a *Approval, v Vote, challenge []byte) error
}

// Errors of deciding an approval that requires a passkey.
var (
	ErrPasskeyRequired = errors.New("the rule accepts only decisions signed with a passkey in the console")
	ErrPasskeyInvalid  = errors.New("the passkey assertion does not sign this decision")
)

// UsePasskeys makes v the verifier of passkey-signed decisions. Without
// one, approvals that require a passkey can be neither decided nor run.
func (g *Gate) UsePasskeys(v PasskeyVerifier) { g.passkeys.Store(&v) }

// PasskeyChallenge is the WebAuthn challenge an approver signs to approve
// (or deny) a: bound to its id, its binding key, a hash of its summary and
// arguments, and the decision, so an assertion answers one decision on
// one approval and nothing else.
func (a *Approval) PasskeyChallenge(approve bool) ([]byte, error) {
	args, err := json.Marshal(a.Args)
	if err != nil {
		return nil, fmt.Errorf("encoding the arguments of %s: %w", a.ID, err)
	}
	summary, argsDigest := sha256.Sum256([]byte(a.Summary)), sha256.Sum256(args)
	h := sha256.New()
	for _, s := range []string{"interlock approval v1", a.ID, a.Key, decisionWord(approve)} {
		h.Write([]byte(s))
		h.Write([]byte{0})
	}
	h.Write(summary[:])
	h.Write(argsDigest[:])
	return h.Sum(nil), nil
}

// verifyVote checks that v carries a verified assertion over a's
// challenge for this decision.
func (g *Gate) verifyVote(ctx context.Context, a *Approval, v Vote, approve bool) error {
	if len(v.Passkey) == 0 {
		return ErrPasskeyRequired
	}
	verifier := g.passkeys.Load()
	if verifier == nil {
		return ErrPasskeyRequired
	}
	challenge, err := a.PasskeyChallenge(approve)
	if err != nil {
		return err
	}
	if err := (*verifier).VerifyPasskey(ctx, a, v, challenge); err != nil {
		return fmt.Errorf("%w: %w", ErrPasskeyInvalid, err)
	}
	return nil
}

// verifySignedVotes checks every approval of an approved approval again
// before its call runs, so approvals written into the store around the
// console do not count.
func (g *Gate) verifySignedVotes(ctx context.Context, a *Approval) error {
	for _, v := range a.Approvals {
		if err := g.verifyVote(ctx, a, v, true); err != nil {
			g.log.WarnContext(ctx, "an approval without a valid passkey signature", "approval", a.ID, "approver", v.Principal, "error", clip(err.Error()))
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
func (g *Gate) DecideWithPasskey(ctx context.Context, id string, who Approver, approve bool, reason string, assertion json.RawMessage) (*Approval, error) {
	return g.decide(ctx, id, who, approve, reason, assertion)
}
