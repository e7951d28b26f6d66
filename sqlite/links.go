package sqlite

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"fmt"
	"time"
)

// consoleLinksSchema keeps the one-time console links made outside the
// gateway (`interlock console link`) by the SHA-256 of their token, so a
// copy of the file, such as a backup, holds no link that signs anyone in.
const consoleLinksSchema = `CREATE TABLE IF NOT EXISTS console_links (
	hash       TEXT PRIMARY KEY,
	expires_at INTEGER NOT NULL
) WITHOUT ROWID;
`

// AddConsoleLink keeps token as a one-time console link for ttl from now,
// for whichever gateway on the data directory the operator opens it in
// (see [Approvals.SpendConsoleLink]). Links that expired are dropped.
func (s *Approvals) AddConsoleLink(ctx context.Context, token string, ttl time.Duration) error {
	err := s.change(ctx, func(c *sql.Conn, now time.Time) error {
		if _, err := c.ExecContext(ctx, "DELETE FROM console_links WHERE expires_at <= ?", now.UnixNano()); err != nil {
			return err
		}
		_, err := c.ExecContext(ctx, "INSERT INTO console_links (hash, expires_at) VALUES (?, ?)", linkHash(token), now.Add(ttl).UnixNano())
		return err
	})
	if err != nil {
		return fmt.Errorf("sqlite state %s: keeping a console link: %w", s.path, err)
	}
	return nil
}

// SpendConsoleLink reports whether token is a console link kept by
// [Approvals.AddConsoleLink] that has neither expired nor been spent, and
// spends it. The check and the spending are one IMMEDIATE transaction, so
// of any number of processes presenting one link, exactly one is told
// true.
func (s *Approvals) SpendConsoleLink(ctx context.Context, token string) (bool, error) {
	spent := false
	err := s.change(ctx, func(c *sql.Conn, now time.Time) error {
		res, err := c.ExecContext(ctx, "DELETE FROM console_links WHERE hash = ? AND expires_at > ?", linkHash(token), now.UnixNano())
		if err != nil {
			return err
		}
		n, err := res.RowsAffected()
		if err != nil {
			return err
		}
		spent = n == 1
		// Expired links go too, this one among them if it was: they sign
		// nobody in, now or later.
		_, err = c.ExecContext(ctx, "DELETE FROM console_links WHERE expires_at <= ?", now.UnixNano())
		return err
	})
	if err != nil {
		return false, fmt.Errorf("sqlite state %s: spending a console link: %w", s.path, err)
	}
	return spent, nil
}

// linkHash is the hex SHA-256 a console link's token is kept by.
func linkHash(token string) string {
	sum := sha256.Sum256([]byte(token))
	return hex.EncodeToString(sum[:])
}
