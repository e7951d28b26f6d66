package sqlstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/interlock-mcp/interlock/approval"
)

// approvalTables is how a dialect's store lays out approvals and grants:
// the two stores were written apart and their tables stay as each wrote
// them. Each approval and grant is a row holding its JSON, with the
// columns that find it; the times in those columns only narrow a search:
// the rules of package approval, applied to the JSON, decide what is
// pending or live. Statements are written with ? parameters.
type approvalTables struct {
	schema string
	// time is a time as the columns keep it.
	time func(time.Time) any
	// lock, its argument a key, serialises the requests of one binding;
	// empty where a change holds the whole database.
	lock string
	// live reads the body of a key's live approval: the last one stored.
	live string
	// waiting reads the bodies of the approvals that expire at its first
	// argument or after, asked for by the tenant and principal its next
	// two name (and perhaps others), oldest first, by an index: SQLite's
	// on the names in the JSON, PostgreSQL's on columns of them, since
	// its JSON types refuse a string holding \u0000, which the arguments
	// in an approval may.
	waiting string
	// put writes an approval, its arguments from putArgs with end, the
	// later of its wait's end and its deadline to run.
	put     string
	putArgs func(a *approval.Approval, end time.Time, body string) []any
	// dropApprovals drops the approvals gone before its argument, which
	// is approvalsKept before now.
	dropApprovals string
	approvalsKept time.Duration
	// putGrant writes a grant, its arguments from grantArgs.
	putGrant  string
	grantArgs func(g *approval.StandingGrant, body string) []any
	// liveGrants reads the grants that expire at its argument or after.
	liveGrants string
}

// unixMilli is a time as SQLite's approvals keep it.
func unixMilli(t time.Time) any { return t.UnixMilli() }

// sqliteApprovals keeps times in Unix milliseconds. A binding's live
// approval is the last one stored for its key, by rowid (seq).
var sqliteApprovals = approvalTables{
	schema: `
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
CREATE INDEX IF NOT EXISTS approvals_caller ON approvals (json_extract(body, '$.tenant'), json_extract(body, '$.principal'));
CREATE TABLE IF NOT EXISTS grants (
	id         TEXT PRIMARY KEY,
	created_at INTEGER NOT NULL,
	expires_at INTEGER NOT NULL,
	body       TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS grants_expires ON grants (expires_at);`,
	time: unixMilli,
	live: "SELECT body FROM approvals WHERE key = ? ORDER BY seq DESC LIMIT 1",
	waiting: `SELECT body FROM approvals WHERE expires_at >= ?
		AND json_extract(body, '$.tenant') = ? AND json_extract(body, '$.principal') = ? ORDER BY created_at`,
	put: `INSERT INTO approvals (id, key, created_at, expires_at, ends_at, body) VALUES (?, ?, ?, ?, ?, ?)
		ON CONFLICT (id) DO UPDATE SET ends_at = excluded.ends_at, body = excluded.body`,
	putArgs: func(a *approval.Approval, end time.Time, body string) []any {
		return []any{a.ID, a.Key, a.CreatedAt.UnixMilli(), a.ExpiresAt.UnixMilli(), end.UnixMilli(), body}
	},
	// Approvals leave the table an hour past their end, as they leave
	// the other stores.
	dropApprovals: "DELETE FROM approvals WHERE ends_at < ?",
	approvalsKept: time.Hour,
	putGrant: `INSERT INTO grants (id, created_at, expires_at, body) VALUES (?, ?, ?, ?)
		ON CONFLICT (id) DO UPDATE SET body = excluded.body`,
	grantArgs: func(g *approval.StandingGrant, body string) []any {
		return []any{g.ID, g.CreatedAt.UnixMilli(), g.ExpiresAt.UnixMilli(), body}
	},
	liveGrants: "SELECT body FROM grants WHERE expires_at >= ? ORDER BY created_at",
}

