package interlock

import (
	"context"
	"fmt"
	"math"
	"sync"
	"time"
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

// key names the count a call of id draws from.
func (b Budget) key(id Identity) string {
	if b.PerTenant {
		return BindingKey(b.Name, id.Tenant, "")
	}
	return BindingKey(b.Name, id.Tenant, id.Principal)
}

// BudgetStore counts, for each key, the calls that ran in the last window:
// a sliding window, so no burst of twice the limit fits across the edge of
// two fixed windows. The memory store below serves one process; package
// redis serves several gateways at once.
type BudgetStore interface {
	// Peek reports how long until key has room for one more call under
	// limit per window: zero when it has room now. It counts nothing.
	Peek(ctx context.Context, key string, limit int, window time.Duration) (time.Duration, error)
	// Take counts one call under key if there is room, atomically: of any
	// number of concurrent takes, on any replica, at most limit succeed in
	// any window. When there is no room it counts nothing and reports how
	// long until there is.
	Take(ctx context.Context, key string, limit int, window time.Duration) (bool, time.Duration, error)
}

// MemoryBudgets is the in-process BudgetStore, the default.
type MemoryBudgets struct {
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

// NewMemoryBudgets returns an empty in-memory budget store.
func NewMemoryBudgets() *MemoryBudgets {
	return &MemoryBudgets{runs: map[string]*budgetLog{}, sweepAt: 1024}
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

func (m *MemoryBudgets) log(key string, window time.Duration) *budgetLog {
	l := m.runs[key]
	if l == nil {
		l = &budgetLog{}
		m.runs[key] = l
	}
	l.window = window
	return l
}

// Peek implements [BudgetStore].
func (m *MemoryBudgets) Peek(_ context.Context, key string, limit int, window time.Duration) (time.Duration, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.log(key, window).room(time.Now(), limit), nil
}

// Take implements [BudgetStore].
func (m *MemoryBudgets) Take(_ context.Context, key string, limit int, window time.Duration) (bool, time.Duration, error) {
	now := time.Now()
	m.mu.Lock()
	defer m.mu.Unlock()
	l := m.log(key, window)
	if wait := l.room(now, limit); wait > 0 {
		return false, wait, nil
	}
	l.times = append(l.times, now)
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
	return true, 0, nil
}

// checkBudgets refuses c before anyone is asked to confirm it when a budget
// of d is spent already: nobody should approve a call that would then be
// refused. It counts nothing; [Gate.takeBudgets] does, as the call runs.
func (g *Gate) checkBudgets(ctx context.Context, c *Call, d Decision, tr *trail) error {
	for _, b := range d.Budgets {
		wait, err := g.budgets.Peek(ctx, b.key(c.Identity), b.Limit, b.Window)
		if err != nil {
			return budgetsUnavailable(c, err)
		}
		if wait > 0 {
			tr.budget = b.Name
			return budgetSpent(c, b, wait, "nobody was asked to confirm it")
		}
	}
	return nil
}

// takeBudgets counts c, which is about to run, against every budget of d.
// The first budget with no room refuses it; what the budgets before it
// counted stays counted, which errs on the side of fewer calls.
func (g *Gate) takeBudgets(ctx context.Context, c *Call, d Decision, tr *trail) error {
	for _, b := range d.Budgets {
		ok, wait, err := g.budgets.Take(ctx, b.key(c.Identity), b.Limit, b.Window)
		if err != nil {
			return budgetsUnavailable(c, err)
		}
		if !ok {
			tr.budget = b.Name
			return budgetSpent(c, b, wait, "it did not run")
		}
	}
	return nil
}

func budgetSpent(c *Call, b Budget, wait time.Duration, what string) error {
	per := "principal"
	if b.PerTenant {
		per = "tenant"
	}
	return &Error{
		Code: CodeRateLimited,
		Message: fmt.Sprintf("Budget %q allows %d confirmed calls per %s in %s and is spent, so %s was refused: %s.",
			b.Name, b.Limit, per, b.Window, c.Tool, what),
		Hint: "Do not retry before retry_after_ms has passed; tell the user that this budget is spent, " +
			"and ask the operator if the work cannot wait.",
		RetryAfterMS: max(1, int64(math.Ceil(float64(wait)/float64(time.Millisecond)))),
	}
}

// budgetsUnavailable answers a call whose budgets could not be read: it
// fails closed, as a spent budget would.
func budgetsUnavailable(c *Call, err error) error {
	return &Error{
		Code:         CodeUpstreamUnavailable,
		Message:      fmt.Sprintf("interlock's budget store cannot be reached, so %s cannot run now; nothing ran.", c.Tool),
		Hint:         "Retry in a few seconds; if it keeps failing, tell the operator that interlock's store is down.",
		RetryAfterMS: 2000,
		Err:          err,
	}
}
