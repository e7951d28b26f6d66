// Package postgres keeps interlock's audit log, and its approvals and
// standing grants (approvals.go), in PostgreSQL, for gateways that share
// them or whose operators want them off the gateway's disk.
//
// Records are stored as the JSON text they were hashed from (text, not
// jsonb, which would reorder their members), one row each in table audit,
// keyed by sequence number. The chain's head is one row of table
// audit_head: every batch locks it (SELECT … FOR UPDATE), appends after it
// and moves it, so any number of gateways append to one chain while only
// the head is serialised. A batch without a durable record is committed
// with synchronous_commit off, which a crash of the gateway cannot lose; a
// durable one waits for the server's flush.
package postgres

import (
	"context"
	"errors"
	"fmt"
	"iter"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/interlock-mcp/interlock/audit"
)

// auditSQL is the audit log's SQL, as package audit writes it for every
// relational store.
var auditSQL = audit.SQLOf(audit.PostgreSQL)

// headSchema keeps the chain's head in a row of its own, which every
// batch locks (see the package doc).
const headSchema = `
CREATE TABLE IF NOT EXISTS audit_head (
	id   int PRIMARY KEY CHECK (id = 1),
	seq  bigint NOT NULL,
	hash text NOT NULL
);
INSERT INTO audit_head (id, seq, hash) VALUES (1, 0, '') ON CONFLICT DO NOTHING;`

// Audit is an audit log in a PostgreSQL database.
type Audit struct {
	*audit.GroupCommit
	pool *pgxpool.Pool
	// where names the server for messages, without its password.
	where string
}

var (
	_ audit.Log    = (*Audit)(nil)
	_ audit.Reader = (*Audit)(nil)
	_ audit.Queuer = (*Audit)(nil)
)

// OpenAudit connects to the database at url (postgres://…; a search_path
// parameter selects the schema) and creates the tables it needs.
func OpenAudit(ctx context.Context, url string) (*Audit, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("audit log: postgres URL: %w", err)
	}
	where := fmt.Sprintf("postgres %s:%d/%s", cfg.ConnConfig.Host, cfg.ConnConfig.Port, cfg.ConnConfig.Database)
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("audit log %s: %w", where, err)
	}
	// Several gateways may start at once: the schema is created under an
	// advisory lock so their CREATE statements do not collide.
	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock(7140414)"); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, auditSQL.Schema); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, headSchema)
		return err
	})
	if err != nil {
		pool.Close()
		return nil, fmt.Errorf("audit log %s: creating tables: %w", where, err)
	}
	a := &Audit{pool: pool, where: where}
	a.GroupCommit = audit.NewGroupCommit(a.commit)
	return a, nil
}

func (a *Audit) commit(ctx context.Context, durable bool, recs []*audit.Record) error {
	err := pgx.BeginFunc(ctx, a.pool, func(tx pgx.Tx) error {
		if !durable {
			if _, err := tx.Exec(ctx, "SET LOCAL synchronous_commit = off"); err != nil {
				return err
			}
		}
		var seq int64
		var prev string
		if err := tx.QueryRow(ctx, "SELECT seq, hash FROM audit_head WHERE id = 1 FOR UPDATE").Scan(&seq, &prev); err != nil {
			return fmt.Errorf("reading the head: %w", err)
		}
		var batch pgx.Batch
		for _, r := range recs {
			seq++
			b, err := r.Link(seq, prev)
			if err != nil {
				return err
			}
			batch.Queue(auditSQL.Append, r.Seq, r.Hash, string(b))
			prev = r.Hash
		}
		batch.Queue("UPDATE audit_head SET seq = $1, hash = $2 WHERE id = 1", seq, prev)
		return tx.SendBatch(ctx, &batch).Close()
	})
	if err != nil {
		return fmt.Errorf("audit log %s: %w", a.where, err)
	}
	return nil
}

// Head returns the sequence number and hash of the last record; 0 and ""
// for an empty log.
func (a *Audit) Head(ctx context.Context) (int64, string, error) {
	var seq int64
	var hash string
	err := a.pool.QueryRow(ctx, auditSQL.Head).Scan(&seq, &hash)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, "", nil
	}
	if err != nil {
		return 0, "", fmt.Errorf("audit log %s: %w", a.where, err)
	}
	return seq, hash, nil
}

// Records implements [audit.Reader].
func (a *Audit) Records(ctx context.Context, from int64) iter.Seq2[*audit.Record, error] {
	return func(yield func(*audit.Record, error) bool) {
		rows, err := a.pool.Query(ctx, auditSQL.From, from)
		if err != nil {
			yield(nil, fmt.Errorf("audit log %s: %w", a.where, err))
			return
		}
		defer rows.Close()
		audit.YieldRecords(rows, func(err error) error { return fmt.Errorf("audit log %s: %w", a.where, err) }, yield)
	}
}

// AppendCheckpoint implements [audit.CheckpointStore].
func (a *Audit) AppendCheckpoint(ctx context.Context, cp audit.Checkpoint) error {
	_, err := a.pool.Exec(ctx, auditSQL.AppendCheckpoint, audit.CheckpointArgs(cp)...)
	if err != nil {
		return fmt.Errorf("audit log %s: %w", a.where, err)
	}
	return nil
}

// Checkpoints implements [audit.CheckpointStore].
func (a *Audit) Checkpoints(ctx context.Context) ([]audit.Checkpoint, error) {
	rows, err := a.pool.Query(ctx, auditSQL.Checkpoints)
	if err != nil {
		return nil, fmt.Errorf("audit log %s: %w", a.where, err)
	}
	defer rows.Close()
	cps, err := audit.ScanCheckpoints(rows)
	if err != nil {
		return nil, fmt.Errorf("audit log %s: %w", a.where, err)
	}
	return cps, nil
}

// Close writes what is queued and closes the connections.
func (a *Audit) Close() error {
	a.GroupCommit.Close()
	a.pool.Close()
	return nil
}
