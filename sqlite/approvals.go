package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	moderncsqlite "modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/interlock-mcp/interlock/approval"
)

const approvalsSchema = `
CREATE TABLE IF NOT EXISTS approvals (
	seq        INTEGER PRIMARY KEY,
	id         TEXT NOT NULL UNIQUE,
	key        TEXT NOT NULL,
	created_at INTEGER NOT NULL,
	expires_at INTEGER NOT NULL,
	ends_at    INTEGER NOT NULL,
	body       TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS approvals_key ON approvals (key, seq);
CREATE INDEX IF NOT EXISTS approvals_ends ON approvals (ends_at);
CREATE TABLE IF NOT EXISTS grants (
	id         TEXT PRIMARY KEY,
	created_at INTEGER NOT NULL,
	expires_at INTEGER NOT NULL,
	body       TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS grants_expires ON grants (expires_at);`

// Approvals keeps approvals and standing grants in one SQLite file, so
// that every interlock process on a data directory (a stdio gateway per
// editor window, and the one serving the console) sees the same approvals
// and counts the same uses.
//
// Each approval and grant is a row holding its JSON, with the columns
// that find it; times are Unix milliseconds, which only narrow a search:
// the rules of package approval, applied to the JSON, decide what is
// pending or live. A binding's live approval is the last one stored for
// its key. Every change is one IMMEDIATE transaction, which holds
// SQLite's write lock from the read to the write, and applies the rules
// of package approval inside it, so an approval is consumed, and a
// grant's use counted, exactly once whichever process asks. The time a
// rule is applied at is read once the lock is held, so changes happen in
// the order of their times.
type Approvals struct{ *handle }

var (
	_ approval.Store      = (*Approvals)(nil)
	_ approval.GrantStore = (*Approvals)(nil)
)

// OpenApprovals opens (creating when needed) the approvals and grants at
// path. A gateway, which keeps its confirm tokens and budgets in the same
// file, opens them all with [OpenState].
func OpenApprovals(ctx context.Context, path string) (*Approvals, error) {
	h, err := openHandle(ctx, path, approvalsSchema+gatewaysSchema)
	if err != nil {
		return nil, fmt.Errorf("approval store %s: %w", path, err)
	}
	return &Approvals{h}, nil
}

// State is the state file of a data directory as one process holds it:
// approvals and grants, confirm tokens, budgets and the console's state
// on one handle, whose
// changes take turns on its one connection for changes. On handles of
// their own they would wait for each other's lock in SQLite's busy
// handler, which cut the takes one process made at once to a third.
type State struct {
	h         *handle
	approvals *Approvals
	tokens    *Tokens
	budgets   *Budgets
	console   *Console
}

