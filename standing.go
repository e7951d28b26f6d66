package interlock

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/interlock-mcp/interlock/approval"
	"github.com/interlock-mcp/interlock/audit"
)

// Condition is a compiled When of a standing grant.
type Condition func(c *Call) (bool, error)

// GrantRequest is an approver's grant of a scope, made from one of the
// approvals they may decide.
type GrantRequest struct {
	When   string
	TTL    time.Duration
	Uses   int
	Reason string
}

// ConfirmedByGrant marks a call a standing grant confirmed.
const ConfirmedByGrant = "grant"

// GrantScope approves the approval id and grants its caller the scope req
// describes for the same tool, under the same rule: who must be allowed to
// decide the approval. The waiting call is the grant's first use: the
// approval is closed, and its re-call runs under the grant.
func (s *ApprovalService) GrantScope(ctx context.Context, id string, who Identity, req GrantRequest) (*approval.StandingGrant, error) {
	if !s.OffersGrants() {
		return nil, errors.New("no standing grants are kept here")
	}
	if err := req.check(s.compile); err != nil {
		return nil, err
	}
	pending, err := s.approvedFor(ctx, id, who)
	if err != nil {
		return nil, StoreUnavailable(err, "nothing was decided")
	}
	ruling := approval.Ruling{Quorum: pending.Quorum, RequirePasskey: pending.RequirePasskey, RuleDigest: pending.RuleDigest}
	if why := ruling.GrantRefusal(); why != "" {
		return nil, &Error{Code: CodePermissionDenied, Message: fmt.Sprintf(why, pending.Tool),
			Hint: "Approve this call alone; every further call asks the approvers again."}
	}
	a, err := s.Decide(ctx, id, who, approval.Approve, req.Reason)
	if err != nil {
		return nil, err
	}
	if a.State(time.Now()) == approval.Approved {
		if _, err := s.store.Consume(ctx, a.ID); err != nil {
			return nil, err
		}
	}
	now := time.Now()
	sg := &approval.StandingGrant{ID: approval.NewID("grt_"), Tool: a.Tool, When: req.When, Tenant: a.Tenant, Principal: a.Principal,
		Rule: a.Rule, RuleDigest: a.RuleDigest, Approvers: a.Approvers, GrantedBy: who.Principal, GranterGroups: who.Groups,
		Reason: clip(req.Reason), CreatedAt: now, ExpiresAt: now.Add(req.TTL), Uses: req.Uses}
	if err := s.grants.AddGrant(ctx, sg); err != nil {
		return nil, err
	}
	s.RecordEvent(ctx, &audit.Record{Event: "grant_created", Tenant: sg.Tenant, Principal: who.Principal, Tool: sg.Tool,
		Rule: sg.Rule, Grant: sg.ID, Approval: a.ID, Caller: sg.Principal, RuleApprovers: sg.Approvers, Reason: sg.Reason,
		Detail: fmt.Sprintf("%s for %s's calls where %q, %d uses until %s", sg.ID, sg.Principal, sg.When, sg.Uses, sg.ExpiresAt.UTC().Format(time.RFC3339))})
	return sg, nil
}

// check refuses a grant request with terms out of range or a condition
// that does not compile.
func (req GrantRequest) check(compile func(string) (Condition, error)) error {
	why := approval.TermsRefusal(req.TTL, req.Uses)
	if why == "" && req.When != "" {
		if _, err := compile(req.When); err != nil {
			why = "The condition does not compile: " + clip(err.Error())
		}
	}
	if why == "" {
		return nil
	}
	return &Error{Code: CodeValidationFailed, Message: why,
		Hint: fmt.Sprintf("Give a lifetime of at most %gh, from 1 to %d uses, and a CEL condition over args (or none).", approval.MaxGrantLifetime.Hours(), approval.MaxGrantUses)}
}

// RevokeGrant ends a standing grant, if who may ([approval.MayRevoke]).
func (s *ApprovalService) RevokeGrant(ctx context.Context, id string, who Identity) (*approval.StandingGrant, error) {
	if s.grants == nil {
		return nil, approval.ErrGrantUnknown
	}
	sg, err := s.grants.Grant(ctx, id)
	if err != nil {
		return nil, err
	}
	if approval.MayRevoke(who, sg) != nil {
		// Who may revoke a grant is who may see it: to anyone else, as
		// every face tells them, there is no such grant.
		return nil, approval.ErrGrantUnknown
	}
	if sg, err = s.grants.RevokeGrant(ctx, id, ""); err != nil {
		return nil, err
	}
	s.RecordEvent(ctx, &audit.Record{Event: "grant_revoked", Tenant: sg.Tenant, Principal: who.Principal, Tool: sg.Tool,
		Rule: sg.Rule, Grant: sg.ID, Caller: sg.Principal, RuleApprovers: sg.Approvers, Detail: sg.ID})
	return sg, nil
}

