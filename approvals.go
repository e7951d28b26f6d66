package interlock

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"time"

	"github.com/interlock-mcp/interlock/approval"
	"github.com/interlock-mcp/interlock/audit"
)

// ApprovalService is what approvers and the gate ask of approvals and
// standing grants: the REST face, the console and the CLI (through REST)
// list and decide approvals, grant scopes from them and revoke grants; the
// gate, in mode approval, asks for an approval, consumes an approved one
// and spends a grant's use. It is made before the gate and the console,
// which both take it, and keeps no state of its own: every replica on the
// same stores answers alike.
//
// Errors: the rules' answers (package approval's [approval.ErrUnknown],
// [approval.ErrForbidden], [approval.ErrAlreadyDecided], ...; a passkey's
// [ErrPasskeyRequired], [ErrPasskeyInvalid], [ErrPasskeyReplayed]; an
// [*Error] with its code) pass as they are; a store that failed under a
// decision is told as [StoreUnavailable] says. [refusal.Of] reads any of
// them for a face.
type ApprovalService struct {
	store    approval.Store
	grants   approval.GrantStore
	passkeys PasskeyVerifier
	// compile is nil when no standing grant can be made.
	compile    func(string) (Condition, error)
	identities func(Identity) (Identity, bool)
	audit      audit.Log
	log        *slog.Logger
}

// ApprovalOptions configure an [ApprovalService]. The zero value keeps
// approvals and grants in memory and offers no grants.
type ApprovalOptions struct {
	// Store keeps approvals; in memory when nil.
	Store approval.Store
	// Grants keeps standing grants; in memory when nil. CompileCondition
	// compiles their conditions (package policy's CompileCondition); with
	// none, no standing grant can be made.
	Grants           approval.GrantStore
	CompileCondition func(string) (Condition, error)
	// Identities tells who an identity is now: its groups as its
	// credentials name them today, and false when it has none left (a
	// removed key). A standing grant covers calls only while its granter
	// may still approve them. Without it, identities are taken as they
	// were when they acted.
	Identities func(Identity) (Identity, bool)
	// Passkeys verifies decisions signed with a passkey (the console's
	// registered credentials); without it, approvals that require a
	// passkey can be neither decided nor run.
	Passkeys PasskeyVerifier
	// Audit receives a record of every decision, grant and revocation,
	// and of what approvers do in the console; none when nil.
	Audit audit.Log
	// Logger hears what cannot be recorded; slog.Default() when nil.
	Logger *slog.Logger
}

// NewApprovalService returns the service of the stores o names.
func NewApprovalService(o ApprovalOptions) *ApprovalService {
	s := &ApprovalService{store: o.Store, grants: o.Grants, passkeys: o.Passkeys, identities: o.Identities, audit: o.Audit, log: o.Logger}
	if s.store == nil {
		s.store = approval.NewMemory()
	}
	if s.grants == nil {
		s.grants = approval.NewMemoryGrants()
	}
	if o.CompileCondition != nil {
		s.compile = cachedConditions(o.CompileCondition)
	}
	if s.log == nil {
		s.log = slog.Default()
	}
	return s
}

// Store returns the approval store, for listing and reading approvals;
// every face asks [approval.MaySee] of each before it shows one.
func (s *ApprovalService) Store() approval.Store { return s.store }

// RecordEvent appends a record of what an approver did (a decision, a
// sign-in), with its time set when unset; a failure to write it is
// logged.
func (s *ApprovalService) RecordEvent(ctx context.Context, rec *audit.Record) {
	recordEvent(ctx, s.audit, s.log, rec)
}

// Decide records who's verdict on the approval id: the rule must name
// them, and they cannot be the caller ([approval.MayDecide]). It returns
// the approval as it stands after the decision.
func (s *ApprovalService) Decide(ctx context.Context, id string, who Identity, v approval.Verdict, reason string) (*approval.Approval, error) {
	return s.decide(ctx, id, who, v, reason, nil)
}

func (s *ApprovalService) decide(ctx context.Context, id string, who Identity, verdict approval.Verdict, reason string, assertion json.RawMessage) (*approval.Approval, error) {
	a, err := s.approvedFor(ctx, id, who)
	if err != nil {
		return nil, StoreUnavailable(err, "nothing was decided")
	}
	if a.State(time.Now()) != approval.Pending {
		return nil, approval.ErrAlreadyDecided
	}
	vote := approval.Vote{Principal: who.Principal, Verdict: verdict, Reason: clip(reason), At: time.Now()}
	if a.RequirePasskey {
		vote.Tenant, vote.Passkey = who.Tenant, assertion
		if err := s.verifyVote(ctx, a, vote); err != nil {
			return nil, StoreUnavailable(err, "nothing was decided")
		}
	}
	a, err = s.store.Decide(ctx, id, vote)
	if err != nil {
		return nil, StoreUnavailable(err, "nothing was decided")
	}
	decision := audit.DecisionConfirmed
	if verdict == approval.Deny {
		decision = audit.DecisionDeclined
	}
	s.RecordEvent(ctx, &audit.Record{Event: "approval_decided", Tenant: a.Tenant, Principal: who.Principal, Tool: a.Tool,
		Upstream: a.Upstream, Rule: a.Rule, Decision: decision, Approval: a.ID, Caller: a.Principal,
		RuleApprovers: a.Approvers, Reason: vote.Reason,
		Detail: fmt.Sprintf("%s: %s the call of %s", a.ID, verdict.Past(), a.Principal)})
	return a, nil
}

// approvedFor returns the approval id if who may decide it
// ([approval.MayDecide]): the caller is told they cannot decide their own
// call, anyone else the rule does not name (another tenant's principal of
// the same name included) that they are not an approver of it.
func (s *ApprovalService) approvedFor(ctx context.Context, id string, who Identity) (*approval.Approval, error) {
	a, err := s.store.Get(ctx, id)
	if err != nil {
		return nil, err
	}
	if err := approval.MayDecide(who, a); err != nil {
		return nil, err
	}
	return a, nil
}

// Withdraw ends the pending approval id at its caller's word: who must be
// the caller (of the same tenant); the approval is then denied, its reason
// saying the caller withdrew it, so no approver can approve it any more
// and an identical call is answered as denied until it expires. It
// returns [approval.ErrUnknown] for an approval who did not ask for, and
// [approval.ErrAlreadyDecided] for one that is no longer pending.
func (s *ApprovalService) Withdraw(ctx context.Context, id string, who Identity) (*approval.Approval, error) {
	a, err := s.store.Get(ctx, id)
	if err != nil {
		return nil, StoreUnavailable(err, "nothing was withdrawn")
	}
	if a.Tenant != who.Tenant || a.Principal != who.Principal {
		return nil, approval.ErrUnknown
	}
	if a.State(time.Now()) != approval.Pending {
		return nil, approval.ErrAlreadyDecided
	}
	vote := approval.Vote{Principal: who.Principal, Tenant: who.Tenant, Verdict: approval.Deny, Reason: "withdrawn by its caller", At: time.Now()}
	if a, err = s.store.Decide(ctx, id, vote); err != nil {
		return nil, StoreUnavailable(err, "nothing was withdrawn")
	}
	s.RecordEvent(ctx, &audit.Record{Event: "approval_withdrawn", Tenant: a.Tenant, Principal: who.Principal, Tool: a.Tool,
		Upstream: a.Upstream, Rule: a.Rule, Decision: audit.DecisionDeclined, Approval: a.ID, Caller: a.Principal,
		RuleApprovers: a.Approvers, Reason: vote.Reason, Detail: a.ID + ": withdrawn by its caller"})
	return a, nil
}
