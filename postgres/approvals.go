package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/interlock-mcp/interlock/approval"
	"github.com/interlock-mcp/interlock/consolestate/sqlstore"
)

const approvalsSchema = `
CREATE TABLE IF NOT EXISTS approvals (
	id         text PRIMARY KEY,
	key        text NOT NULL,
	created_at timestamptz NOT NULL,
	expires_at timestamptz NOT NULL,
	body       text NOT NULL
);
CREATE INDEX IF NOT EXISTS approvals_key ON approvals (key, created_at);
CREATE TABLE IF NOT EXISTS grants (
	id         text PRIMARY KEY,
	expires_at timestamptz NOT NULL,
	body       text NOT NULL
);`

// Approvals keeps approvals and standing grants in PostgreSQL, for
// gateways that share a database rather than Redis. Every change reads its
// row FOR UPDATE in a transaction (a binding's approvals are serialised by
// an advisory lock on its key), so an approval is consumed, and a grant's
// use counted, exactly once whichever gateway asks.
type Approvals struct {
	pool  *pgxpool.Pool
	where string
	// channel carries the console's signal (see [Approvals.Console]).
	channel string
}

var (
	_ approval.Store      = (*Approvals)(nil)
	_ approval.GrantStore = (*Approvals)(nil)
)

// OpenApprovals connects to the database at url and creates the tables it
// needs, the console's ([Approvals.Console]) among them.
func OpenApprovals(ctx context.Context, url string) (*Approvals, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("approval store: postgres URL: %w", err)
	}
	where := fmt.Sprintf("postgres %s:%d/%s", cfg.ConnConfig.Host, cfg.ConnConfig.Port, cfg.ConnConfig.Database)
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("approval store %s: %w", where, err)
	}
	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock(7140415)"); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, approvalsSchema+";"+sqlstore.PostgreSQL.ConsoleSchema()+";"+rosterSchema)
		return err
	})
	var schema string
	if err == nil {
		err = pool.QueryRow(ctx, "SELECT current_schema()").Scan(&schema)
	}
	if err != nil {
		pool.Close()
		return nil, fmt.Errorf("approval store %s: creating tables: %w", where, err)
	}
	return &Approvals{pool: pool, where: where, channel: channelOf(schema)}, nil
}

func (s *Approvals) fail(err error) error { return fmt.Errorf("approval store %s: %w", s.where, err) }

func scanApproval(row pgx.Row) (*approval.Approval, error) {
	var body string
	if err := row.Scan(&body); err != nil {
		if errors.Is(err, pgx.ErrNoRows) {
			return nil, approval.ErrUnknown
		}
		return nil, err
	}
	a := &approval.Approval{}
	return a, json.Unmarshal([]byte(body), a)
}

func (s *Approvals) put(ctx context.Context, tx pgx.Tx, a *approval.Approval) error {
	b, err := json.Marshal(a)
	if err != nil {
		return err
	}
	_, err = tx.Exec(ctx, `INSERT INTO approvals (id, key, created_at, expires_at, body) VALUES ($1, $2, $3, $4, $5)
		ON CONFLICT (id) DO UPDATE SET body = excluded.body`, a.ID, a.Key, a.CreatedAt, a.ExpiresAt, string(b))
	return err
}

// Request implements [approval.Store].
func (s *Approvals) Request(ctx context.Context, a *approval.Approval) (*approval.Approval, error) {
	out := a
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock(hashtext($1))", a.Key); err != nil {
			return err
		}
		// The live row is locked as Decide and Consume lock it, so marking
		// it Reported never overwrites a vote or a consumption.
		live, err := scanApproval(tx.QueryRow(ctx, "SELECT body FROM approvals WHERE key = $1 ORDER BY created_at DESC LIMIT 1 FOR UPDATE", a.Key))
		if err != nil && !errors.Is(err, approval.ErrUnknown) {
			return err
		}
		answer, store := approval.Resolve(live, a, time.Now())
		out = answer
		if store == nil {
			return nil
		}
		if store == a {
			// Approvals long gone leave the table.
			if _, err := tx.Exec(ctx, "DELETE FROM approvals WHERE expires_at < $1", time.Now().Add(-48*time.Hour)); err != nil {
				return err
			}
		}
		return s.put(ctx, tx, store)
	})
	if err != nil {
		return nil, s.fail(err)
	}
	return out, nil
}

// Get implements [approval.Store].
func (s *Approvals) Get(ctx context.Context, id string) (*approval.Approval, error) {
	a, err := scanApproval(s.pool.QueryRow(ctx, "SELECT body FROM approvals WHERE id = $1", id))
	if err != nil && !errors.Is(err, approval.ErrUnknown) {
		return nil, s.fail(err)
	}
	return a, err
}

// List implements [approval.Store].
func (s *Approvals) List(ctx context.Context) ([]*approval.Approval, error) {
	rows, err := s.pool.Query(ctx, "SELECT body FROM approvals WHERE expires_at > $1 ORDER BY created_at", time.Now())
	if err != nil {
		return nil, s.fail(err)
	}
	defer rows.Close()
	var out []*approval.Approval
	for rows.Next() {
		a, err := scanApproval(rows)
		if err != nil {
			return nil, s.fail(err)
		}
		if a.State(time.Now()) == approval.Pending {
			out = append(out, a)
		}
	}
	return out, rows.Err()
}

