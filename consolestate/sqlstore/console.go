package sqlstore

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/interlock-mcp/interlock/approval"
	"github.com/interlock-mcp/interlock/consolestate"
)

// ConsoleSchema creates the tables of the console's state in dialect d.
// Sessions and one-time links are kept by the SHA-256 of their secret
// ([consolestate.Key]), so a copy of the database (a backup, a replica)
// signs nobody in. Times are Unix nanoseconds.
func (d Dialect) ConsoleSchema() string {
	return fmt.Sprintf(`
CREATE TABLE IF NOT EXISTS console_sessions (
	key          %[1]s PRIMARY KEY,
	body         %[1]s NOT NULL,
	last_seen    %[2]s NOT NULL,
	flash        %[3]s,
	registration %[3]s
)%[4]s;
CREATE TABLE IF NOT EXISTS console_passkey_users (
	owner  %[1]s PRIMARY KEY,
	handle %[3]s NOT NULL
)%[4]s;
CREATE TABLE IF NOT EXISTS console_passkeys (
	owner %[1]s NOT NULL,
	id    %[3]s NOT NULL,
	seq   %[5]s,
	rev   %[2]s NOT NULL,
	body  %[1]s NOT NULL,
	PRIMARY KEY (owner, id)
)%[4]s;
CREATE TABLE IF NOT EXISTS console_once (
	key        %[1]s PRIMARY KEY,
	who        %[1]s NOT NULL,
	expires_at %[2]s NOT NULL
)%[4]s;
`, d.text, d.integer, d.blob, d.keyed, d.passkeySeq)
}

// Console keeps the console's state ([consolestate.Store]) in the tables
// of [Dialect.ConsoleSchema]. Every change is one [Database.Change]:
// takes, swaps and spends find their row and change it there, so of any
// number at once, in any number of processes, exactly one succeeds. Reads
// that find nothing to change (most of them) write nothing.
type Console struct{ store }

var _ consolestate.Store = (*Console)(nil)

// NewConsole returns the console's state in db, whose tables are those of
// d's ConsoleSchema; where names the store in errors.
func NewConsole(db Database, d Dialect, where string) *Console {
	return &Console{store{db: db, d: d, where: where}}
}

func (s *Console) fail(doing string, err error) error {
	return fmt.Errorf("%s: %s: %w", s.where, doing, err)
}

// StartSession implements [consolestate.Store].
func (s *Console) StartSession(ctx context.Context, key string, sess consolestate.Session, idle time.Duration) error {
	body, err := json.Marshal(sess)
	if err != nil {
		return s.fail("encoding a session", err)
	}
	err = s.change(ctx, func(w statements, _ time.Time) error {
		if _, err := w.exec(ctx, "DELETE FROM console_sessions WHERE last_seen < ?", sess.Created.Add(-idle).UnixNano()); err != nil {
			return err
		}
		_, err := w.exec(ctx, "INSERT INTO console_sessions (key, body, last_seen) VALUES (?, ?, ?)", key, string(body), sess.LastSeen.UnixNano())
		return err
	})
	if err != nil {
		return s.fail("starting a console session", err)
	}
	return nil
}

// Session implements [consolestate.Store]. A read that neither touches
// nor finds the session idled out writes nothing.
func (s *Console) Session(ctx context.Context, key string, now time.Time, idle time.Duration, touch bool) (consolestate.Session, error) {
	if !touch {
		var body string
		var seen int64
		err := s.read().row(ctx, "SELECT body, last_seen FROM console_sessions WHERE key = ?", key).Scan(&body, &seen)
		if noRows(err) {
			return consolestate.Session{}, consolestate.ErrNoSession
		}
		if err != nil {
			return consolestate.Session{}, s.fail("reading a console session", err)
		}
		if now.Sub(time.Unix(0, seen)) <= idle {
			return s.decode(body, seen)
		}
	}
	var body string
	var seen int64
	found := false
	err := s.change(ctx, func(w statements, _ time.Time) error {
		// A live session is read, or touched: last seen now, unless a
		// later request of it already said so.
		live := now.Add(-idle).UnixNano()
		var err error
		if touch {
			err = w.row(ctx, "UPDATE console_sessions SET last_seen = "+s.d.greatest+"(last_seen, ?) WHERE key = ? AND last_seen >= ? RETURNING body, last_seen",
				now.UnixNano(), key, live).Scan(&body, &seen)
		} else {
			err = w.row(ctx, "SELECT body, last_seen FROM console_sessions WHERE key = ? AND last_seen >= ?", key, live).Scan(&body, &seen)
		}
		if noRows(err) {
			// Gone, or idled out: then it ends.
			_, err = w.exec(ctx, "DELETE FROM console_sessions WHERE key = ? AND last_seen < ?", key, live)
			return err
		}
		found = err == nil
		return err
	})
	if err != nil {
		return consolestate.Session{}, s.fail("reading a console session", err)
	}
	if !found {
		return consolestate.Session{}, consolestate.ErrNoSession
	}
	return s.decode(body, seen)
}