// postgresApprovals keeps times as timestamptz. A binding's approvals
// are serialised by an advisory lock on its key, and its live approval,
// the last created, is locked as a vote or a consumption locks it, so
// marking it Reported never overwrites either.
var postgresApprovals = approvalTables{
	schema: `
CREATE TABLE IF NOT EXISTS approvals (
	id         text PRIMARY KEY,
	key        text NOT NULL,
	created_at timestamptz NOT NULL,
	expires_at timestamptz NOT NULL,
	body       text NOT NULL
);
CREATE INDEX IF NOT EXISTS approvals_key ON approvals (key, created_at);
DO $$ BEGIN
	IF NOT EXISTS (SELECT 1 FROM information_schema.columns
		WHERE table_schema = current_schema() AND table_name = 'approvals' AND column_name = 'tenant') THEN
		ALTER TABLE approvals ADD COLUMN tenant text, ADD COLUMN principal text;
	END IF;
END $$;
CREATE INDEX IF NOT EXISTS approvals_caller ON approvals (tenant, principal);
CREATE TABLE IF NOT EXISTS grants (
	id         text PRIMARY KEY,
	expires_at timestamptz NOT NULL,
	body       text NOT NULL
);`,
	time: func(t time.Time) any { return t },
	lock: "SELECT pg_advisory_xact_lock(hashtext(?))",
	live: "SELECT body FROM approvals WHERE key = ? ORDER BY created_at DESC LIMIT 1 FOR UPDATE",
	// Approvals an earlier gateway stored have no caller in columns.
	waiting: `SELECT body FROM approvals WHERE expires_at >= ?
		AND ((tenant = ? AND principal = ?) OR tenant IS NULL) ORDER BY created_at`,
	put: `INSERT INTO approvals (id, key, created_at, expires_at, tenant, principal, body) VALUES (?, ?, ?, ?, ?, ?, ?)
		ON CONFLICT (id) DO UPDATE SET body = excluded.body`,
	putArgs: func(a *approval.Approval, _ time.Time, body string) []any {
		return []any{a.ID, a.Key, a.CreatedAt, a.ExpiresAt, a.Tenant, a.Principal, body}
	},
	// Without a column of their end, approvals leave two days past the
	// end of their wait.
	dropApprovals: "DELETE FROM approvals WHERE expires_at < ?",
	approvalsKept: 48 * time.Hour,
	putGrant: `INSERT INTO grants (id, expires_at, body) VALUES (?, ?, ?)
		ON CONFLICT (id) DO UPDATE SET body = excluded.body`,
	grantArgs: func(g *approval.StandingGrant, body string) []any {
		return []any{g.ID, g.ExpiresAt, body}
	},
	liveGrants: "SELECT body FROM grants WHERE expires_at >= ?",
}

// grantsKept is how long past their expiry grants stay in the table, as
// they stay in the other stores.
const grantsKept = 24 * time.Hour

// ApprovalsSchema creates the tables of approvals and grants in dialect
// d.
func (d Dialect) ApprovalsSchema() string { return d.approvals.schema }

// Approvals keeps approvals and standing grants in the tables of
// [Dialect.ApprovalsSchema]. Every change is one [Database.Change] that
// reads its row (locked, where rows are) and applies the rules of package
// approval to it, so an approval is consumed, and a grant's use counted,
// exactly once whichever process asks. The time a rule is applied at is
// the change's.
type Approvals struct{ store }

var (
	_ approval.Store      = (*Approvals)(nil)
	_ approval.GrantStore = (*Approvals)(nil)
)

// NewApprovals returns the approvals and grants in db, whose tables are
// those of d's ApprovalsSchema; where names the store in errors.
func NewApprovals(db Database, d Dialect, where string) *Approvals {
	return &Approvals{store{db: db, d: d, where: where}}
}

func (s *Approvals) fail(err error) error { return fmt.Errorf("%s: %w", s.where, err) }

// decode reads the JSON body of row, what it holds: unknown when there
// is no row.
func decode[T any](row Row, what string, unknown error) (*T, error) {
	var body string
	if err := row.Scan(&body); err != nil {
		if noRows(err) {
			return nil, unknown
		}
		return nil, err
	}
	v := new(T)
	if err := json.Unmarshal([]byte(body), v); err != nil {
		return nil, fmt.Errorf("reading %s: %w", what, err)
	}
	return v, nil
}

func scanApproval(row Row) (*approval.Approval, error) {
	return decode[approval.Approval](row, "an approval", approval.ErrUnknown)
}

func scanGrant(row Row) (*approval.StandingGrant, error) {
	return decode[approval.StandingGrant](row, "a grant", approval.ErrGrantUnknown)
}

// putApproval stores a. Its end is the later of the end of the wait for a
// decision and the deadline to run, which a vote may set past it.
func (s *Approvals) putApproval(ctx context.Context, w statements, a *approval.Approval) error {
	b, err := json.Marshal(a)
	if err != nil {
		return fmt.Errorf("encoding approval %s: %w", a.ID, err)
	}
	end := a.ExpiresAt
	if a.RunBy.After(end) {
		end = a.RunBy
	}
	if _, err := w.exec(ctx, s.d.approvals.put, s.d.approvals.putArgs(a, end, string(b))...); err != nil {
		return fmt.Errorf("writing approval %s: %w", a.ID, err)
	}
	return nil
}

// Request implements [approval.Store].
func (s *Approvals) Request(ctx context.Context, a *approval.Approval) (*approval.Approval, error) {
	t := s.d.approvals
	var out *approval.Approval
	err := s.change(ctx, func(w statements, now time.Time) error {
		if t.lock != "" {
			if _, err := w.exec(ctx, t.lock, a.Key); err != nil {
				return err
			}
			// The time is read once the binding is this change's alone:
			// one read before waiting for the lock could come before a
			// change that already found the approval lapsed and said so.
			now = time.Now()
		}
		live, err := scanApproval(w.row(ctx, t.live, a.Key))
		if err != nil && !errors.Is(err, approval.ErrUnknown) {
			return err
		}
		answer, store := approval.Resolve(live, a, now)
		out = answer
		if store == nil {
			return nil
		}
		if store == a {
			if _, err := w.exec(ctx, t.dropApprovals, t.time(now.Add(-t.approvalsKept))); err != nil {
				return fmt.Errorf("dropping old approvals: %w", err)
			}
		}
		return s.putApproval(ctx, w, store)
	})
	if err != nil {
		return nil, s.fail(err)
	}
	return out, nil
}

