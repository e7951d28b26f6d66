package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/interlock-mcp/interlock/roster"
)

var _ roster.Store = (*Approvals)(nil)

const gatewaysSchema = `CREATE TABLE IF NOT EXISTS gateways (
	id            TEXT PRIMARY KEY,
	version       TEXT NOT NULL,
	console_url   TEXT NOT NULL,
	since         INTEGER NOT NULL,
	seen          INTEGER NOT NULL,
	config_digest TEXT NOT NULL DEFAULT '',
	authenticates INTEGER NOT NULL DEFAULT 0,
	warnings      TEXT NOT NULL DEFAULT '[]'
);
`

// addWarnings gives the gateways table of a file made before warnings
// were announced their column. Processes opening the file at once may
// both try: the one that finds the column added is done too.
func addWarnings(ctx context.Context, db *sql.DB) error {
	var n int
	if err := db.QueryRowContext(ctx, "SELECT count(*) FROM pragma_table_info('gateways') WHERE name = 'warnings'").Scan(&n); err != nil || n > 0 {
		return err
	}
	_, err := db.ExecContext(ctx, "ALTER TABLE gateways ADD COLUMN warnings TEXT NOT NULL DEFAULT '[]'")
	if err != nil && strings.Contains(err.Error(), "duplicate column") {
		return nil
	}
	return err
}

// Announce records that g runs now, or that it still does: a gateway
// announces itself at start and then now and then, so the others on the
// data directory know whom to send approvers to. Announcements not
// renewed for a day are dropped.
func (s *Approvals) Announce(ctx context.Context, g roster.Gateway) error {
	err := s.change(ctx, func(c *sql.Conn, now time.Time) error {
		g := g.SeenAt(now)
		warnings, err := json.Marshal(g.Warnings)
		if err != nil {
			return err
		}
		if _, err := c.ExecContext(ctx, `INSERT INTO gateways (id, version, console_url, since, seen, config_digest, authenticates, warnings)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?)
			ON CONFLICT (id) DO UPDATE SET version = excluded.version, console_url = excluded.console_url, seen = excluded.seen,
				config_digest = excluded.config_digest, authenticates = excluded.authenticates, warnings = excluded.warnings`,
			g.ID, g.Version, g.ConsoleURL, g.Since.UnixNano(), g.Seen.UnixNano(), g.ConfigDigest, g.Authenticates, string(warnings)); err != nil {
			return err
		}
		_, err = c.ExecContext(ctx, "DELETE FROM gateways WHERE seen < ?", now.Add(-roster.Forget).UnixNano())
		return err
	})
	if err != nil {
		return fmt.Errorf("sqlite state %s: announcing gateway %s: %w", s.path, g.ID, err)
	}
	return nil
}

// Depart removes g's announcement, as a gateway stopping does.
func (s *Approvals) Depart(ctx context.Context, id string) error {
	err := s.change(ctx, func(c *sql.Conn, _ time.Time) error {
		_, err := c.ExecContext(ctx, "DELETE FROM gateways WHERE id = ?", id)
		return err
	})
	if err != nil {
		return fmt.Errorf("sqlite state %s: gateway %s departing: %w", s.path, id, err)
	}
	return nil
}

// Gateways returns the gateways seen within the last within, the most
// recently seen first.
func (s *Approvals) Gateways(ctx context.Context, within time.Duration) ([]roster.Gateway, error) {
	gws, err := s.gateways(ctx, within)
	if err != nil {
		return nil, fmt.Errorf("sqlite state %s: listing gateways: %w", s.path, err)
	}
	return gws, nil
}

func (s *Approvals) gateways(ctx context.Context, within time.Duration) ([]roster.Gateway, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT id, version, console_url, since, seen, config_digest, authenticates, warnings
		FROM gateways WHERE seen >= ? ORDER BY seen DESC, id`, time.Now().Add(-within).UnixNano())
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []roster.Gateway
	for rows.Next() {
		var g roster.Gateway
		var since, seen int64
		var warnings string
		if err := rows.Scan(&g.ID, &g.Version, &g.ConsoleURL, &since, &seen, &g.ConfigDigest, &g.Authenticates, &warnings); err != nil {
			return nil, err
		}
		if err := json.Unmarshal([]byte(warnings), &g.Warnings); err != nil {
			return nil, fmt.Errorf("the warnings of gateway %s: %w", g.ID, err)
		}
		g.Since, g.Seen = time.Unix(0, since), time.Unix(0, seen)
		out = append(out, g)
	}
	return out, rows.Err()
}
