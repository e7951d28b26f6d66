package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/interlock-mcp/interlock"
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
}

var (
	_ interlock.ApprovalStore = (*Approvals)(nil)
	_ interlock.GrantStore    = (*Approvals)(nil)
)

// OpenApprovals connects to the database at url and creates the tables it
// needs.
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
		_, err := tx.Exec(ctx, approvalsSchema)
		return err
	})
	if err != nil {
		pool.Close()
		return nil, fmt.Errorf("approval store %s: creating tables: %w", where, err)
	}
	return &Approvals{pool: pool, where: where}, nil
}

func (s *Approvals) fail(err error) error { return fmt.Errorf("approval store %s: %w", s.where, err) }

func scanApproval(row pgx.Row) (*interlock.Approval, error) {
	var body string
	if err := row.Scan(&body); err != nil {
		if errors.Is(err, pgx.ErrNoRows) {
			return nil, interlock.ErrApprovalUnknown
		}
		return nil, err
	}
	a := &interlock.Approval{}
	return a, json.Unmarshal([]byte(body), a)
}

func (s *Approvals) put(ctx context.Context, tx pgx.Tx, a *interlock.Approval) error {
	b, err := json.Marshal(a)
	if err != nil {
		return err
	}
	_, err = tx.Exec(ctx, `INSERT INTO approvals (id, key, created_at, expires_at, body) VALUES ($1, $2, $3, $4, $5)
		ON CONFLICT (id) DO UPDATE SET body = excluded.body`, a.ID, a.Key, a.CreatedAt, a.ExpiresAt, string(b))
	return err
}

// Request implements [interlock.ApprovalStore].
func (s *Approvals) Request(ctx context.Context, a *interlock.Approval) (*interlock.Approval, error) {
	out := a
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock(hashtext($1))", a.Key); err != nil {
			return err
		}
		live, err := scanApproval(tx.QueryRow(ctx, "SELECT body FROM approvals WHERE key = $1 ORDER BY created_at DESC LIMIT 1", a.Key))
		if err != nil && !errors.Is(err, interlock.ErrApprovalUnknown) {
			return err
		}
		if live != nil {
			if answers, changed := live.Answers(time.Now()); answers {
				out = live
				if changed {
					return s.put(ctx, tx, live)
				}
				return nil
			}
		}
		// Approvals long gone leave the table.
		if _, err := tx.Exec(ctx, "DELETE FROM approvals WHERE expires_at < $1", time.Now().Add(-48*time.Hour)); err != nil {
			return err
		}
		return s.put(ctx, tx, a)
	})
	if err != nil {
		return nil, s.fail(err)
	}
	return out, nil
}

// Get implements [interlock.ApprovalStore].
func (s *Approvals) Get(ctx context.Context, id string) (*interlock.Approval, error) {
	a, err := scanApproval(s.pool.QueryRow(ctx, "SELECT body FROM approvals WHERE id = $1", id))
	if err != nil && !errors.Is(err, interlock.ErrApprovalUnknown) {
		return nil, s.fail(err)
	}
	return a, err
}

// List implements [interlock.ApprovalStore].
func (s *Approvals) List(ctx context.Context) ([]*interlock.Approval, error) {
	rows, err := s.pool.Query(ctx, "SELECT body FROM approvals WHERE expires_at > $1 ORDER BY created_at", time.Now())
	if err != nil {
		return nil, s.fail(err)
	}
	defer rows.Close()
	var out []*interlock.Approval
	for rows.Next() {
		a, err := scanApproval(rows)
		if err != nil {
			return nil, s.fail(err)
		}
		if a.State(time.Now()) == interlock.ApprovalPending {
			out = append(out, a)
		}
	}
	return out, rows.Err()
}

