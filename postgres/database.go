package postgres

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/interlock-mcp/interlock/consolestate/sqlstore"
)

// statements runs package sqlstore's statements on the pool or in a
// transaction.
type statements struct {
	q interface {
		Exec(ctx context.Context, query string, args ...any) (pgconn.CommandTag, error)
		QueryRow(ctx context.Context, query string, args ...any) pgx.Row
		Query(ctx context.Context, query string, args ...any) (pgx.Rows, error)
	}
}

// Exec implements [sqlstore.Querier].
func (s statements) Exec(ctx context.Context, query string, args ...any) (int64, error) {
	tag, err := s.q.Exec(ctx, query, args...)
	return tag.RowsAffected(), err
}

// QueryRow implements [sqlstore.Querier].
func (s statements) QueryRow(ctx context.Context, query string, args ...any) sqlstore.Row {
	return s.q.QueryRow(ctx, query, args...)
}

// Query implements [sqlstore.Querier].
func (s statements) Query(ctx context.Context, each func(sqlstore.Row) error, query string, args ...any) error {
	rows, err := s.q.Query(ctx, query, args...)
	if err != nil {
		return err
	}
	defer rows.Close()
	return sqlstore.Each(rows, each)
}

// database is a pool as package sqlstore's stores use it: every change is
// a transaction of its own, whose rows are locked as its statements say.
type database struct {
	statements
	pool *pgxpool.Pool
}

func newDatabase(pool *pgxpool.Pool) database { return database{statements{pool}, pool} }

// Change implements [sqlstore.Database].
func (d database) Change(ctx context.Context, fn func(q sqlstore.Querier, now time.Time) error) error {
	return pgx.BeginFunc(ctx, d.pool, func(tx pgx.Tx) error { return fn(statements{tx}, time.Now()) })
}
