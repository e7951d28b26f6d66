// Package budget bounds the blast radius of confirmed calls: a [Budget]
// lets at most Limit gated calls run in any Window, per principal or per
// tenant, whoever confirmed them. It holds what a budget is, the [Store]
// that counts calls in a sliding window (all of a call's budgets or none),
// and [Memory], the store of one process; packages sqlite, redis and
// postgres keep counts that several gateways share, and
// interlock/storetest is every store's conformance suite.
package budget

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/interlock-mcp/interlock/approval"
	"github.com/interlock-mcp/interlock/seal"
)

// Budget bounds the blast radius of confirmed calls: at most Limit gated
// calls it covers may run in any Window, per principal or per tenant.
// Confirmation says a call is wanted; a budget says how many such calls
// may run before a person looks again, whoever confirmed them.
type Budget struct {
	// Name identifies the budget in errors and the audit log.
	Name string
	// PerTenant counts the calls of a whole tenant together; otherwise each
	// principal of a tenant has a count of their own.
	PerTenant bool
	Limit     int
	Window    time.Duration
}

// Key names the count a call of id draws from.
func (b Budget) Key(id approval.Identity) string {
	if b.PerTenant {
		return seal.BindingKey(b.Name, id.Tenant, "")
	}
	return seal.BindingKey(b.Name, id.Tenant, id.Principal)
}

// Take is one budget's part in counting a call: the key of the
// count the call draws from, and the budget's limit per window.
type Take struct {
	Key    string
	Limit  int
	Window time.Duration
}

// CheckTakes reports why takes cannot be counted as one call: a
// limit below one call or a window of nothing, which no budget of a
// policy has, or a key named twice, which the gate never asks for. Every
// store refuses such takes with its error rather than guess.
func CheckTakes(takes []Take) error {
	for i, t := range takes {
		if t.Limit < 1 {
			return fmt.Errorf("budget %s: a limit of %d calls leaves no room", t.Key, t.Limit)
		}
		if t.Window <= 0 {
			return fmt.Errorf("budget %s: a window of %s counts nothing", t.Key, t.Window)
		}
		for _, u := range takes[:i] {
			if u.Key == t.Key {
				return fmt.Errorf("budget %s: named twice in one take", t.Key)
			}
		}
	}
	return nil
}

// Store counts, for each key, the calls that ran in the last window:
// a sliding window, so no burst of twice the limit fits across the edge of
// two fixed windows. The memory store below serves one process; packages
// redis and sqlite serve several gateways at once.
//
// A call under several budgets is counted in all of them or in none: one
// that any budget refuses spends no room in the others.
type Store interface {
	// Peek answers as Take would now, and counts nothing.
	Peek(ctx context.Context, takes []Take) (ok bool, wait time.Duration, spent int, err error)
	// Take counts one call under the key of every take if each has room,
	// atomically: of any number of concurrent takes, on any replica, at
	// most Limit succeed in any Window under each key. When any key has
	// no room it counts the call under none of them, and reports which
	// take, by its index, has the longest wait and how long that is: the
	// time until every key has room.
	Take(ctx context.Context, takes []Take) (ok bool, wait time.Duration, spent int, err error)
}

// Memory is the in-process Store, the gate's default.
type Memory struct {
	mu sync.Mutex
	// runs holds, by key, when each counted call ran, oldest first.
	runs    map[string]*budgetLog
	taken   int
	sweepAt int
}

type budgetLog struct {
	times  []time.Time
	window time.Duration
}

// NewMemory returns an empty in-memory budget store.
func NewMemory() *Memory {
	return &Memory{runs: map[string]*budgetLog{}, sweepAt: 1024}
}

// room drops the runs of l that left the window and returns how long until
// it has room for one more: zero when it has room now. The caller holds
// the lock.
func (l *budgetLog) room(now time.Time, limit int) time.Duration {
	i := 0
	for i < len(l.times) && now.Sub(l.times[i]) >= l.window {
		i++
	}
	l.times = l.times[i:]
	if len(l.times) < limit {
		return 0
	}
	return l.times[len(l.times)-limit].Add(l.window).Sub(now)
}

func (m *Memory) log(key string, window time.Duration) *budgetLog {
	l := m.runs[key]
	if l == nil {
		l = &budgetLog{}
		m.runs[key] = l
	}
	l.window = window
	return l
}

// room returns the longest wait of takes at now and the index of its
// take: zero when every key has room. The caller holds the lock.
func (m *Memory) room(takes []Take, now time.Time) (time.Duration, int) {
	var wait time.Duration
	spent := 0
	for i, t := range takes {
		if w := m.log(t.Key, t.Window).room(now, t.Limit); w > wait {
			wait, spent = w, i
		}
	}
	return wait, spent
}

// Peek implements [Store].
func (m *Memory) Peek(_ context.Context, takes []Take) (bool, time.Duration, int, error) {
	if err := CheckTakes(takes); err != nil {
		return false, 0, 0, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	now := time.Now()
	wait, spent := m.room(takes, now)
	return wait == 0, wait, spent, nil
}

// Take implements [Store].
func (m *Memory) Take(_ context.Context, takes []Take) (bool, time.Duration, int, error) {
	if err := CheckTakes(takes); err != nil {
		return false, 0, 0, err
	}
	// The time is read under the lock, so each log stays oldest first.
	m.mu.Lock()
	defer m.mu.Unlock()
	now := time.Now()
	if wait, spent := m.room(takes, now); wait > 0 {
		return false, wait, spent, nil
	}
	for _, t := range takes {
		l := m.runs[t.Key]
		l.times = append(l.times, now)
	}
	// Keys whose runs all left their window are dropped now and then, so
	// callers who stop calling do not pile up.
	if m.taken++; m.taken >= m.sweepAt {
		m.taken = 0
		for k, l := range m.runs {
			if l.room(now, 1) == 0 {
				delete(m.runs, k)
			}
		}
	}
	return true, 0, 0, nil
}

// Count returns how many calls key holds in its window now.
func (m *Memory) Count(key string) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	if l := m.runs[key]; l != nil {
		l.room(time.Now(), len(l.times)+1)
		return len(l.times)
	}
	return 0
}
