// Package sqlstore is the state that interlock's relational stores,
// package sqlite and package postgres, keep alike, written once: the
// console's state ([consolestate.Store]), approvals with their standing
// grants ([approval.Store], [approval.GrantStore]) and tasks
// ([task.Store]), their SQL in each [Dialect] and the Go that runs it. A
// store package keeps what differs between the databases: how it opens
// one, how a change holds its lock ([Database]), and how the console's
// signal travels.
//
// The tables, columns and encodings are those each store wrote before
// they shared this package, so a data directory or a database an earlier
// gateway wrote reads the same.
//
// It sits under consolestate, in its layer, because it builds on the
// domains of that layer it keeps: consolestate, approval and task.
package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"
)

// Querier runs statements: on the database, or in a change.
type Querier interface {
	// Exec runs a statement and returns how many rows it changed.
	Exec(ctx context.Context, query string, args ...any) (int64, error)
	// QueryRow runs a statement that returns at most one row.
	QueryRow(ctx context.Context, query string, args ...any) Row
	// Query runs a statement and calls each with its rows in turn, until
	// each fails.
	Query(ctx context.Context, each func(Row) error, query string, args ...any) error
}

// Row is one row a statement returned. Scan's error for a statement that
// returned none is sql.ErrNoRows (errors.Is), as database/sql and pgx
// both report it.
type Row interface {
	Scan(dest ...any) error
}

// Rows is a query's rows, as both drivers give them.
type Rows interface {
	Row
	Next() bool
	Err() error
}

// Each calls each with every row of rows in turn, until each fails, and
// then tells why rows stopped: a Querier's Query over its driver's rows.
func Each(rows Rows, each func(Row) error) error {
	for rows.Next() {
		if err := each(rows); err != nil {
			return err
		}
	}
	return rows.Err()
}

// Database is a store's database as this package uses it: it reads on
// the Querier, and writes in changes only.
type Database interface {
	Querier
	// Change runs fn in one transaction and commits what it wrote unless
	// fn fails. now is the time read once the transaction began, after
	// any lock it takes as a whole.
	Change(ctx context.Context, fn func(q Querier, now time.Time) error) error
}

// Dialects of SQL: how a database writes the statements and tables the
// stores share, and how its store laid out the approvals and grants that
// the two stores once kept apart.
var (
	// SQLite's changes are IMMEDIATE transactions, which hold the whole
	// file: they read without locking rows.
	SQLite = Dialect{
		param: func(int) string { return "?" },
		text:  "TEXT", integer: "INTEGER", blob: "BLOB", keyed: " WITHOUT ROWID",
		greatest:   "max",
		passkeySeq: "INTEGER NOT NULL", nextPasskeySeq: "(SELECT coalesce(max(seq), 0) + 1 FROM console_passkeys)",
		approvals: sqliteApprovals,
	}
	PostgreSQL = Dialect{
		param: func(n int) string { return fmt.Sprintf("$%d", n) },
		text:  "text", integer: "bigint", blob: "bytea",
		greatest:   "greatest",
		forUpdate:  " FOR UPDATE",
		passkeySeq: "bigserial", nextPasskeySeq: "DEFAULT",
		approvals: postgresApprovals,
	}
)

// Dialect is one database's way of writing what this package keeps.
type Dialect struct {
	// param is a statement's nth parameter.
	param func(n int) string
	// text, integer and blob are column types.
	text, integer, blob string
	// keyed ends the definition of a table found by its primary key.
	keyed string
	// greatest is the function of the larger of two values.
	greatest string
	// forUpdate locks the rows a change reads until it commits.
	forUpdate string
	// passkeySeq is the type of the column that orders passkeys, and
	// nextPasskeySeq the value of a new one.
	passkeySeq, nextPasskeySeq string
	approvals                  approvalTables
}

// sql is query, written with ? parameters, in dialect d.
func (d Dialect) sql(query string) string {
	parts := strings.Split(query, "?")
	var b strings.Builder
	b.WriteString(parts[0])
	for i, p := range parts[1:] {
		b.WriteString(d.param(i + 1))
		b.WriteString(p)
	}
	return b.String()
}

// statements runs this package's statements, written with ? parameters,
// on q in dialect d.
type statements struct {
	q Querier
	d Dialect
}

func (s statements) exec(ctx context.Context, query string, args ...any) (int64, error) {
	return s.q.Exec(ctx, s.d.sql(query), args...)
}

func (s statements) row(ctx context.Context, query string, args ...any) Row {
	return s.q.QueryRow(ctx, s.d.sql(query), args...)
}

func (s statements) rows(ctx context.Context, each func(Row) error, query string, args ...any) error {
	return s.q.Query(ctx, each, s.d.sql(query), args...)
}

// store is a database as a store of this package holds it.
type store struct {
	db Database
	d  Dialect
	// where names the store in errors.
	where string
}

// read returns the statements that read outside a change.
func (s store) read() statements { return statements{s.db, s.d} }

// change runs fn in one change of the database.
func (s store) change(ctx context.Context, fn func(w statements, now time.Time) error) error {
	return s.db.Change(ctx, func(q Querier, now time.Time) error { return fn(statements{q, s.d}, now) })
}

// noRows reports whether err is that of a row not found.
func noRows(err error) bool { return errors.Is(err, sql.ErrNoRows) }
