package seal

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"sync"
	"time"
)

// TokenStore keeps the one live confirm token of each binding {tenant,
// principal, tool} and consumes it exactly once. [MemoryTokens] serves one
// process; packages sqlite and redis serve several gateways at once, and
// interlock/storetest is every store's conformance suite.
type TokenStore interface {
	// Issue makes nonce the live token of binding until ttl passes,
	// invalidating any earlier token of the same binding.
	Issue(ctx context.Context, binding, nonce string, ttl time.Duration) error
	// Consume atomically removes nonce if it is the binding's live token and
	// reports whether it was. Of any number of concurrent calls with the
	// same nonce, at most one reports true.
	Consume(ctx context.Context, binding, nonce string) (bool, error)
}

// BindingKey names the binding of a tenant, principal and tool in a store.
func BindingKey(tenant, principal, tool string) string {
	h := sha256.New()
	for _, s := range []string{tenant, principal, tool} {
		h.Write([]byte(s))
		h.Write([]byte{0})
	}
	return hex.EncodeToString(h.Sum(nil)[:16])
}

// MemoryTokens is the in-process TokenStore, the gate's default.
type MemoryTokens struct {
	mu      sync.Mutex
	live    map[string]liveToken
	issued  int
	sweepAt int
}

type liveToken struct {
	nonce   string
	expires time.Time
}

// NewMemoryTokens returns an empty in-memory token store.
func NewMemoryTokens() *MemoryTokens {
	return &MemoryTokens{live: map[string]liveToken{}, sweepAt: 1024}
}

// Issue implements [TokenStore].
func (m *MemoryTokens) Issue(_ context.Context, binding, nonce string, ttl time.Duration) error {
	now := time.Now()
	m.mu.Lock()
	defer m.mu.Unlock()
	m.live[binding] = liveToken{nonce: nonce, expires: now.Add(ttl)}
	// Expired entries are dropped now and then, so bindings that are never
	// redeemed do not pile up.
	if m.issued++; m.issued >= m.sweepAt {
		m.issued = 0
		for k, t := range m.live {
			if !now.Before(t.expires) {
				delete(m.live, k)
			}
		}
	}
	return nil
}

// Consume implements [TokenStore].
func (m *MemoryTokens) Consume(_ context.Context, binding, nonce string) (bool, error) {
	now := time.Now()
	m.mu.Lock()
	defer m.mu.Unlock()
	t, ok := m.live[binding]
	if !ok || t.nonce != nonce || !now.Before(t.expires) {
		return false, nil
	}
	delete(m.live, binding)
	return true, nil
}
