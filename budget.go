package interlock

import (
	"context"
	"fmt"
	"math"
	"slices"
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

// BudgetTake is one budget's part in counting a call: the key of the
// count the call draws from, and the budget's limit per window.
type BudgetTake struct {
	Key    string
	Limit  int
	Window time.Duration
}

// CheckBudgetTakes reports why takes cannot be counted as one call: a
// limit below one call or a window of nothing, which no budget of a
// policy has, or a key named twice, which the gate never asks for. Every
// store refuses such takes with its error rather than guess.
func CheckBudgetTakes(takes []BudgetTake) error {
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

// BudgetStore counts, for each key, the calls that ran in the last window:
// a sliding window, so no burst of twice the limit fits across the edge of
// two fixed windows. The memory store below serves one process; packages
// redis and sqlite serve several gateways at once.
//
// A call under several budgets is counted in all of them or in none: one
// that any budget refuses spends no room in the others.
type BudgetStore interface {
	// Peek answers as Take would now, and counts nothing.
	Peek(ctx context.Context, takes []BudgetTake) (ok bool, wait time.Duration, spent int, err error)
	// Take counts one call under the key of every take if each has room,
	// atomically: of any number of concurrent takes, on any replica, at
	// most Limit succeed in any Window under each key. When any key has
	// no room it counts the call under none of them, and reports which
	// take, by its index, has the longest wait and how long that is: the
	// time until every key has room.
	Take(ctx context.Context, takes []BudgetTake) (ok bool, wait time.Duration, spent int, err error)
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

// room returns the longest wait of takes at now and the index of its
// take: zero when every key has room. The caller holds the lock.
func (m *MemoryBudgets) room(takes []BudgetTake, now time.Time) (time.Duration, int) {
	var wait time.Duration
	spent := 0
	for i, t := range takes {
		if w := m.log(t.Key, t.Window).room(now, t.Limit); w > wait {
			wait, spent = w, i
		}
	}
	return wait, spent
}

// Peek implements [BudgetStore].
func (m *MemoryBudgets) Peek(_ context.Context, takes []BudgetTake) (bool, time.Duration, int, error) {
	if err := CheckBudgetTakes(takes); err != nil {
		return false, 0, 0, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	now := time.Now()
	wait, spent := m.room(takes, now)
	return wait == 0, wait, spent, nil
}

// Take implements [BudgetStore].
func (m *MemoryBudgets) Take(_ context.Context, takes []BudgetTake) (bool, time.Duration, int, error) {
	if err := CheckBudgetTakes(takes); err != nil {
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

// budgetsOf returns the budgets c counts against under d and their takes,
// index for index. A budget d names twice counts the call once.
func budgetsOf(c *Call, d Decision) ([]Budget, []BudgetTake) {
	budgets := make([]Budget, 0, len(d.Budgets))
	takes := make([]BudgetTake, 0, len(d.Budgets))
	for _, b := range d.Budgets {
		key := b.key(c.Identity)
		if slices.ContainsFunc(takes, func(t BudgetTake) bool { return t.Key == key }) {
			continue
		}
		budgets = append(budgets, b)
		takes = append(takes, BudgetTake{Key: key, Limit: b.Limit, Window: b.Window})
	}
	return budgets, takes
}

// checkBudgets refuses c before anyone is asked to confirm it when a budget
// of d is spent already: nobody should approve a call that would then be
// refused. It counts nothing; [Gate.takeBudgets] does, as the call runs.
func (g *Gate) checkBudgets(ctx context.Context, c *Call, d Decision, tr *trail) error {
	budgets, takes := budgetsOf(c, d)
	ok, wait, spent, err := g.budgets.Peek(ctx, takes)
	return budgetAnswer(c, budgets, tr, ok, wait, spent, err, "nobody was asked to confirm it")
}

// takeBudgets counts c, which is about to run, against every budget of d,
// or, when one of them has no room, against none.
func (g *Gate) takeBudgets(ctx context.Context, c *Call, d Decision, tr *trail) error {
	budgets, takes := budgetsOf(c, d)
	ok, wait, spent, err := g.budgets.Take(ctx, takes)
	return budgetAnswer(c, budgets, tr, ok, wait, spent, err, "it did not run")
}

// budgetAnswer is the gate's answer to c from the store's answer about
// budgets: nil when c may run.
func budgetAnswer(c *Call, budgets []Budget, tr *trail, ok bool, wait time.Duration, spent int, err error, what string) error {
	if err == nil && !ok && (spent < 0 || spent >= len(budgets)) {
		err = fmt.Errorf("the budget store named budget %d of %d", spent, len(budgets))
	}
	if err != nil {
		return budgetsUnavailable(c, err)
	}
	if ok {
		return nil
	}
	tr.budget = budgets[spent].Name
	return budgetSpent(c, budgets[spent], wait, what)
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
