package task

import (
	"context"
	"slices"
	"sync"
	"time"
)

// Memory is the in-process [Store], for one process and for tests. It
// keeps each task in its stored form ([Encode]), as the other stores do,
// so it accepts and returns what they would. Expired tasks are dropped as
// new ones are made.
type Memory struct {
	mu    sync.Mutex
	tasks map[string]stored
}

// stored is a task as [Memory] keeps it.
type stored struct {
	body              []byte
	tenant, principal string
	version           int64
	expiresAt         time.Time
}

var _ Store = (*Memory)(nil)

// NewMemory returns an empty in-memory task store.
func NewMemory() *Memory { return &Memory{tasks: map[string]stored{}} }

// put stores t as version.
func (m *Memory) put(t *Task, version int64) error {
	next := *t
	next.Version = version
	body, err := Encode(&next)
	if err != nil {
		return err
	}
	m.tasks[t.ID] = stored{body: body, tenant: t.Tenant, principal: t.Principal, version: version, expiresAt: t.ExpiresAt}
	t.Version = version
	return nil
}

// live returns the stored task id, unless there is none or it expired.
func (m *Memory) live(id string, now time.Time) (stored, bool) {
	s, ok := m.tasks[id]
	return s, ok && now.Before(s.expiresAt)
}

// Create implements [Store].
func (m *Memory) Create(_ context.Context, t *Task) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	now := time.Now()
	if _, ok := m.live(t.ID, now); ok {
		return ErrExists
	}
	for id, s := range m.tasks {
		if !now.Before(s.expiresAt) {
			delete(m.tasks, id)
		}
	}
	return m.put(t, 1)
}

// Get implements [Store].
func (m *Memory) Get(_ context.Context, id string) (*Task, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	s, ok := m.live(id, time.Now())
	if !ok {
		return nil, ErrUnknown
	}
	return Decode(s.body)
}

// Update implements [Store].
func (m *Memory) Update(_ context.Context, t *Task) (bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	s, ok := m.live(t.ID, time.Now())
	switch {
	case !ok:
		return false, ErrUnknown
	case s.version != t.Version:
		return false, nil
	}
	if err := m.put(t, t.Version+1); err != nil {
		return false, err
	}
	return true, nil
}

// List implements [Store].
func (m *Memory) List(_ context.Context, tenant, principal string) ([]*Task, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	now := time.Now()
	var out []*Task
	for _, s := range m.tasks {
		if s.tenant != tenant || s.principal != principal || !now.Before(s.expiresAt) {
			continue
		}
		t, err := Decode(s.body)
		if err != nil {
			return nil, err
		}
		out = append(out, t)
	}
	slices.SortFunc(out, Newest)
	return out, nil
}
