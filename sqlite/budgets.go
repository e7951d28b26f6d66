package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/interlock-mcp/interlock"
	"github.com/interlock-mcp/interlock/budget"
)

const budgetsSchema = `
CREATE TABLE IF NOT EXISTS budget_runs (
	key     TEXT NOT NULL,
	ran_at  INTEGER NOT NULL,
	ends_at INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS budget_runs_key ON budget_runs (key, ran_at);`

// Budgets is an [interlock.BudgetStore] in a SQLite file, so that every
// interlock process on a data directory counts the calls of a budget
// together.
//
// Each counted call is a row holding its key, when it ran and when it
// leaves the window it was counted in, in Unix nanoseconds. A take is one
// IMMEDIATE transaction that reads the time once it holds the write lock,
// drops the calls of its keys that left their windows, finds whether
// every key has room and counts the call under each if so: of any number
// of concurrent takes, in any number of processes, at most limit succeed
// in any window under each key, and a take one key refuses counts under
// none.
//
// A gateway finds it in its [State].
type Budgets struct {
	*handle
	// taken counts this handle's takes; only changes, which take turns
	// on the writer, touch it.
	taken int
}

var _ interlock.BudgetStore = (*Budgets)(nil)

func (b *Budgets) fail(err error) error { return fmt.Errorf("budget store %s: %w", b.path, err) }

// rowQuerier is a connection or a pool.
type rowQuerier interface {
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// room returns how long until t's key has room for one more call at now:
// zero when it has room now, else until the limit-th newest call leaves
// the window. A call counted after now, as a take on another handle may
// be while a peek reads, or under a clock that stepped back, ran now at
// the latest: the wait is never longer than the window.
func room(ctx context.Context, q rowQuerier, t interlock.BudgetTake, now time.Time) (time.Duration, error) {
	var ranAt int64
	err := q.QueryRowContext(ctx, "SELECT ran_at FROM budget_runs WHERE key = ? AND ran_at > ? ORDER BY ran_at DESC LIMIT 1 OFFSET ?",
		t.Key, now.Add(-t.Window).UnixNano(), t.Limit-1).Scan(&ranAt)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("budget %s: %w", t.Key, err)
	}
	return min(time.Unix(0, ranAt).Add(t.Window).Sub(now), t.Window), nil
}

// longest returns the longest wait of takes at now and the index of its
// take: zero when every key has room.
func longest(ctx context.Context, q rowQuerier, takes []interlock.BudgetTake, now time.Time) (time.Duration, int, error) {
	var wait time.Duration
	spent := 0
	for i, t := range takes {
		w, err := room(ctx, q, t, now)
		if err != nil {
			return 0, 0, err
		}
		if w > wait {
			wait, spent = w, i
		}
	}
	return wait, spent, nil
}

// Peek implements [interlock.BudgetStore].
func (b *Budgets) Peek(ctx context.Context, takes []interlock.BudgetTake) (bool, time.Duration, int, error) {
	if err := budget.CheckTakes(takes); err != nil {
		return false, 0, 0, b.fail(err)
	}
	wait, spent, err := longest(ctx, b.db, takes, time.Now())
	if err != nil {
		return false, 0, 0, b.fail(err)
	}
	return wait == 0, wait, spent, nil
}

// Take implements [interlock.BudgetStore].
func (b *Budgets) Take(ctx context.Context, takes []interlock.BudgetTake) (bool, time.Duration, int, error) {
	if err := budget.CheckTakes(takes); err != nil {
		return false, 0, 0, b.fail(err)
	}
	if len(takes) == 0 {
		return true, 0, 0, nil
	}
	var wait time.Duration
	var spent int
	err := b.change(ctx, func(c *sql.Conn, now time.Time) error {
		// Keys whose calls all left their window are dropped now and
		// then, so callers who stop calling do not pile up. The window of
		// a key's newest call is the one it was last counted under.
		if b.taken%sweepEvery == 0 {
			_, err := c.ExecContext(ctx, `DELETE FROM budget_runs WHERE key IN (
				SELECT key FROM (SELECT key, max(ran_at), ends_at FROM budget_runs GROUP BY key) WHERE ends_at <= ?)`, now.UnixNano())
			if err != nil {
				return fmt.Errorf("dropping idle budgets: %w", err)
			}
		}
		b.taken++
		for _, t := range takes {
			if _, err := c.ExecContext(ctx, "DELETE FROM budget_runs WHERE key = ? AND ran_at <= ?", t.Key, now.Add(-t.Window).UnixNano()); err != nil {
				return fmt.Errorf("budget %s: %w", t.Key, err)
			}
		}
		var err error
		if wait, spent, err = longest(ctx, c, takes, now); err != nil || wait > 0 {
			return err
		}
		for _, t := range takes {
			if _, err := c.ExecContext(ctx, "INSERT INTO budget_runs (key, ran_at, ends_at) VALUES (?, ?, ?)",
				t.Key, now.UnixNano(), now.Add(t.Window).UnixNano()); err != nil {
				return fmt.Errorf("budget %s: %w", t.Key, err)
			}
		}
		return nil
	})
	if err != nil {
		return false, 0, 0, b.fail(err)
	}
	return wait == 0, wait, spent, nil
}
