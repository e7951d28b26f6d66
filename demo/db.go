// Package demo is the built-in demo back office that interlock serve fronts
// by default: a small billing and operations MCP server backed by a SQLite
// file, so people can try the gate on a fresh machine without wiring up a
// real upstream server.
//
// It has customers on plans, invoices, refunds, payment reminders and
// service releases, and exposes them as read-only, additive and destructive
// tools whose annotations tell the gate which calls need confirmation. The
// seed data (customers acct_9931, acct_1024 and acct_2048, invoices
// inv_1001 to inv_1005, services billing-api and web) is stable so tests
// and walkthroughs can name it.
package demo

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	_ "modernc.org/sqlite" // registers the pure-Go "sqlite" driver
)

// DB is an open demo database.
type DB struct {
	sql *sql.DB
}

// dsnParams make the file shareable between processes: WAL lets readers and
// a writer overlap, the busy timeout makes writers wait for each other
// instead of failing, and immediate transactions take the write lock up
// front so a read-then-write transaction cannot fail on lock upgrade.
const dsnParams = "?_pragma=busy_timeout(5000)&_pragma=journal_mode(WAL)&_pragma=foreign_keys(1)&_pragma=synchronous(NORMAL)&_txlock=immediate"

// Open opens (creating if needed) the demo database at path. It seeds the
// database on first start; reset wipes everything and reseeds.
func Open(path string, reset bool) (*DB, error) {
	if path == "" {
		return nil, errors.New("demo: database path is empty")
	}
	// The driver cuts the file name at the first '?', so such a path would
	// silently open a different file.
	if strings.ContainsRune(path, '?') {
		return nil, fmt.Errorf("demo: database path %q must not contain '?'", path)
	}
	if dir := filepath.Dir(path); dir != "" {
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return nil, fmt.Errorf("demo: create database directory: %w", err)
		}
	}
	sqlDB, err := sql.Open("sqlite", path+dsnParams)
	if err != nil {
		return nil, fmt.Errorf("demo: open database: %w", err)
	}
	db := &DB{sql: sqlDB}
	if err := db.prepare(context.Background(), reset); err != nil {
		sqlDB.Close()
		return nil, err
	}
	return db, nil
}

// Close closes the database.
func (db *DB) Close() error { return db.sql.Close() }

const schema = `
CREATE TABLE IF NOT EXISTS customers (
	id    TEXT PRIMARY KEY,
	name  TEXT NOT NULL,
	email TEXT NOT NULL,
	plan  TEXT NOT NULL CHECK (plan IN ('free', 'pro', 'scale'))
);
CREATE TABLE IF NOT EXISTS invoices (
	id           TEXT PRIMARY KEY,
	customer_id  TEXT NOT NULL REFERENCES customers(id) ON DELETE CASCADE,
	amount_cents INTEGER NOT NULL CHECK (amount_cents >= 0),
	status       TEXT NOT NULL CHECK (status IN ('paid', 'open')),
	issued       TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS invoices_customer ON invoices(customer_id);
CREATE TABLE IF NOT EXISTS refunds (
	id           INTEGER PRIMARY KEY,
	invoice_id   TEXT NOT NULL REFERENCES invoices(id) ON DELETE CASCADE,
	amount_cents INTEGER NOT NULL CHECK (amount_cents > 0),
	created_at   TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS refunds_invoice ON refunds(invoice_id);
-- Reminders are the outbox of emails already sent; they outlive the customer.
CREATE TABLE IF NOT EXISTS reminders (
	id          INTEGER PRIMARY KEY,
	customer_id TEXT NOT NULL,
	email       TEXT NOT NULL,
	subject     TEXT NOT NULL,
	body        TEXT NOT NULL,
	sent_at     TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS plan_changes (
	id          INTEGER PRIMARY KEY,
	customer_id TEXT NOT NULL,
	from_plan   TEXT NOT NULL,
	to_plan     TEXT NOT NULL,
	changed_at  TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS services (
	name TEXT PRIMARY KEY
);
CREATE TABLE IF NOT EXISTS releases (
	service     TEXT NOT NULL REFERENCES services(name) ON DELETE CASCADE,
	version     TEXT NOT NULL,
	released_at TEXT NOT NULL,
	PRIMARY KEY (service, version)
);
-- deployments says which release each environment of a service runs.
CREATE TABLE IF NOT EXISTS deployments (
	service     TEXT NOT NULL,
	environment TEXT NOT NULL CHECK (environment IN ('staging', 'production')),
	version     TEXT NOT NULL,
	deployed_at TEXT NOT NULL,
	PRIMARY KEY (service, environment),
	FOREIGN KEY (service, version) REFERENCES releases(service, version) ON DELETE CASCADE
);
CREATE TABLE IF NOT EXISTS meta (
	key   TEXT PRIMARY KEY,
	value TEXT NOT NULL
);
`