// OpenState opens (creating when needed) the state file at path.
func OpenState(ctx context.Context, path string) (*State, error) {
	h, err := openHandle(ctx, path, approvalsSchema+tokensSchema+budgetsSchema+gatewaysSchema+consoleSchema)
	if err != nil {
		return nil, fmt.Errorf("sqlite state %s: %w", path, err)
	}
	if err := moveOperatorLinks(ctx, h); err != nil {
		h.close()
		return nil, fmt.Errorf("sqlite state %s: moving the links of interlock console link: %w", path, err)
	}
	return &State{h: h, approvals: &Approvals{h}, tokens: &Tokens{handle: h}, budgets: &Budgets{handle: h}, console: newConsole(h)}, nil
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

func (s *Approvals) fail(err error) error { return fmt.Errorf("approval store %s: %w", s.path, err) }

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

func scanApproval(row *sql.Row) (*approval.Approval, error) {
	var body string
	if err := row.Scan(&body); err != nil {
		if errors.Is(err, sql.ErrNoRows) {
			return nil, approval.ErrUnknown
		}
		return nil, err
	}
	a := &approval.Approval{}
	if err := json.Unmarshal([]byte(body), a); err != nil {
		return nil, fmt.Errorf("reading an approval: %w", err)
	}
	return a, nil
}

// putApproval stores a. Its end is the later of the end of the wait for a
// decision and the deadline to run, which a vote may set past it.
func putApproval(ctx context.Context, c *sql.Conn, a *approval.Approval) error {
	b, err := json.Marshal(a)
	if err != nil {
		return fmt.Errorf("encoding approval %s: %w", a.ID, err)
	}
	end := a.ExpiresAt
	if a.RunBy.After(end) {
		end = a.RunBy
	}
	_, err = c.ExecContext(ctx, `INSERT INTO approvals (id, key, created_at, expires_at, ends_at, body) VALUES (?, ?, ?, ?, ?, ?)
		ON CONFLICT (id) DO UPDATE SET ends_at = excluded.ends_at, body = excluded.body`,
		a.ID, a.Key, a.CreatedAt.UnixMilli(), a.ExpiresAt.UnixMilli(), end.UnixMilli(), string(b))
	if err != nil {
		return fmt.Errorf("writing approval %s: %w", a.ID, err)
	}
	return nil
}

// Request implements [approval.Store].
func (s *Approvals) Request(ctx context.Context, a *approval.Approval) (*approval.Approval, error) {
	var out *approval.Approval
	err := s.change(ctx, func(c *sql.Conn, now time.Time) error {
		live, err := scanApproval(c.QueryRowContext(ctx, "SELECT body FROM approvals WHERE key = ? ORDER BY seq DESC LIMIT 1", a.Key))
		if err != nil && !errors.Is(err, approval.ErrUnknown) {
			return err
		}
		answer, store := approval.Resolve(live, a, now)
		out = answer
		if store == nil {
			return nil
		}
		if store == a {
			// Approvals leave the table an hour past their end, as they
			// leave the other stores.
			if _, err := c.ExecContext(ctx, "DELETE FROM approvals WHERE ends_at < ?", now.Add(-time.Hour).UnixMilli()); err != nil {
				return fmt.Errorf("dropping old approvals: %w", err)
			}
		}
		return putApproval(ctx, c, store)
	})
	if err != nil {
		return nil, s.fail(err)
	}
	return out, nil
}

// Get implements [approval.Store].
func (s *Approvals) Get(ctx context.Context, id string) (*approval.Approval, error) {
	a, err := scanApproval(s.db.QueryRowContext(ctx, "SELECT body FROM approvals WHERE id = ?", id))
	if err != nil && !errors.Is(err, approval.ErrUnknown) {
		return nil, s.fail(err)
	}
	return a, err
}

// List implements [approval.Store].
func (s *Approvals) List(ctx context.Context) ([]*approval.Approval, error) {
	now := time.Now()
	rows, err := s.db.QueryContext(ctx, "SELECT body FROM approvals WHERE expires_at >= ? ORDER BY created_at", now.UnixMilli())
	if err != nil {
		return nil, s.fail(err)
	}
	defer rows.Close()
	var out []*approval.Approval
	for rows.Next() {
		var body string
		if err := rows.Scan(&body); err != nil {
			return nil, s.fail(err)
		}
		a := &approval.Approval{}
		if err := json.Unmarshal([]byte(body), a); err != nil {
			return nil, s.fail(fmt.Errorf("reading an approval: %w", err))
		}
		if a.State(now) == approval.Pending {
			out = append(out, a)
		}
	}
	if err := rows.Err(); err != nil {
		return nil, s.fail(err)
	}
	return out, nil
}

// changeApproval applies fn to the approval id and stores it, in one
// transaction.
func (s *Approvals) changeApproval(ctx context.Context, id string, fn func(a *approval.Approval, now time.Time) error) (*approval.Approval, error) {
	var out *approval.Approval
	err := s.change(ctx, func(c *sql.Conn, now time.Time) error {
		a, err := scanApproval(c.QueryRowContext(ctx, "SELECT body FROM approvals WHERE id = ?", id))
		if err != nil {
			return err
		}
		if err := fn(a, now); err != nil {
			return err
		}
		out = a
		return putApproval(ctx, c, a)
	})
	return out, err
}

// Decide implements [approval.Store].
func (s *Approvals) Decide(ctx context.Context, id string, v approval.Vote) (*approval.Approval, error) {
	a, err := s.changeApproval(ctx, id, func(a *approval.Approval, now time.Time) error {
		return a.AddVote(v, now)
	})
	if err != nil && !errors.Is(err, approval.ErrAlreadyDecided) && !errors.Is(err, approval.ErrAlreadyVoted) &&
		!errors.Is(err, approval.ErrUnknown) && !errors.Is(err, approval.ErrBadVerdict) {
		return nil, s.fail(err)
	}
	return a, err
}

// Consume implements [approval.Store].
func (s *Approvals) Consume(ctx context.Context, id string) (bool, error) {
	_, err := s.changeApproval(ctx, id, func(a *approval.Approval, now time.Time) error {
		return a.Consume(now)
	})
	spent, err := approval.Spent(err)
	if err != nil {
		return false, s.fail(err)
	}
	return spent, nil
}

func scanGrant(row *sql.Row) (*approval.StandingGrant, error) {
	var body string
	if err := row.Scan(&body); err != nil {
		if errors.Is(err, sql.ErrNoRows) {
			return nil, approval.ErrGrantUnknown
		}
		return nil, err
	}
	g := &approval.StandingGrant{}
	if err := json.Unmarshal([]byte(body), g); err != nil {
		return nil, fmt.Errorf("reading a grant: %w", err)
	}
	return g, nil
}

func putGrant(ctx context.Context, c *sql.Conn, g *approval.StandingGrant) error {
	b, err := json.Marshal(g)
	if err != nil {
		return fmt.Errorf("encoding grant %s: %w", g.ID, err)
	}
	_, err = c.ExecContext(ctx, `INSERT INTO grants (id, created_at, expires_at, body) VALUES (?, ?, ?, ?)
		ON CONFLICT (id) DO UPDATE SET body = excluded.body`,
		g.ID, g.CreatedAt.UnixMilli(), g.ExpiresAt.UnixMilli(), string(b))
	if err != nil {
		return fmt.Errorf("writing grant %s: %w", g.ID, err)
	}
	return nil
}

// AddGrant implements [approval.GrantStore].
func (s *Approvals) AddGrant(ctx context.Context, g *approval.StandingGrant) error {
	err := s.change(ctx, func(c *sql.Conn, now time.Time) error {
		// Grants leave the table a day past their expiry, as they leave
		// the other stores.
		if _, err := c.ExecContext(ctx, "DELETE FROM grants WHERE expires_at < ?", now.Add(-24*time.Hour).UnixMilli()); err != nil {
			return fmt.Errorf("dropping old grants: %w", err)
		}
		return putGrant(ctx, c, g)
	})
	if err != nil {
		return s.fail(err)
	}
	return nil
}

// LiveGrants implements [approval.GrantStore].
func (s *Approvals) LiveGrants(ctx context.Context) ([]*approval.StandingGrant, error) {
	now := time.Now()
	rows, err := s.db.QueryContext(ctx, "SELECT body FROM grants WHERE expires_at >= ? ORDER BY created_at", now.UnixMilli())
	if err != nil {
		return nil, s.fail(err)
	}
	defer rows.Close()
	var out []*approval.StandingGrant
	for rows.Next() {
		var body string
		if err := rows.Scan(&body); err != nil {
			return nil, s.fail(err)
		}
		g := &approval.StandingGrant{}
		if err := json.Unmarshal([]byte(body), g); err != nil {
			return nil, s.fail(fmt.Errorf("reading a grant: %w", err))
		}
		if g.Live(now) {
			out = append(out, g)
		}
	}
	if err := rows.Err(); err != nil {
		return nil, s.fail(err)
	}
	return out, nil
}

// changeGrant applies fn to the grant id and stores it, in one
// transaction.
func (s *Approvals) changeGrant(ctx context.Context, id string, fn func(g *approval.StandingGrant, now time.Time) error) (*approval.StandingGrant, error) {
	var out *approval.StandingGrant
	err := s.change(ctx, func(c *sql.Conn, now time.Time) error {
		g, err := scanGrant(c.QueryRowContext(ctx, "SELECT body FROM grants WHERE id = ?", id))
		if err != nil {
			return err
		}
		if err := fn(g, now); err != nil {
			return err
		}
		out = g
		return putGrant(ctx, c, g)
	})
	return out, err
}

// UseGrant implements [approval.GrantStore].
func (s *Approvals) UseGrant(ctx context.Context, id string) (bool, error) {
	_, err := s.changeGrant(ctx, id, func(g *approval.StandingGrant, now time.Time) error {
		return g.Use(now)
	})
	spent, err := approval.Spent(err)
	if err != nil {
		return false, s.fail(err)
	}
	return spent, nil
}

// RevokeGrant implements [approval.GrantStore].
func (s *Approvals) RevokeGrant(ctx context.Context, id, void string) (*approval.StandingGrant, error) {
	g, err := s.changeGrant(ctx, id, func(g *approval.StandingGrant, _ time.Time) error {
		g.Revoke(void)
		return nil
	})
	if err != nil && !errors.Is(err, approval.ErrGrantUnknown) {
		return nil, s.fail(err)
	}
	return g, err
}

// Grant implements [approval.GrantStore].
func (s *Approvals) Grant(ctx context.Context, id string) (*approval.StandingGrant, error) {
	g, err := scanGrant(s.db.QueryRowContext(ctx, "SELECT body FROM grants WHERE id = ?", id))
	if err != nil && !errors.Is(err, approval.ErrGrantUnknown) {
		return nil, s.fail(err)
	}
	return g, err
}

// Close waits for a change under way and closes the database; changes
// after it fail.
func (s *Approvals) Close() error { return s.close() }