func (s *Console) decode(body string, seen int64) (consolestate.Session, error) {
	sess, err := consolestate.DecodeSession(body, seen)
	if err != nil {
		return consolestate.Session{}, s.fail("reading a console session", err)
	}
	return sess, nil
}

// EndSession implements [consolestate.Store].
func (s *Console) EndSession(ctx context.Context, key string) error {
	err := s.change(ctx, func(w statements, _ time.Time) error {
		_, err := w.exec(ctx, "DELETE FROM console_sessions WHERE key = ?", key)
		return err
	})
	if err != nil {
		return s.fail("ending a console session", err)
	}
	return nil
}

// Sessions implements [consolestate.Store].
func (s *Console) Sessions(ctx context.Context) (map[string]consolestate.Session, error) {
	out := map[string]consolestate.Session{}
	err := s.read().rows(ctx, func(r Row) error {
		var key, body string
		var seen int64
		if err := r.Scan(&key, &body, &seen); err != nil {
			return err
		}
		sess, err := consolestate.DecodeSession(body, seen)
		out[key] = sess
		return err
	}, "SELECT key, body, last_seen FROM console_sessions")
	if err != nil {
		return nil, s.fail("listing console sessions", err)
	}
	return out, nil
}

// Put implements [consolestate.Store].
func (s *Console) Put(ctx context.Context, key string, slot consolestate.Slot, value []byte) error {
	col, err := slot.Column()
	if err != nil {
		return err
	}
	var n int64
	err = s.change(ctx, func(w statements, _ time.Time) (err error) {
		n, err = w.exec(ctx, "UPDATE console_sessions SET "+col+" = ? WHERE key = ?", value, key)
		return err
	})
	if err != nil {
		return s.fail("keeping a session's "+col, err)
	}
	if n == 0 {
		return consolestate.ErrNoSession
	}
	return nil
}

// Take implements [consolestate.Store]: the read and the emptying are one
// change. Most pages find the slot empty: a read says so without a
// change.
func (s *Console) Take(ctx context.Context, key string, slot consolestate.Slot) ([]byte, error) {
	col, err := slot.Column()
	if err != nil {
		return nil, err
	}
	var held bool
	err = s.read().row(ctx, "SELECT "+col+" IS NOT NULL FROM console_sessions WHERE key = ?", key).Scan(&held)
	if noRows(err) || (err == nil && !held) {
		return nil, nil
	}
	if err != nil {
		return nil, s.fail("taking a session's "+col, err)
	}
	var v []byte
	err = s.change(ctx, func(w statements, _ time.Time) error {
		err := w.row(ctx, "SELECT "+col+" FROM console_sessions WHERE key = ?"+s.d.forUpdate, key).Scan(&v)
		if noRows(err) || (err == nil && v == nil) {
			return nil
		}
		if err != nil {
			return err
		}
		_, err = w.exec(ctx, "UPDATE console_sessions SET "+col+" = NULL WHERE key = ?", key)
		return err
	})
	if err != nil {
		return nil, s.fail("taking a session's "+col, err)
	}
	return v, nil
}

// PasskeyUser implements [consolestate.Store].
func (s *Console) PasskeyUser(ctx context.Context, owner consolestate.Owner, fresh []byte) ([]byte, error) {
	const read = "SELECT handle FROM console_passkey_users WHERE owner = ?"
	var handle []byte
	// Most asks find the handle kept: they need no change.
	err := s.read().row(ctx, read, owner.Key()).Scan(&handle)
	if err == nil {
		return handle, nil
	}
	if !noRows(err) {
		return nil, s.fail("reading a passkey user", err)
	}
	err = s.change(ctx, func(w statements, _ time.Time) error {
		if _, err := w.exec(ctx, "INSERT INTO console_passkey_users (owner, handle) VALUES (?, ?) ON CONFLICT (owner) DO NOTHING",
			owner.Key(), fresh); err != nil {
			return err
		}
		return w.row(ctx, read, owner.Key()).Scan(&handle)
	})
	if err != nil {
		return nil, s.fail("reading a passkey user", err)
	}
	return handle, nil
}

// Passkeys implements [consolestate.Store].
func (s *Console) Passkeys(ctx context.Context, owner consolestate.Owner) ([]consolestate.Passkey, error) {
	var out []consolestate.Passkey
	err := s.read().rows(ctx, func(r Row) error {
		var body string
		var p consolestate.Passkey
		var rev int64
		if err := r.Scan(&body, &rev); err != nil {
			return err
		}
		if err := json.Unmarshal([]byte(body), &p); err != nil {
			return err
		}
		p.Rev = rev
		out = append(out, p)
		return nil
	}, "SELECT body, rev FROM console_passkeys WHERE owner = ? ORDER BY seq", owner.Key())
	if err != nil {
		return nil, s.fail("reading passkeys", err)
	}
	return out, nil
}

