package approval

import (
	"fmt"
	"time"
)

// Subject is what every object an approver may look at comes down to for
// the rules below: an approval, a grant, a line of history, a live event.
// All of them concern one caller's calls in one tenant.
type Subject struct {
	Tenant string
	// Caller is the principal whose call (or calls) it concerns.
	Caller string
	// Approvers are who the rule names as approvers: principals, or
	// "group:NAME", of Tenant.
	Approvers []string
	// Deciders are the principals of Tenant who decided: voted, denied or
	// granted.
	Deciders []string
}

// MaySee reports whether who may see s: the caller, an approver the rule
// names, or one who decided, always of s's tenant. Everyone else is told
// it does not exist.
func MaySee(who Identity, s Subject) bool {
	if who.Tenant != s.Tenant {
		return false
	}
	if who.Principal == s.Caller || who.Named(s.Approvers) {
		return true
	}
	for _, p := range s.Deciders {
		if p == who.Principal {
			return true
		}
	}
	return false
}

// MayDecide reports whether who may approve or deny a: named by the rule
// (as a principal or through a group), of the call's tenant, and never the
// caller of the call itself. It does not look at a's state.
func MayDecide(who Identity, a *Approval) error {
	caller := Identity{Tenant: a.Tenant, Principal: a.Principal}
	switch {
	case who.Is(caller):
		return ErrSelfApproval
	case who.Tenant != a.Tenant || !who.Named(a.Approvers):
		return ErrNotAnApprover
	}
	return nil
}

// MayRevoke reports whether who may revoke the grant: whoever may see it.
// Revoking only takes a permission away, so its caller may give it up too.
func MayRevoke(who Identity, g *StandingGrant) error {
	if !MaySee(who, g.Subject()) {
		return ErrNotAnApprover
	}
	return nil
}

// Ruling is how the policy decides a call now: the rule that decides it,
// the digest of that rule's definition, and what it asks of approvers.
type Ruling struct {
	Rule, RuleDigest string
	Approvers        []string
	Quorum           int
	RequirePasskey   bool
}

// GrantRefusal says why no standing grant may stand for the rule r rules
// by (a format for the tool's name), or "" when one may.
func (r Ruling) GrantRefusal() string {
	switch {
	case r.Quorum > 1:
		// One person's grant would stand in for the others.
		return fmt.Sprintf("The rule asks %d approvers for each call of %%s, so no one approver may grant a standing scope.", r.Quorum)
	case r.RequirePasskey:
		// A grant would let later calls run without the signature.
		return "The rule asks for an approver's passkey on each call of %s, so no standing scope may be granted."
	case r.RuleDigest == "":
		return "The approval of %s names no rule a grant could stand for, so no standing scope may be granted."
	}
	return ""
}

// Covers reports whether the grant covers a call of tool by caller that
// the policy decides as r, at now, before the grant's condition over the
// arguments is evaluated. A grant stands for the rule that made it: the
// same rule, unchanged, must decide the call; it never stands in for a
// quorum or a passkey; and its granter must still be one whom the rule
// names as an approver (granter, as the directory knows them now).
func Covers(g *StandingGrant, caller Identity, tool string, r Ruling, granter Identity, now time.Time) bool {
	switch {
	case !g.Live(now),
		g.Tool != tool,
		!caller.Is(Identity{Tenant: g.Tenant, Principal: g.Principal}),
		r.GrantRefusal() != "",
		g.Rule != r.Rule || g.RuleDigest != r.RuleDigest,
		!granter.Is(g.Granter()),
		granter.Is(caller),
		!granter.Named(r.Approvers):
		return false
	}
	return true
}