// change applies fn to the approval id, locked, and stores it.
func (s *Approvals) change(ctx context.Context, id string, fn func(a *approval.Approval) error) (*approval.Approval, error) {
	var out *approval.Approval
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		a, err := scanApproval(tx.QueryRow(ctx, "SELECT body FROM approvals WHERE id = $1 FOR UPDATE", id))
		if err != nil {
			return err
		}
		if err := fn(a); err != nil {
			return err
		}
		out = a
		return s.put(ctx, tx, a)
	})
	return out, err
}

// Decide implements [approval.Store].
func (s *Approvals) Decide(ctx context.Context, id string, v approval.Vote) (*approval.Approval, error) {
	a, err := s.change(ctx, id, func(a *approval.Approval) error {
		return a.AddVote(v, time.Now())
	})
	if err != nil && !errors.Is(err, approval.ErrAlreadyDecided) && !errors.Is(err, approval.ErrAlreadyVoted) && !errors.Is(err, approval.ErrUnknown) {
		return nil, s.fail(err)
	}
	return a, err
}

// Consume implements [approval.Store].
func (s *Approvals) Consume(ctx context.Context, id string) (bool, error) {
	_, err := s.change(ctx, id, func(a *approval.Approval) error {
		return a.Consume(time.Now())
	})
	spent, err := approval.Spent(err)
	if err != nil {
		return false, s.fail(err)
	}
	return spent, nil
}

func scanGrant(row pgx.Row) (*approval.StandingGrant, error) {
	var body string
	if err := row.Scan(&body); err != nil {
		if errors.Is(err, pgx.ErrNoRows) {
			return nil, approval.ErrGrantUnknown
		}
		return nil, err
	}
	g := &approval.StandingGrant{}
	return g, json.Unmarshal([]byte(body), g)
}

func putGrant(ctx context.Context, tx pgx.Tx, g *approval.StandingGrant) error {
	b, err := json.Marshal(g)
	if err != nil {
		return err
	}
	_, err = tx.Exec(ctx, `INSERT INTO grants (id, expires_at, body) VALUES ($1, $2, $3)
		ON CONFLICT (id) DO UPDATE SET body = excluded.body`, g.ID, g.ExpiresAt, string(b))
	return err
}

// AddGrant implements [approval.GrantStore].
func (s *Approvals) AddGrant(ctx context.Context, g *approval.StandingGrant) error {
	if err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error { return putGrant(ctx, tx, g) }); err != nil {
		return s.fail(err)
	}
	return nil
}

// LiveGrants implements [approval.GrantStore].
func (s *Approvals) LiveGrants(ctx context.Context) ([]*approval.StandingGrant, error) {
	rows, err := s.pool.Query(ctx, "SELECT body FROM grants WHERE expires_at > $1", time.Now())
	if err != nil {
		return nil, s.fail(err)
	}
	defer rows.Close()
	var out []*approval.StandingGrant
	for rows.Next() {
		g, err := scanGrant(rows)
		if err != nil {
			return nil, s.fail(err)
		}
		if g.Live(time.Now()) {
			out = append(out, g)
		}
	}
	return out, rows.Err()
}

func (s *Approvals) changeGrant(ctx context.Context, id string, fn func(g *approval.StandingGrant) error) (*approval.StandingGrant, error) {
	var out *approval.StandingGrant
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		g, err := scanGrant(tx.QueryRow(ctx, "SELECT body FROM grants WHERE id = $1 FOR UPDATE", id))
		if err != nil {
			return err
		}
		if err := fn(g); err != nil {
			return err
		}
		out = g
		return putGrant(ctx, tx, g)
	})
	return out, err
}

// UseGrant implements [approval.GrantStore].
func (s *Approvals) UseGrant(ctx context.Context, id string) (bool, error) {
	_, err := s.changeGrant(ctx, id, func(g *approval.StandingGrant) error {
		return g.Use(time.Now())
	})
	spent, err := approval.Spent(err)
	if err != nil {
		return false, s.fail(err)
	}
	return spent, nil
}

// RevokeGrant implements [approval.GrantStore].
func (s *Approvals) RevokeGrant(ctx context.Context, id, void string) (*approval.StandingGrant, error) {
	g, err := s.changeGrant(ctx, id, func(g *approval.StandingGrant) error { g.Revoke(void); return nil })
	if err != nil && !errors.Is(err, approval.ErrGrantUnknown) {
		return nil, s.fail(err)
	}
	return g, err
}

// Grant implements [approval.GrantStore].
func (s *Approvals) Grant(ctx context.Context, id string) (*approval.StandingGrant, error) {
	g, err := scanGrant(s.pool.QueryRow(ctx, "SELECT body FROM grants WHERE id = $1", id))
	if err != nil && !errors.Is(err, approval.ErrGrantUnknown) {
		return nil, s.fail(err)
	}
	return g, err
}

// Close closes the connections.
func (s *Approvals) Close() { s.pool.Close() }