// VoidGrants ends every live grant whose rule no longer stands as it was
// made: stands reports whether a rule of that name and digest is in the
// policy now. A reload calls it with the new policy; each voided grant is
// audited. It returns the grants it voided.
func (s *ApprovalService) VoidGrants(ctx context.Context, stands func(rule, digest string) bool, why string) ([]*approval.StandingGrant, error) {
	if s.grants == nil {
		return nil, nil
	}
	live, err := s.grants.LiveGrants(ctx)
	if err != nil {
		return nil, err
	}
	var voided []*approval.StandingGrant
	for _, sg := range live {
		if stands(sg.Rule, sg.RuleDigest) {
			continue
		}
		sg, err := s.grants.RevokeGrant(ctx, sg.ID, why)
		if err != nil {
			return voided, err
		}
		voided = append(voided, sg)
		s.RecordEvent(ctx, &audit.Record{Event: "grant_voided", Tenant: sg.Tenant, Principal: sg.GrantedBy, Tool: sg.Tool,
			Rule: sg.Rule, Grant: sg.ID, Caller: sg.Principal, RuleApprovers: sg.Approvers,
			Detail: fmt.Sprintf("%s: %s", sg.ID, why)})
	}
	return voided, nil
}

// OffersGrants reports whether approvers may grant standing scopes: the
// service keeps grants and compiles their conditions.
func (s *ApprovalService) OffersGrants() bool { return s.grants != nil && s.compile != nil }

// Grants returns the grant store.
func (s *ApprovalService) Grants() approval.GrantStore { return s.grants }

// useGrant looks for a live grant that covers c as d decides it, under
// the rule of that digest ([approval.Covers]), and spends one of its uses.
// A condition that cannot be evaluated covers nothing.
func (s *ApprovalService) useGrant(ctx context.Context, c *Call, d Decision, digest string) (*approval.StandingGrant, error) {
	ruling := approval.Ruling{Rule: d.Rule, RuleDigest: digest, Approvers: d.Approvers, Quorum: d.Quorum, RequirePasskey: d.RequirePasskey}
	if s.grants == nil || s.compile == nil || ruling.GrantRefusal() != "" {
		return nil, nil
	}
	live, err := s.grants.LiveGrants(ctx)
	if err != nil {
		return nil, confirmationStoreDown(c, err)
	}
	now := time.Now()
	for _, sg := range live {
		granter, ok := s.currentIdentity(sg.Granter())
		if !ok || !approval.Covers(sg, c.Identity, c.Tool, ruling, granter, now) {
			continue
		}
		if sg.When != "" {
			cond, err := s.compile(sg.When)
			if err != nil {
				continue
			}
			if ok, err := cond(c); err != nil || !ok {
				continue
			}
		}
		ok, err := s.grants.UseGrant(ctx, sg.ID)
		if err != nil {
			return nil, confirmationStoreDown(c, err)
		}
		if ok {
			return sg, nil
		}
	}
	return nil, nil
}

// currentIdentity is who as the gate's directory knows them now, and
// whether they may still act at all; as given when the gate has no
// directory.
func (s *ApprovalService) currentIdentity(who Identity) (Identity, bool) {
	if s.identities == nil {
		return who, true
	}
	return s.identities(who)
}

// cachedConditions compiles each condition once: grants are checked on
// every call of their tool.
func cachedConditions(compile func(string) (Condition, error)) func(string) (Condition, error) {
	var mu sync.Mutex
	cache := map[string]Condition{}
	return func(expr string) (Condition, error) {
		mu.Lock()
		defer mu.Unlock()
		if c, ok := cache[expr]; ok {
			return c, nil
		}
		c, err := compile(expr)
		if err != nil {
			return nil, err
		}
		if len(cache) > 4096 {
			clear(cache)
		}
		cache[expr] = c
		return c, nil
	}
}