// Get implements [approval.Store].
func (s *Approvals) Get(ctx context.Context, id string) (*approval.Approval, error) {
	a, err := scanApproval(s.read().row(ctx, "SELECT body FROM approvals WHERE id = ?", id))
	if err != nil && !errors.Is(err, approval.ErrUnknown) {
		return nil, s.fail(err)
	}
	return a, err
}

// List implements [approval.Store].
func (s *Approvals) List(ctx context.Context) ([]*approval.Approval, error) {
	return listRows(s, ctx, "SELECT body FROM approvals WHERE expires_at >= ? ORDER BY created_at", scanApproval, pending)
}

// Waiting implements [approval.Store].
func (s *Approvals) Waiting(ctx context.Context, tenant, principal string) ([]*approval.Approval, error) {
	return listRows(s, ctx, s.d.approvals.waiting, scanApproval, func(a *approval.Approval, now time.Time) bool {
		return a.Tenant == tenant && a.Principal == principal && pending(a, now)
	}, tenant, principal)
}

func pending(a *approval.Approval, now time.Time) bool { return a.State(now) == approval.Pending }

// listRows returns what the rows of query hold that keep keeps at now;
// query's arguments are now, then args.
func listRows[T any](s *Approvals, ctx context.Context, query string, scan func(Row) (*T, error), keep func(v *T, now time.Time) bool, args ...any) ([]*T, error) {
	now := time.Now()
	var out []*T
	err := s.read().rows(ctx, func(r Row) error {
		v, err := scan(r)
		if err == nil && keep(v, now) {
			out = append(out, v)
		}
		return err
	}, query, append([]any{s.d.approvals.time(now)}, args...)...)
	if err != nil {
		return nil, s.fail(err)
	}
	return out, nil
}

// changeApproval applies fn to the approval id and stores it, in one
// change.
func (s *Approvals) changeApproval(ctx context.Context, id string, fn func(a *approval.Approval, now time.Time) error) (*approval.Approval, error) {
	return changeRow(s, ctx, "SELECT body FROM approvals WHERE id = ?", id, scanApproval, s.putApproval, fn)
}

// changeRow applies fn to what the row of id that read finds holds, and
// writes it back with put, in one change.
func changeRow[T any](s *Approvals, ctx context.Context, read, id string, scan func(Row) (*T, error),
	put func(context.Context, statements, *T) error, fn func(v *T, now time.Time) error) (*T, error) {
	var out *T
	err := s.change(ctx, func(w statements, now time.Time) error {
		v, err := scan(w.row(ctx, read+s.d.forUpdate, id))
		if err != nil {
			return err
		}
		if s.d.forUpdate != "" {
			// Read once the row is locked, for the reason Request reads
			// it after its lock.
			now = time.Now()
		}
		if err := fn(v, now); err != nil {
			return err
		}
		out = v
		return put(ctx, w, v)
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

func (s *Approvals) putGrant(ctx context.Context, w statements, g *approval.StandingGrant) error {
	b, err := json.Marshal(g)
	if err != nil {
		return fmt.Errorf("encoding grant %s: %w", g.ID, err)
	}
	if _, err := w.exec(ctx, s.d.approvals.putGrant, s.d.approvals.grantArgs(g, string(b))...); err != nil {
		return fmt.Errorf("writing grant %s: %w", g.ID, err)
	}
	return nil
}

// AddGrant implements [approval.GrantStore].
func (s *Approvals) AddGrant(ctx context.Context, g *approval.StandingGrant) error {
	err := s.change(ctx, func(w statements, now time.Time) error {
		if _, err := w.exec(ctx, "DELETE FROM grants WHERE expires_at < ?", s.d.approvals.time(now.Add(-grantsKept))); err != nil {
			return fmt.Errorf("dropping old grants: %w", err)
		}
		return s.putGrant(ctx, w, g)
	})
	if err != nil {
		return s.fail(err)
	}
	return nil
}

// LiveGrants implements [approval.GrantStore].
func (s *Approvals) LiveGrants(ctx context.Context) ([]*approval.StandingGrant, error) {
	return listRows(s, ctx, s.d.approvals.liveGrants, scanGrant, (*approval.StandingGrant).Live)
}

// changeGrant applies fn to the grant id and stores it, in one change.
func (s *Approvals) changeGrant(ctx context.Context, id string, fn func(g *approval.StandingGrant, now time.Time) error) (*approval.StandingGrant, error) {
	return changeRow(s, ctx, "SELECT body FROM grants WHERE id = ?", id, scanGrant, s.putGrant, fn)
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
	g, err := scanGrant(s.read().row(ctx, "SELECT body FROM grants WHERE id = ?", id))
	if err != nil && !errors.Is(err, approval.ErrGrantUnknown) {
		return nil, s.fail(err)
	}
	return g, err
}
