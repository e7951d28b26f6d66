package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/interlock-mcp/interlock"
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
// drops the key's calls that left the window, finds whether there is
// room and counts the call if there is: of any number of concurrent
// takes, in any number of processes, at most limit succeed in any window.
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

// room returns how long until key has room for one more call under limit
// per window at now: zero when it has room now, else until the limit-th
// newest call leaves the window. A call counted after now, as a take on
// another handle may be while a peek reads, or under a clock that stepped
// back, ran now at the latest: the wait is never longer than the window.
func room(ctx context.Context, q rowQuerier, key string, limit int, window time.Duration, now time.Time) (time.Duration, error) {
	if limit < 1 {
		return 0, fmt.Errorf("budget %s: a limit of %d calls leaves no room", key, limit)
	}
	var ranAt int64
	err := q.QueryRowContext(ctx, "SELECT ran_at FROM budget_runs WHERE key = ? AND ran_at > ? ORDER BY ran_at DESC LIMIT 1 OFFSET ?",
		key, now.Add(-window).UnixNano(), limit-1).Scan(&ranAt)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("budget %s: %w", key, err)
	}
	return min(time.Unix(0, ranAt).Add(window).Sub(now), window), nil
}

// Peek implements [interlock.BudgetStore].
func (b *Budgets) Peek(ctx context.Context, key string, limit int, window time.Duration) (time.Duration, error) {
	wait, err := room(ctx, b.db, key, limit, window, time.Now())
	if err != nil {
		return 0, b.fail(err)
	}
	return wait, nil
}

// Take implements [interlock.BudgetStore].
func (b *Budgets) Take(ctx context.Context, key string, limit int, window time.Duration) (bool, time.Duration, error) {
	var wait time.Duration
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
		if _, err := c.ExecContext(ctx, "DELETE FROM budget_runs WHERE key = ? AND ran_at <= ?", key, now.Add(-window).UnixNano()); err != nil {
			return fmt.Errorf("budget %s: %w", key, err)
		}
		var err error
		if wait, err = room(ctx, c, key, limit, window, now); err != nil || wait > 0 {
			return err
		}
		if _, err := c.ExecContext(ctx, "INSERT INTO budget_runs (key, ran_at, ends_at) VALUES (?, ?, ?)",
			key, now.UnixNano(), now.Add(window).UnixNano()); err != nil {
			return fmt.Errorf("budget %s: %w", key, err)
		}
		return nil
	})
	if err != nil {
		return false, 0, b.fail(err)
	}
	return wait == 0, wait, nil
}
