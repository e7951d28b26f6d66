package approval

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// The bounds of a standing grant: how long it may last and how many calls
// it may confirm.
const (
	MaxGrantLifetime = 24 * time.Hour
	MaxGrantUses     = 10000
)

// ParseLifetime reads a grant's lifetime as an approver writes it, a Go
// duration such as "2h"; every face reads lifetimes with it. The error is
// written for that approver.
func ParseLifetime(s string) (time.Duration, error) {
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, fmt.Errorf("the lifetime %q is not a duration such as 2h", s)
	}
	return d, nil
}

// TermsRefusal says why a grant of this lifetime and number of uses may
// not be made, or "" when it may.
func TermsRefusal(lifetime time.Duration, uses int) string {
	switch {
	case lifetime <= 0 || lifetime > MaxGrantLifetime:
		return fmt.Sprintf("A grant lasts more than 0 and at most %s, not %s.", MaxGrantLifetime, lifetime)
	case uses < 1 || uses > MaxGrantUses:
		return fmt.Sprintf("A grant allows from 1 to %d uses, not %d.", MaxGrantUses, uses)
	}
	return ""
}

// A StandingGrant is an approver's approval of a scope instead of one
// call, against prompt fatigue: calls of Tool by the caller it names whose
// arguments meet When run as confirmed by the grant, up to Uses times
// until ExpiresAt, unless it is revoked. It stands for the rule that made
// it: it covers a call only while that same rule, unchanged, decides it
// ([Covers]). The audit names the grant of every call it confirmed.
type StandingGrant struct {
	ID   string `json:"id"`
	Tool string `json:"tool"`
	// When is a CEL condition over args; empty covers any arguments.
	When      string `json:"when,omitempty"`
	Tenant    string `json:"tenant"`
	Principal string `json:"principal"`
	// Rule and RuleDigest are the rule the grant was made under: its name
	// and the digest of its definition.
	Rule       string `json:"rule,omitempty"`
	RuleDigest string `json:"rule_digest,omitempty"`
	// Approvers are the approvers the rule named when the grant was made.
	Approvers []string `json:"approvers"`
	// GrantedBy is the approver who made the grant, a principal of
	// Tenant; GranterGroups the groups their credential named then.
	GrantedBy     string    `json:"granted_by"`
	GranterGroups []string  `json:"granter_groups,omitempty"`
	Reason        string    `json:"reason,omitempty"`
	CreatedAt     time.Time `json:"created_at"`
	ExpiresAt     time.Time `json:"expires_at"`
	Uses          int       `json:"uses"`
	Used          int       `json:"used"`
	Revoked       bool      `json:"revoked,omitempty"`
	// Voided says why the grant ended without anyone revoking it, such as
	// a reload that changed its rule.
	Voided string `json:"voided,omitempty"`
}

// Live reports whether the grant may still confirm a call at now.
func (s *StandingGrant) Live(now time.Time) bool {
	return !s.Revoked && s.Used < s.Uses && now.Before(s.ExpiresAt)
}

// Use counts one use of a live grant, or answers ErrNotApproved.
func (s *StandingGrant) Use(now time.Time) error {
	if !s.Live(now) {
		return ErrNotApproved
	}
	s.Used++
	return nil
}

// Revoke ends the grant; void, when not empty, says why it ended without
// anyone revoking it.
func (s *StandingGrant) Revoke(void string) {
	if s.Revoked {
		// The first end stands: a grant someone revoked did not end
		// because its rule changed later.
		return
	}
	s.Revoked, s.Voided = true, void
}

// Granter is the identity that made the grant, as it was then.
func (s *StandingGrant) Granter() Identity {
	return Identity{Tenant: s.Tenant, Principal: s.GrantedBy, Groups: s.GranterGroups}
}

// Subject is what the rules of who may see it need to know of the grant.
func (s *StandingGrant) Subject() Subject {
	return Subject{Tenant: s.Tenant, Caller: s.Principal, Approvers: s.Approvers, Deciders: []string{s.GrantedBy}}
}

// ErrGrantUnknown is the error of a grant id that names no grant.
var ErrGrantUnknown = errors.New("no such grant")

// GrantStore keeps standing grants. [MemoryGrants] serves one process.
type GrantStore interface {
	AddGrant(ctx context.Context, g *StandingGrant) error
	// LiveGrants returns the grants that may still confirm a call.
	LiveGrants(ctx context.Context) ([]*StandingGrant, error)
	// UseGrant counts one use of a live grant and reports whether it was
	// live: of concurrent uses beyond the limit, none succeeds.
	UseGrant(ctx context.Context, id string) (bool, error)
	// RevokeGrant ends a grant, noting why when void is not empty (a
	// grant its rule no longer stands for); ErrGrantUnknown when there is
	// none.
	RevokeGrant(ctx context.Context, id, void string) (*StandingGrant, error)
	Grant(ctx context.Context, id string) (*StandingGrant, error)
}
