package interlock

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"
)

// MaxGrantLifetime bounds how long a standing grant may last.
const MaxGrantLifetime = 24 * time.Hour

// A StandingGrant is an approver's approval of a scope instead of one
// call, against prompt fatigue: calls of Tool by the caller it names whose
// arguments meet When run as confirmed by the grant, up to Uses times
// until ExpiresAt, unless it is revoked. The audit names the grant of
// every call it confirmed.
type StandingGrant struct {
	ID   string `json:"id"`
	Tool string `json:"tool"`
	// When is a CEL condition over args; empty covers any arguments.
	When      string `json:"when,omitempty"`
	Tenant    string `json:"tenant"`
	Principal string `json:"principal"`
	// Approvers are who may revoke it besides its grantor: the approvers
	// of the approval it was made from.
	Approvers []string  `json:"approvers"`
	GrantedBy string    `json:"granted_by"`
	Reason    string    `json:"reason,omitempty"`
	CreatedAt time.Time `json:"created_at"`
	ExpiresAt time.Time `json:"expires_at"`
	Uses      int       `json:"uses"`
	Used      int       `json:"used"`
	Revoked   bool      `json:"revoked,omitempty"`
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

// MayRevoke reports whether who may revoke the grant: its grantor, or one
// of the approvers it names.
func (s *StandingGrant) MayRevoke(who Approver) bool {
	if who.Principal == s.GrantedBy {
		return true
	}
	a := Approval{Approvers: s.Approvers, Principal: s.Principal, Tenant: s.Tenant}
	return a.MayDecide(who) == nil
}

// GrantStore keeps standing grants. The memory store below serves one
// process.
type GrantStore interface {
	AddGrant(ctx context.Context, g *StandingGrant) error
	// LiveGrants returns the grants that may still confirm a call.
	LiveGrants(ctx context.Context) ([]*StandingGrant, error)
	// UseGrant counts one use of a live grant and reports whether it was
	// live: of concurrent uses beyond the limit, none succeeds.
	UseGrant(ctx context.Context, id string) (bool, error)
	// RevokeGrant ends a grant; ErrGrantUnknown when there is none.
	RevokeGrant(ctx context.Context, id string) (*StandingGrant, error)
	Grant(ctx context.Context, id string) (*StandingGrant, error)
}

// ErrGrantUnknown is the error of a grant id that names no grant.
var ErrGrantUnknown = errors.New("no such grant")

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
// describes for the same tool: who must be allowed to decide the
// approval. The waiting call is the grant's first use: the approval is
// closed, and its re-call runs under the grant.
func (g *Gate) GrantScope(ctx context.Context, id string, who Approver, req GrantRequest) (*StandingGrant, error) {
	if !g.OffersGrants() {
		return nil, errors.New("this gate keeps no standing grants")
	}
	invalid := func(format string, args ...any) error {
		return &Error{Code: CodeValidationFailed, Message: fmt.Sprintf(format, args...),
			Hint: "Give a lifetime of at most 24h, from 1 to 10000 uses, and a CEL condition over args (or none)."}
	}
	switch {
	case req.TTL <= 0 || req.TTL > MaxGrantLifetime:
		return nil, invalid("A grant lasts more than 0 and at most %s, not %s.", MaxGrantLifetime, req.TTL)
	case req.Uses < 1 || req.Uses > 10000:
		return nil, invalid("A grant allows from 1 to 10000 uses, not %d.", req.Uses)
	}
	if req.When != "" {
		if _, err := g.compileCondition(req.When); err != nil {
			return nil, invalid("The condition does not compile: %s", clip(err.Error()))
		}
	}
	if g.approvals == nil {
		return nil, ErrApprovalUnknown
	}
	pending, err := g.approvals.Get(ctx, id)
	if err != nil {
		return nil, err
	}
	if err := pending.MayDecide(who); err != nil {
		return nil, err
	}
	// One person's grant would stand in for the others a quorum asks for.
	if pending.Quorum > 1 {
		return nil, &Error{Code: CodePermissionDenied,
			Message: fmt.Sprintf("The rule asks %d approvers for each call of %s, so no one approver may grant a standing scope.", pending.Quorum, pending.Tool),
			Hint:    "Approve this call alone; every further call asks the approvers again."}
	}
	// A grant would let later calls run without the passkey's signature.
	if pending.RequirePasskey {
		return nil, &Error{Code: CodePermissionDenied,
			Message: fmt.Sprintf("The rule asks for an approver's passkey on each call of %s, so no standing scope may be granted.", pending.Tool),
			Hint:    "Approve this call alone, with your passkey; every further call asks the approvers again."}
	}
	a, err := g.Decide(ctx, id, who, true, req.Reason)
	if err != nil {
		return nil, err
	}
	if a.State(time.Now()) == ApprovalApproved {
		if _, err := g.approvals.Consume(ctx, a.ID); err != nil {
			return nil, err
		}
	}
	now := time.Now()
	sg := &StandingGrant{ID: "grt_" + newApprovalID()[4:], Tool: a.Tool, When: req.When, Tenant: a.Tenant, Principal: a.Principal,
		Approvers: a.Approvers, GrantedBy: who.Principal, Reason: clip(req.Reason), CreatedAt: now, ExpiresAt: now.Add(req.TTL), Uses: req.Uses}
	if err := g.grants.AddGrant(ctx, sg); err != nil {
		return nil, err
	}
	g.RecordEvent(ctx, &AuditRecord{Event: "grant_created", Tenant: sg.Tenant, Principal: who.Principal, Tool: sg.Tool,
		Detail: fmt.Sprintf("%s for %s's calls where %q, %d uses until %s", sg.ID, sg.Principal, sg.When, sg.Uses, sg.ExpiresAt.UTC().Format(time.RFC3339))})
	return sg, nil
}

// RevokeGrant ends a standing grant, if who may.
func (g *Gate) RevokeGrant(ctx context.Context, id string, who Approver) (*StandingGrant, error) {
	if g.grants == nil {
		return nil, ErrGrantUnknown
	}
	sg, err := g.grants.Grant(ctx, id)
	if err != nil {
		return nil, err
	}
	if !sg.MayRevoke(who) {
		return nil, ErrNotAnApprover
	}
	if sg, err = g.grants.RevokeGrant(ctx, id); err != nil {
		return nil, err
	}
	g.RecordEvent(ctx, &AuditRecord{Event: "grant_revoked", Tenant: sg.Tenant, Principal: who.Principal, Tool: sg.Tool, Detail: sg.ID})
	return sg, nil
}

// OffersGrants reports whether approvers may grant standing scopes: the
// gate keeps grants and compiles their conditions.
func (g *Gate) OffersGrants() bool { return g.grants != nil && g.compileCondition != nil }

// Grants returns the gate's grant store; nil when it has none.
func (g *Gate) Grants() GrantStore { return g.grants }

// useGrant looks for a live grant that covers c and spends one of its
// uses. A condition that cannot be evaluated covers nothing.
func (g *Gate) useGrant(ctx context.Context, c *Call) (*StandingGrant, error) {
	if g.grants == nil || g.compileCondition == nil {
		return nil, nil
	}
	live, err := g.grants.LiveGrants(ctx)
	if err != nil {
		return nil, storeUnavailable(c, err)
	}
	for _, sg := range live {
		if sg.Tool != c.Tool || sg.Tenant != c.Tenant || sg.Principal != c.Principal {
			continue
		}
		if sg.When != "" {
			cond, err := g.compileCondition(sg.When)
			if err != nil {
				continue
			}
			if ok, err := cond(c); err != nil || !ok {
				continue
			}
		}
		ok, err := g.grants.UseGrant(ctx, sg.ID)
		if err != nil {
			return nil, storeUnavailable(c, err)
		}
		if ok {
			return sg, nil
		}
	}
	return nil, nil
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

// MemoryGrants is the in-process GrantStore, the default.
type MemoryGrants struct {
	mu     sync.Mutex
	grants map[string]*StandingGrant
}

// NewMemoryGrants returns an empty in-memory grant store.
func NewMemoryGrants() *MemoryGrants { return &MemoryGrants{grants: map[string]*StandingGrant{}} }

// AddGrant implements [GrantStore].
func (m *MemoryGrants) AddGrant(_ context.Context, g *StandingGrant) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	now := time.Now()
	for id, old := range m.grants {
		if now.Sub(old.ExpiresAt) > 24*time.Hour {
			delete(m.grants, id)
		}
	}
	c := *g
	m.grants[g.ID] = &c
	return nil
}

// LiveGrants implements [GrantStore].
func (m *MemoryGrants) LiveGrants(context.Context) ([]*StandingGrant, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	now := time.Now()
	var out []*StandingGrant
	for _, g := range m.grants {
		if g.Live(now) {
			c := *g
			out = append(out, &c)
		}
	}
	slices.SortFunc(out, func(a, b *StandingGrant) int { return a.CreatedAt.Compare(b.CreatedAt) })
	return out, nil
}

// UseGrant implements [GrantStore].
func (m *MemoryGrants) UseGrant(_ context.Context, id string) (bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	g, ok := m.grants[id]
	return ok && g.Use(time.Now()) == nil, nil
}

// RevokeGrant implements [GrantStore].
func (m *MemoryGrants) RevokeGrant(_ context.Context, id string) (*StandingGrant, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	g, ok := m.grants[id]
	if !ok {
		return nil, ErrGrantUnknown
	}
	g.Revoked = true
	c := *g
	return &c, nil
}

// Grant implements [GrantStore].
func (m *MemoryGrants) Grant(_ context.Context, id string) (*StandingGrant, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	g, ok := m.grants[id]
	if !ok {
		return nil, ErrGrantUnknown
	}
	c := *g
	return &c, nil
}
