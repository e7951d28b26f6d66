package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/interlock-mcp/interlock"
)

const tokensSchema = `
CREATE TABLE IF NOT EXISTS tokens (
	binding    TEXT PRIMARY KEY,
	nonce      TEXT NOT NULL,
	expires_at INTEGER NOT NULL
) WITHOUT ROWID;`

// sweepEvery is how many issues, or takes, a process makes between
// sweeps of what expired, counting from its first: a gateway that lives
// for a few calls sweeps too.
const sweepEvery = 1024

// Tokens is an [interlock.TokenStore] in a SQLite file, so that every
// interlock process on a data directory honours a confirm token that any
// of them issued, exactly once between them.
//
// Each binding has one row holding the nonce of its live token and when
// it expires, in Unix nanoseconds. Issuing replaces the row, superseding
// the earlier token; consuming deletes it only if it holds the presented
// nonce and has not expired. Both are IMMEDIATE transactions that read
// the time once they hold the write lock, so of any number of concurrent
// redemptions, in any number of processes, exactly one wins.
//
// A gateway finds it in its [State].
type Tokens struct {
	*handle
	// issued counts this handle's issues; only changes, which take turns
	// on the writer, touch it.
	issued int
}

var _ interlock.TokenStore = (*Tokens)(nil)

func (t *Tokens) fail(err error) error { return fmt.Errorf("token store %s: %w", t.path, err) }

// Issue implements [interlock.TokenStore].
func (t *Tokens) Issue(ctx context.Context, binding, nonce string, ttl time.Duration) error {
	err := t.change(ctx, func(c *sql.Conn, now time.Time) error {
		// Tokens that were never redeemed are dropped now and then, so
		// bindings that are not asked again do not pile up.
		if t.issued%sweepEvery == 0 {
			if _, err := c.ExecContext(ctx, "DELETE FROM tokens WHERE expires_at <= ?", now.UnixNano()); err != nil {
				return fmt.Errorf("dropping expired tokens: %w", err)
			}
		}
		t.issued++
		_, err := c.ExecContext(ctx, `INSERT INTO tokens (binding, nonce, expires_at) VALUES (?, ?, ?)
			ON CONFLICT (binding) DO UPDATE SET nonce = excluded.nonce, expires_at = excluded.expires_at`,
			binding, nonce, now.Add(ttl).UnixNano())
		if err != nil {
			return fmt.Errorf("issuing a token: %w", err)
		}
		return nil
	})
	if err != nil {
		return t.fail(err)
	}
	return nil
}

// Consume implements [interlock.TokenStore].
func (t *Tokens) Consume(ctx context.Context, binding, nonce string) (bool, error) {
	var consumed bool
	err := t.change(ctx, func(c *sql.Conn, now time.Time) error {
		res, err := c.ExecContext(ctx, "DELETE FROM tokens WHERE binding = ? AND nonce = ? AND expires_at > ?", binding, nonce, now.UnixNano())
		if err != nil {
			return fmt.Errorf("consuming a token: %w", err)
		}
		n, err := res.RowsAffected()
		if err != nil {
			return fmt.Errorf("consuming a token: %w", err)
		}
		consumed = n == 1
		return nil
	})
	if err != nil {
		return false, t.fail(err)
	}
	return consumed, nil
}
