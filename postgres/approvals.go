package postgres

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/interlock-mcp/interlock/approval"
	"github.com/interlock-mcp/interlock/consolestate/sqlstore"
)

// Approvals keeps approvals and standing grants in PostgreSQL, for
// gateways that share a database rather than Redis. Package sqlstore
// writes and reads them, as it does SQLite's: every change is a
// transaction that reads its row FOR UPDATE (a binding's approvals are
// serialised by an advisory lock on its key), so an approval is consumed,
// and a grant's use counted, exactly once whichever gateway asks.
type Approvals struct {
	*sqlstore.Approvals
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
// needs, the console's ([Approvals.Console]) and the tasks'
// ([Approvals.Tasks]) among them.
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
		_, err := tx.Exec(ctx, sqlstore.PostgreSQL.ApprovalsSchema()+";"+sqlstore.PostgreSQL.ConsoleSchema()+";"+rosterSchema+";"+sqlstore.PostgreSQL.TasksSchema())
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
	approvals := sqlstore.NewApprovals(newDatabase(pool), sqlstore.PostgreSQL, "approval store "+where)
	return &Approvals{Approvals: approvals, pool: pool, where: where, channel: channelOf(schema)}, nil
}

func (s *Approvals) fail(err error) error { return fmt.Errorf("approval store %s: %w", s.where, err) }

// Close closes the connections.
func (s *Approvals) Close() { s.pool.Close() }
