package sqlite

import (
	"context"
	"database/sql"
	"time"

	"github.com/interlock-mcp/interlock/consolestate/sqlstore"
)

// statements runs package sqlstore's statements on the database or on a
// connection.
type statements struct {
	q interface {
		ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
		QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
		QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	}
}

// Exec implements [sqlstore.Querier].
func (s statements) Exec(ctx context.Context, query string, args ...any) (int64, error) {
	res, err := s.q.ExecContext(ctx, query, args...)
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}

// QueryRow implements [sqlstore.Querier].
func (s statements) QueryRow(ctx context.Context, query string, args ...any) sqlstore.Row {
	return s.q.QueryRowContext(ctx, query, args...)
}

// Query implements [sqlstore.Querier].
func (s statements) Query(ctx context.Context, each func(sqlstore.Row) error, query string, args ...any) error {
	rows, err := s.q.QueryContext(ctx, query, args...)
	if err != nil {
		return err
	}
	defer rows.Close()
	return sqlstore.Each(rows, each)
}

// database is a handle as package sqlstore's stores use it: they read on
// the database, and change it on the handle's writer, in its IMMEDIATE
// transactions.
type database struct {
	statements
	h *handle
}

func newDatabase(h *handle) database { return database{statements{h.db}, h} }

// Change implements [sqlstore.Database].
func (d database) Change(ctx context.Context, fn func(q sqlstore.Querier, now time.Time) error) error {
	return d.h.change(ctx, func(c *sql.Conn, now time.Time) error { return fn(statements{c}, now) })
}