// tablesByDependency lists the tables children first, so deleting in this
// order never trips a foreign key.
var tablesByDependency = []string{
	"deployments", "releases", "services",
	"refunds", "invoices", "customers",
	"reminders", "plan_changes", "meta",
}

const seed = `
INSERT INTO customers (id, name, email, plan) VALUES
	('acct_9931', 'Northwind Traders', 'billing@northwind.example', 'pro'),
	('acct_1024', 'Globex', 'accounts@globex.example', 'scale'),
	('acct_2048', 'Initech', 'it@initech.example', 'free');
INSERT INTO invoices (id, customer_id, amount_cents, status, issued) VALUES
	('inv_1001', 'acct_9931', 125000, 'paid', '2025-01-15'),
	('inv_1002', 'acct_9931',  32000, 'paid', '2025-02-15'),
	('inv_1003', 'acct_9931',  48000, 'open', '2025-03-15'),
	('inv_1004', 'acct_1024',   4900, 'paid', '2025-02-20'),
	('inv_1005', 'acct_1024', 240000, 'open', '2025-03-20');
INSERT INTO services (name) VALUES ('billing-api'), ('web');
INSERT INTO releases (service, version, released_at) VALUES
	('billing-api', 'v1.4.0', '2025-02-03T10:00:00Z'),
	('billing-api', 'v1.4.1', '2025-02-20T10:00:00Z'),
	('billing-api', 'v1.4.2', '2025-03-04T10:00:00Z'),
	('web', 'v2.0.5', '2025-01-28T10:00:00Z'),
	('web', 'v2.1.0', '2025-02-25T10:00:00Z'),
	('web', 'v2.1.1', '2025-03-06T10:00:00Z');
INSERT INTO deployments (service, environment, version, deployed_at) VALUES
	('billing-api', 'production', 'v1.4.1', '2025-02-21T09:00:00Z'),
	('billing-api', 'staging', 'v1.4.2', '2025-03-04T11:00:00Z'),
	('web', 'production', 'v2.1.0', '2025-02-26T09:00:00Z'),
	('web', 'staging', 'v2.1.1', '2025-03-06T11:00:00Z');
INSERT INTO meta (key, value) VALUES ('seeded', 'true');
`

// prepare creates the schema and seeds it in one write transaction, so two
// processes starting on a fresh file cannot both seed it.
func (db *DB) prepare(ctx context.Context, reset bool) error {
	return db.inTx(ctx, func(tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, schema); err != nil {
			return fmt.Errorf("demo: create schema: %w", err)
		}
		if reset {
			for _, table := range tablesByDependency {
				if _, err := tx.ExecContext(ctx, "DELETE FROM "+table); err != nil {
					return fmt.Errorf("demo: wipe %s: %w", table, err)
				}
			}
		}
		var seeded int
		if err := tx.QueryRowContext(ctx, `SELECT count(*) FROM meta WHERE key = 'seeded'`).Scan(&seeded); err != nil {
			return fmt.Errorf("demo: read seed marker: %w", err)
		}
		if seeded > 0 {
			return nil
		}
		if _, err := tx.ExecContext(ctx, seed); err != nil {
			return fmt.Errorf("demo: seed: %w", err)
		}
		return nil
	})
}

// inTx runs fn in a transaction and commits it when fn succeeds.
func (db *DB) inTx(ctx context.Context, fn func(*sql.Tx) error) error {
	tx, err := db.sql.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("demo: begin transaction: %w", err)
	}
	if err := fn(tx); err != nil {
		tx.Rollback()
		return err
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("demo: commit: %w", err)
	}
	return nil
}