// AddPasskey implements [consolestate.Store].
func (s *Console) AddPasskey(ctx context.Context, owner consolestate.Owner, p consolestate.Passkey) error {
	p.Rev = 1
	body, err := json.Marshal(p)
	if err != nil {
		return s.fail("encoding a passkey", err)
	}
	var n int64
	err = s.change(ctx, func(w statements, _ time.Time) (err error) {
		n, err = w.exec(ctx, `INSERT INTO console_passkeys (owner, id, seq, rev, body)
			VALUES (?, ?, `+s.d.nextPasskeySeq+`, 1, ?) ON CONFLICT (owner, id) DO NOTHING`,
			owner.Key(), p.ID, string(body))
		return err
	})
	if err != nil {
		return s.fail("keeping a passkey", err)
	}
	if n == 0 {
		return consolestate.ErrPasskeyExists
	}
	return nil
}

// SwapPasskey implements [consolestate.Store]: one UPDATE whose WHERE
// names the revision read.
func (s *Console) SwapPasskey(ctx context.Context, owner consolestate.Owner, p consolestate.Passkey) (bool, error) {
	read := p.Rev
	p.Rev++
	body, err := json.Marshal(p)
	if err != nil {
		return false, s.fail("encoding a passkey", err)
	}
	swapped, known := false, true
	err = s.change(ctx, func(w statements, _ time.Time) error {
		n, err := w.exec(ctx, "UPDATE console_passkeys SET rev = rev + 1, body = ? WHERE owner = ? AND id = ? AND rev = ?",
			string(body), owner.Key(), p.ID, read)
		if err != nil || n == 1 {
			swapped = n == 1
			return err
		}
		var one int
		err = w.row(ctx, "SELECT 1 FROM console_passkeys WHERE owner = ? AND id = ?", owner.Key(), p.ID).Scan(&one)
		if noRows(err) {
			known = false
			return nil
		}
		return err
	})
	if err != nil {
		return false, s.fail("moving a passkey", err)
	}
	if !known {
		return false, consolestate.ErrNoPasskey
	}
	return swapped, nil
}

// PasskeyOwners implements [consolestate.Store].
func (s *Console) PasskeyOwners(ctx context.Context) ([]consolestate.Owner, error) {
	var out []consolestate.Owner
	err := s.read().rows(ctx, func(r Row) error {
		var key string
		var pair []string
		if err := r.Scan(&key); err != nil {
			return err
		}
		if err := json.Unmarshal([]byte(key), &pair); err != nil || len(pair) != 2 {
			return fmt.Errorf("an owner kept as %q", key)
		}
		out = append(out, consolestate.Owner{Tenant: pair[0], Principal: pair[1]})
		return nil
	}, "SELECT DISTINCT owner FROM console_passkeys")
	if err != nil {
		return nil, s.fail("listing passkey owners", err)
	}
	return out, nil
}

// ForgetPasskeys implements [consolestate.Store].
func (s *Console) ForgetPasskeys(ctx context.Context, owner consolestate.Owner) error {
	err := s.change(ctx, func(w statements, _ time.Time) error {
		if _, err := w.exec(ctx, "DELETE FROM console_passkeys WHERE owner = ?", owner.Key()); err != nil {
			return err
		}
		_, err := w.exec(ctx, "DELETE FROM console_passkey_users WHERE owner = ?", owner.Key())
		return err
	})
	if err != nil {
		return s.fail("forgetting passkeys", err)
	}
	return nil
}

// AddLink implements [consolestate.Store].
func (s *Console) AddLink(ctx context.Context, key string, who approval.Identity, expires time.Time) error {
	body, err := json.Marshal(who)
	if err != nil {
		return s.fail("encoding a link", err)
	}
	err = s.change(ctx, func(w statements, now time.Time) error {
		if _, err := w.exec(ctx, "DELETE FROM console_once WHERE expires_at <= ?", now.UnixNano()); err != nil {
			return err
		}
		_, err := w.exec(ctx, "INSERT INTO console_once (key, who, expires_at) VALUES (?, ?, ?)", key, string(body), expires.UnixNano())
		return err
	})
	if err != nil {
		return s.fail("keeping a one-time link", err)
	}
	return nil
}

// SpendLink implements [consolestate.Store]: one DELETE, so of any
// number of processes presenting one link, exactly one is told true.
func (s *Console) SpendLink(ctx context.Context, key string, now time.Time) (approval.Identity, bool, error) {
	var who approval.Identity
	spent := false
	err := s.change(ctx, func(w statements, _ time.Time) error {
		var body string
		err := w.row(ctx, "DELETE FROM console_once WHERE key = ? AND expires_at > ? RETURNING who", key, now.UnixNano()).Scan(&body)
		switch {
		case noRows(err):
		case err != nil:
			return err
		default:
			if err := json.Unmarshal([]byte(body), &who); err != nil {
				return err
			}
			spent = true
		}
		// Expired links go too, this one among them if it was: they sign
		// nobody in, now or later.
		_, err = w.exec(ctx, "DELETE FROM console_once WHERE expires_at <= ?", now.UnixNano())
		return err
	})
	if err != nil {
		return approval.Identity{}, false, s.fail("spending a one-time link", err)
	}
	return who, spent, nil
}
