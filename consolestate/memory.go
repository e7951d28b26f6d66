package consolestate

import (
	"bytes"
	"context"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/interlock-mcp/interlock/approval"
)

// Memory is a [Store] and a [Signal] in one process's memory, for tests
// and for consoles that share nothing.
type Memory struct {
	mu       sync.Mutex
	sessions map[string]*memorySession
	users    map[Owner][]byte
	passkeys map[Owner][]Passkey
	links    map[string]memoryLink
	// listeners hear what Raise sends.
	listeners map[chan string]struct{}
}

type memorySession struct {
	Session
	slots map[Slot][]byte
}

type memoryLink struct {
	who     approval.Identity
	expires time.Time
}

var (
	_ Store  = (*Memory)(nil)
	_ Signal = (*Memory)(nil)
)

// NewMemory returns an empty store.
func NewMemory() *Memory {
	return &Memory{sessions: map[string]*memorySession{}, users: map[Owner][]byte{}, passkeys: map[Owner][]Passkey{},
		links: map[string]memoryLink{}, listeners: map[chan string]struct{}{}}
}

// StartSession implements [Store].
func (m *Memory) StartSession(_ context.Context, key string, s Session, idle time.Duration) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	for k, o := range m.sessions {
		if s.Created.Sub(o.LastSeen) > idle {
			delete(m.sessions, k)
		}
	}
	m.sessions[key] = &memorySession{Session: copySession(s), slots: map[Slot][]byte{}}
	return nil
}

// copySession copies what a caller could change of s through its slices.
func copySession(s Session) Session {
	s.Who.Groups = slices.Clone(s.Who.Groups)
	return s
}

// Session implements [Store].
func (m *Memory) Session(_ context.Context, key string, now time.Time, idle time.Duration, touch bool) (Session, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	s, ok := m.sessions[key]
	if !ok {
		return Session{}, ErrNoSession
	}
	if now.Sub(s.LastSeen) > idle {
		delete(m.sessions, key)
		return Session{}, ErrNoSession
	}
	if touch && now.After(s.LastSeen) {
		s.LastSeen = now
	}
	return copySession(s.Session), nil
}

// EndSession implements [Store].
func (m *Memory) EndSession(_ context.Context, key string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.sessions, key)
	return nil
}

// Sessions implements [Store].
func (m *Memory) Sessions(context.Context) (map[string]Session, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make(map[string]Session, len(m.sessions))
	for k, s := range m.sessions {
		out[k] = copySession(s.Session)
	}
	return out, nil
}

// Put implements [Store].
func (m *Memory) Put(_ context.Context, key string, slot Slot, value []byte) error {
	if err := CheckSlot(slot); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	s, ok := m.sessions[key]
	if !ok {
		return ErrNoSession
	}
	s.slots[slot] = bytes.Clone(value)
	return nil
}

// Take implements [Store].
func (m *Memory) Take(_ context.Context, key string, slot Slot) ([]byte, error) {
	if err := CheckSlot(slot); err != nil {
		return nil, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	s, ok := m.sessions[key]
	if !ok {
		return nil, nil
	}
	v := s.slots[slot]
	delete(s.slots, slot)
	return v, nil
}

// PasskeyUser implements [Store].
func (m *Memory) PasskeyUser(_ context.Context, owner Owner, fresh []byte) ([]byte, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if u, ok := m.users[owner]; ok {
		return bytes.Clone(u), nil
	}
	m.users[owner] = bytes.Clone(fresh)
	return bytes.Clone(fresh), nil
}

// Passkeys implements [Store].
func (m *Memory) Passkeys(_ context.Context, owner Owner) ([]Passkey, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]Passkey, len(m.passkeys[owner]))
	for i, p := range m.passkeys[owner] {
		out[i] = copyPasskey(p)
	}
	return out, nil
}

func copyPasskey(p Passkey) Passkey {
	p.ID, p.Credential, p.Accepted = bytes.Clone(p.ID), bytes.Clone(p.Credential), slices.Clone(p.Accepted)
	return p
}

// AddPasskey implements [Store].
func (m *Memory) AddPasskey(_ context.Context, owner Owner, p Passkey) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if slices.ContainsFunc(m.passkeys[owner], func(o Passkey) bool { return bytes.Equal(o.ID, p.ID) }) {
		return ErrPasskeyExists
	}
	p = copyPasskey(p)
	p.Rev = 1
	m.passkeys[owner] = append(m.passkeys[owner], p)
	return nil
}

// SwapPasskey implements [Store].
func (m *Memory) SwapPasskey(_ context.Context, owner Owner, p Passkey) (bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	keys := m.passkeys[owner]
	i := slices.IndexFunc(keys, func(o Passkey) bool { return bytes.Equal(o.ID, p.ID) })
	if i < 0 {
		return false, ErrNoPasskey
	}
	if keys[i].Rev != p.Rev {
		return false, nil
	}
	p = copyPasskey(p)
	p.Rev++
	keys[i] = p
	return true, nil
}

// PasskeyOwners implements [Store].
func (m *Memory) PasskeyOwners(context.Context) ([]Owner, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []Owner
	for o, keys := range m.passkeys {
		if len(keys) > 0 {
			out = append(out, o)
		}
	}
	return out, nil
}

// ForgetPasskeys implements [Store].
func (m *Memory) ForgetPasskeys(_ context.Context, owner Owner) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.passkeys, owner)
	delete(m.users, owner)
	return nil
}

// AddLink implements [Store].
func (m *Memory) AddLink(_ context.Context, key string, who approval.Identity, expires time.Time) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	who.Groups = slices.Clone(who.Groups)
	m.links[key] = memoryLink{who: who, expires: expires}
	return nil
}

// SpendLink implements [Store].
func (m *Memory) SpendLink(_ context.Context, key string, now time.Time) (approval.Identity, bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	l, ok := m.links[key]
	delete(m.links, key)
	maps.DeleteFunc(m.links, func(_ string, l memoryLink) bool { return !now.Before(l.expires) })
	if !ok || !now.Before(l.expires) {
		return approval.Identity{}, false, nil
	}
	return l.who, true, nil
}

// Raise implements [Signal].
func (m *Memory) Raise(_ context.Context, what string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	for ch := range m.listeners {
		select {
		case ch <- what:
		default:
			// A listener that is behind reads the stores on the word it
			// already has waiting.
		}
	}
	return nil
}

// Listen implements [Signal].
func (m *Memory) Listen(ctx context.Context) (<-chan string, error) {
	ch := make(chan string, 16)
	m.mu.Lock()
	m.listeners[ch] = struct{}{}
	m.mu.Unlock()
	go func() {
		<-ctx.Done()
		m.mu.Lock()
		delete(m.listeners, ch)
		close(ch)
		m.mu.Unlock()
	}()
	return ch, nil
}