// change applies fn to the approval id, locked, and stores it.
func (s *Approvals) change(ctx context.Context, id string, fn func(a *interlock.Approval) error) (*interlock.Approval, error) {
	var out *interlock.Approval
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

// Decide implements [interlock.ApprovalStore].
func (s *Approvals) Decide(ctx context.Context, id string, v interlock.Vote, approve bool) (*interlock.Approval, error) {
	a, err := s.change(ctx, id, func(a *interlock.Approval) error {
		return a.AddVote(v, approve, time.Now())
	})
	if err != nil && !errors.Is(err, interlock.ErrAlreadyDecided) && !errors.Is(err, interlock.ErrAlreadyVoted) && !errors.Is(err, interlock.ErrApprovalUnknown) {
		return nil, s.fail(err)
	}
	return a, err
}

// Consume implements [interlock.ApprovalStore].
func (s *Approvals) Consume(ctx context.Context, id string) (bool, error) {
	_, err := s.change(ctx, id, func(a *interlock.Approval) error {
		return a.Consume(time.Now())
	})
	spent, err := interlock.Spent(err)
	if err != nil {
		return false, s.fail(err)
	}
	return spent, nil
}

func scanGrant(row pgx.Row) (*interlock.StandingGrant, error) {
	var body string
	if err := row.Scan(&body); err != nil {
		if errors.Is(err, pgx.ErrNoRows) {
			return nil, interlock.ErrGrantUnknown
		}
		return nil, err
	}
	g := &interlock.StandingGrant{}
	return g, json.Unmarshal([]byte(body), g)
}

func putGrant(ctx context.Context, tx pgx.Tx, g *interlock.StandingGrant) error {
	b, err := json.Marshal(g)
	if err != nil {
		return err
	}
	_, err = tx.Exec(ctx, `INSERT INTO grants (id, expires_at, body) VALUES ($1, $2, $3)
		ON CONFLICT (id) DO UPDATE SET body = excluded.body`, g.ID, g.ExpiresAt, string(b))
	return err
}

// AddGrant implements [interlock.GrantStore].
func (s *Approvals) AddGrant(ctx context.Context, g *interlock.StandingGrant) error {
	if err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error { return putGrant(ctx, tx, g) }); err != nil {
		return s.fail(err)
	}
	return nil
}

// LiveGrants implements [interlock.GrantStore].
func (s *Approvals) LiveGrants(ctx context.Context) ([]*interlock.StandingGrant, error) {
	rows, err := s.pool.Query(ctx, "SELECT body FROM grants WHERE expires_at > $1", time.Now())
	if err != nil {
		return nil, s.fail(err)
	}
	defer rows.Close()
	var out []*interlock.StandingGrant
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

func (s *Approvals) changeGrant(ctx context.Context, id string, fn func(g *interlock.StandingGrant) error) (*interlock.StandingGrant, error) {
	var out *interlock.StandingGrant
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

// UseGrant implements [interlock.GrantStore].
func (s *Approvals) UseGrant(ctx context.Context, id string) (bool, error) {
	_, err := s.changeGrant(ctx, id, func(g *interlock.StandingGrant) error {
		return g.Use(time.Now())
	})
	spent, err := interlock.Spent(err)
	if err != nil {
		return false, s.fail(err)
	}
	return spent, nil
}

// RevokeGrant implements [interlock.GrantStore].
func (s *Approvals) RevokeGrant(ctx context.Context, id string) (*interlock.StandingGrant, error) {
	g, err := s.changeGrant(ctx, id, func(g *interlock.StandingGrant) error { g.Revoked = true; return nil })
	if err != nil && !errors.Is(err, interlock.ErrGrantUnknown) {
		return nil, s.fail(err)
	}
	return g, err
}

// Grant implements [interlock.GrantStore].
func (s *Approvals) Grant(ctx context.Context, id string) (*interlock.StandingGrant, error) {
	g, err := scanGrant(s.pool.QueryRow(ctx, "SELECT body FROM grants WHERE id = $1", id))
	if err != nil && !errors.Is(err, interlock.ErrGrantUnknown) {
		return nil, s.fail(err)
	}
	return g, err
}

// Close closes the connections.
func (s *Approvals) Close() { s.pool.Close() }
