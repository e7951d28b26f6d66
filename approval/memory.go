package approval

import (
	"context"
	"errors"
	"slices"
	"sync"
	"time"
)

// Resolve is the rule every store's Request applies inside its
// transaction: live is the binding's latest approval (nil when it has
// none), candidate the new one the caller offers. It returns the approval
// that answers the request, and the one to store (nil when nothing
// changed): the live approval while it answers, marked Reported once after
// it expired or lapsed, or else the candidate.
func Resolve(live, candidate *Approval, now time.Time) (answer, store *Approval) {
	if live != nil {
		if answers, changed := live.Answers(now); answers {
			if changed {
				return live, live
			}
			return live, nil
		}
	}
	return candidate, candidate
}

// Spent turns the error of consuming an approval or using a grant into
// whether it was spent: ErrNotApproved and an unknown id mean it was not,
// any other error is the store's.
func Spent(err error) (bool, error) {
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, ErrNotApproved), errors.Is(err, ErrUnknown), errors.Is(err, ErrGrantUnknown):
		return false, nil
	}
	return false, err
}

// Memory is the in-process [Store], for one process and for tests.
type Memory struct {
	mu    sync.Mutex
	byID  map[string]*Approval
	byKey map[string]string
}

// NewMemory returns an empty in-memory approval store.
func NewMemory() *Memory {
	return &Memory{byID: map[string]*Approval{}, byKey: map[string]string{}}
}

// clone returns a copy a caller may keep, so the store's own never
// changes under it.
func clone(a *Approval) *Approval {
	c := *a
	c.Approvals = slices.Clone(a.Approvals)
	if a.Denial != nil {
		d := *a.Denial
		c.Denial = &d
	}
	return &c
}

// Request implements [Store].
func (m *Memory) Request(_ context.Context, a *Approval) (*Approval, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	now := time.Now()
	var live *Approval
	if id, ok := m.byKey[a.Key]; ok {
		live = m.byID[id]
	}
	answer, store := Resolve(live, a, now)
	if store == a {
		// Old approvals are dropped now and then, so the store stays small.
		for id, old := range m.byID {
			if now.Sub(old.ExpiresAt) > time.Hour && (old.RunBy.IsZero() || now.Sub(old.RunBy) > time.Hour) {
				delete(m.byID, id)
				if m.byKey[old.Key] == id {
					delete(m.byKey, old.Key)
				}
			}
		}
		m.byID[a.ID] = clone(a)
		m.byKey[a.Key] = a.ID
	}
	return clone(answer), nil
}

// Get implements [Store].
func (m *Memory) Get(_ context.Context, id string) (*Approval, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	a, ok := m.byID[id]
	if !ok {
		return nil, ErrUnknown
	}
	return clone(a), nil
}

// List implements [Store].
func (m *Memory) List(context.Context) ([]*Approval, error) {
	return m.pending(func(*Approval) bool { return true }), nil
}

// Waiting implements [Store].
func (m *Memory) Waiting(_ context.Context, tenant, principal string) ([]*Approval, error) {
	return m.pending(func(a *Approval) bool { return a.Tenant == tenant && a.Principal == principal }), nil
}

// pending returns the pending approvals that of keeps, oldest first.
func (m *Memory) pending(of func(*Approval) bool) []*Approval {
	m.mu.Lock()
	defer m.mu.Unlock()
	now := time.Now()
	var out []*Approval
	for _, a := range m.byID {
		if of(a) && a.State(now) == Pending {
			out = append(out, clone(a))
		}
	}
	slices.SortFunc(out, func(x, y *Approval) int { return x.CreatedAt.Compare(y.CreatedAt) })
	return out
}

// Decide implements [Store].
func (m *Memory) Decide(_ context.Context, id string, v Vote) (*Approval, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	a, ok := m.byID[id]
	if !ok {
		return nil, ErrUnknown
	}
	if err := a.AddVote(v, time.Now()); err != nil {
		return nil, err
	}
	return clone(a), nil
}

// Consume implements [Store].
func (m *Memory) Consume(_ context.Context, id string) (bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	a, ok := m.byID[id]
	return ok && a.Consume(time.Now()) == nil, nil
}

// MemoryGrants is the in-process [GrantStore].
type MemoryGrants struct {
	mu     sync.Mutex
	grants map[string]*StandingGrant
}

// NewMemoryGrants returns an empty in-memory grant store.
func NewMemoryGrants() *MemoryGrants { return &MemoryGrants{grants: map[string]*StandingGrant{}} }

func cloneGrant(g *StandingGrant) *StandingGrant {
	c := *g
	c.Approvers = slices.Clone(g.Approvers)
	c.GranterGroups = slices.Clone(g.GranterGroups)
	return &c
}

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
	m.grants[g.ID] = cloneGrant(g)
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
			out = append(out, cloneGrant(g))
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
func (m *MemoryGrants) RevokeGrant(_ context.Context, id, void string) (*StandingGrant, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	g, ok := m.grants[id]
	if !ok {
		return nil, ErrGrantUnknown
	}
	g.Revoke(void)
	return cloneGrant(g), nil
}

// Grant implements [GrantStore].
func (m *MemoryGrants) Grant(_ context.Context, id string) (*StandingGrant, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	g, ok := m.grants[id]
	if !ok {
		return nil, ErrGrantUnknown
	}
	return cloneGrant(g), nil
}

// Interface guards.
var (
	_ Store      = (*Memory)(nil)
	_ GrantStore = (*MemoryGrants)(nil)
)
