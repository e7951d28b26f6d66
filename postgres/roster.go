package postgres

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/interlock-mcp/interlock/roster"
)

const rosterSchema = `
CREATE TABLE IF NOT EXISTS gateways (
	id    text PRIMARY KEY,
	since timestamptz NOT NULL,
	seen  timestamptz NOT NULL,
	body  text NOT NULL
);`

var _ roster.Store = (*Approvals)(nil)

// Announce implements [roster.Store]: the gateways that share the
// database announce themselves beside its approvals.
func (s *Approvals) Announce(ctx context.Context, g roster.Gateway) error {
	now := time.Now()
	g = g.SeenAt(now)
	body, err := json.Marshal(g)
	if err != nil {
		return s.fail(fmt.Errorf("announcing gateway %s: %w", g.ID, err))
	}
	_, err = s.pool.Exec(ctx, `WITH forgotten AS (DELETE FROM gateways WHERE seen < $5)
		INSERT INTO gateways (id, since, seen, body) VALUES ($1, $2, $3, $4)
		ON CONFLICT (id) DO UPDATE SET seen = excluded.seen, body = excluded.body`,
		g.ID, g.Since, now, string(body), now.Add(-roster.Forget))
	if err != nil {
		return s.fail(fmt.Errorf("announcing gateway %s: %w", g.ID, err))
	}
	return nil
}

// Depart implements [roster.Store].
func (s *Approvals) Depart(ctx context.Context, id string) error {
	if _, err := s.pool.Exec(ctx, "DELETE FROM gateways WHERE id = $1", id); err != nil {
		return s.fail(fmt.Errorf("gateway %s departing: %w", id, err))
	}
	return nil
}

// Gateways implements [roster.Store]. The time first announced is the
// row's, which a renewal leaves alone.
func (s *Approvals) Gateways(ctx context.Context, within time.Duration) ([]roster.Gateway, error) {
	rows, err := s.pool.Query(ctx, "SELECT since, seen, body FROM gateways WHERE seen >= $1 ORDER BY seen DESC, id",
		time.Now().Add(-within))
	if err != nil {
		return nil, s.fail(fmt.Errorf("listing gateways: %w", err))
	}
	gws, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (roster.Gateway, error) {
		var g roster.Gateway
		var since, seen time.Time
		var body string
		if err := row.Scan(&since, &seen, &body); err != nil {
			return g, err
		}
		if err := json.Unmarshal([]byte(body), &g); err != nil {
			return g, err
		}
		g.Since, g.Seen = since, seen
		return g, nil
	})
	if err != nil {
		return nil, s.fail(fmt.Errorf("listing gateways: %w", err))
	}
	return gws, nil
}
