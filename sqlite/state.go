package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"

	moderncsqlite "modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"
)

// State is the state file of a data directory as one process holds it:
// approvals and grants, confirm tokens, budgets, the console's state and
// tasks on one handle, whose changes take turns on its one connection for
// changes. On handles of their own they would wait for each other's lock
// in SQLite's busy handler, which cut the takes one process made at once
// to a third.
type State struct {
	h         *handle
	approvals *Approvals
	tokens    *Tokens
	budgets   *Budgets
	console   *Console
}

// OpenState opens (creating when needed) the state file at path.
func OpenState(ctx context.Context, path string) (*State, error) {
	h, err := openHandle(ctx, path, approvalsSchema+tokensSchema+budgetsSchema+gatewaysSchema+consoleSchema+tasksSchema)
	if err != nil {
		return nil, fmt.Errorf("sqlite state %s: %w", path, err)
	}
	if err := moveOperatorLinks(ctx, h); err != nil {
		h.close()
		return nil, fmt.Errorf("sqlite state %s: moving the links of interlock console link: %w", path, err)
	}
	return &State{h: h, approvals: newApprovals(h), tokens: &Tokens{handle: h}, budgets: &Budgets{handle: h}, console: newConsole(h)}, nil
}

// Approvals returns the approvals and grants of s.
func (s *State) Approvals() *Approvals { return s.approvals }

// Tokens returns the confirm tokens of s.
func (s *State) Tokens() *Tokens { return s.tokens }

// Budgets returns the budgets' counts of s.
func (s *State) Budgets() *Budgets { return s.budgets }

// Close waits for a change under way and closes the file; changes to any
// of its stores after it fail. It is the one to close: closing the
// Approvals of s would close the others too.
func (s *State) Close() error { return s.h.close() }

// handle is one process's way into a SQLite file that several interlock
// processes share, for stores whose every change is one IMMEDIATE
// transaction; the stores of a [State] share one.
type handle struct {
	db *sql.DB
	// writer holds the one connection this handle changes the database
	// on, passed from change to change: goroutines of one process queue
	// for it here rather than poll SQLite's lock in its busy handler,
	// which sleeps up to 100 ms a try. Other processes wait for the lock
	// in the busy handler, up to busy_timeout.
	writer chan *sql.Conn
	path   string
}

// openHandle opens (creating when needed) the database at path and the
// tables of schema.
func openHandle(ctx context.Context, path, schema string) (*handle, error) {
	db, err := sql.Open("sqlite", path+dsnParams)
	if err != nil {
		return nil, err
	}
	if err := createTables(ctx, db, schema); err != nil {
		db.Close()
		return nil, fmt.Errorf("creating tables: %w", err)
	}
	if strings.Contains(schema, gatewaysSchema) {
		if err := addWarnings(ctx, db); err != nil {
			db.Close()
			return nil, fmt.Errorf("adding the gateways' warnings: %w", err)
		}
	}
	writer, err := db.Conn(ctx)
	if err == nil {
		// A consumption, a use or a count must outlive a power cut as
		// well: the call it let run cannot be taken back, and must not
		// run again.
		if _, err = writer.ExecContext(ctx, "PRAGMA synchronous=FULL"); err != nil {
			writer.Close()
		}
	}
	if err != nil {
		db.Close()
		return nil, err
	}
	h := &handle{db: db, writer: make(chan *sql.Conn, 1), path: path}
	h.writer <- writer
	return h, nil
}

// createTables creates the tables of schema on a new connection of db,
// after the connection's pragmas. When several processes open a new file
// at once, all but one of those turning it to WAL mode may be refused
// with SQLITE_BUSY at once, without waiting in the busy handler (SQLite's
// deadlock avoidance), so a refusal is tried again for as long as
// busy_timeout would wait.
func createTables(ctx context.Context, db *sql.DB, schema string) error {
	deadline := time.Now().Add(10 * time.Second)
	for wait := time.Millisecond; ; wait = min(2*wait, 50*time.Millisecond) {
		_, err := db.ExecContext(ctx, schema)
		var e *moderncsqlite.Error
		if err == nil || !errors.As(err, &e) || e.Code()&0xff != sqlite3.SQLITE_BUSY || time.Now().After(deadline) {
			return err
		}
		select {
		case <-time.After(wait):
		case <-ctx.Done():
			return err
		}
	}
}

// change runs fn in one IMMEDIATE transaction on the writer connection,
// giving it the time read once the write lock is held, and commits what
// it wrote unless it fails.
func (h *handle) change(ctx context.Context, fn func(c *sql.Conn, now time.Time) error) error {
	var c *sql.Conn
	select {
	case c = <-h.writer:
	case <-ctx.Done():
		return ctx.Err()
	}
	defer func() { h.writer <- c }()
	if _, err := c.ExecContext(ctx, "BEGIN IMMEDIATE"); err != nil {
		return err
	}
	committed := false
	defer func() {
		if !committed {
			_, _ = c.ExecContext(context.WithoutCancel(ctx), "ROLLBACK")
		}
	}()
	if err := fn(c, time.Now()); err != nil {
		return err
	}
	if _, err := c.ExecContext(ctx, "COMMIT"); err != nil {
		return fmt.Errorf("committing: %w", err)
	}
	committed = true
	return nil
}

// close waits for a change under way and closes the database; changes
// after it fail.
func (h *handle) close() error {
	c := <-h.writer
	defer func() { h.writer <- c }()
	return errors.Join(c.Close(), h.db.Close())
}
