package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/interlock-mcp/interlock/approval"
	"github.com/interlock-mcp/interlock/consolestate"
)

// consoleSchema keeps the console's state ([consolestate.Store]) in the
// state file, so every gateway on the data directory signs in the same
// approvers, and [consolestate.Signal]'s words. Sessions and one-time
// links are kept by the SHA-256 of their secret ([consolestate.Key]): a
// copy of the file signs nobody in. Times are Unix nanoseconds.
const consoleSchema = `
CREATE TABLE IF NOT EXISTS console_sessions (
	key          TEXT PRIMARY KEY,
	body         TEXT NOT NULL,
	last_seen    INTEGER NOT NULL,
	flash        BLOB,
	registration BLOB
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS console_passkey_users (
	owner  TEXT PRIMARY KEY,
	handle BLOB NOT NULL
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS console_passkeys (
	owner TEXT NOT NULL,
	id    BLOB NOT NULL,
	seq   INTEGER NOT NULL,
	rev   INTEGER NOT NULL,
	body  TEXT NOT NULL,
	PRIMARY KEY (owner, id)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS console_once (
	key        TEXT PRIMARY KEY,
	who        TEXT NOT NULL,
	expires_at INTEGER NOT NULL
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS console_signals (
	seq  INTEGER PRIMARY KEY AUTOINCREMENT,
	what TEXT NOT NULL,
	at   INTEGER NOT NULL
);
`

// Console keeps the console's state in the state file, and carries the
// signal that approvals changed between the processes on the data
// directory: a row per word, which listeners poll for (every
// [Console.Poll]) and which are dropped a minute after.
type Console struct {
	*handle
	// Poll is how often a listener reads the words raised since its last
	// read; 100 ms when zero.
	Poll time.Duration
}

var (
	_ consolestate.Store  = (*Console)(nil)
	_ consolestate.Signal = (*Console)(nil)
)

// Console returns the console's state in s.
func (s *State) Console() *Console { return s.console }

func (s *Console) fail(doing string, err error) error {
	return fmt.Errorf("sqlite state %s: %s: %w", s.path, doing, err)
}

// StartSession implements [consolestate.Store].
func (s *Console) StartSession(ctx context.Context, key string, sess consolestate.Session, idle time.Duration) error {
	body, err := json.Marshal(sess)
	if err != nil {
		return s.fail("encoding a session", err)
	}
	err = s.change(ctx, func(c *sql.Conn, _ time.Time) error {
		if _, err := c.ExecContext(ctx, "DELETE FROM console_sessions WHERE last_seen < ?", sess.Created.Add(-idle).UnixNano()); err != nil {
			return err
		}
		_, err := c.ExecContext(ctx, "INSERT INTO console_sessions (key, body, last_seen) VALUES (?, ?, ?)", key, string(body), sess.LastSeen.UnixNano())
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
		err := s.db.QueryRowContext(ctx, "SELECT body, last_seen FROM console_sessions WHERE key = ?", key).Scan(&body, &seen)
		if errors.Is(err, sql.ErrNoRows) {
			return consolestate.Session{}, consolestate.ErrNoSession
		}
		if err != nil {
			return consolestate.Session{}, s.fail("reading a console session", err)
		}
		if now.Sub(time.Unix(0, seen)) <= idle {
			return consolestate.DecodeSession(body, seen)
		}
	}
	var sess consolestate.Session
	found := false
	err := s.change(ctx, func(c *sql.Conn, _ time.Time) error {
		var body string
		var seen int64
		err := c.QueryRowContext(ctx, "SELECT body, last_seen FROM console_sessions WHERE key = ?", key).Scan(&body, &seen)
		if errors.Is(err, sql.ErrNoRows) {
			return nil
		}
		if err != nil {
			return err
		}
		if now.Sub(time.Unix(0, seen)) > idle {
			_, err := c.ExecContext(ctx, "DELETE FROM console_sessions WHERE key = ?", key)
			return err
		}
		if touch {
			// Last seen now, unless a later request of it already said so.
			seen = max(seen, now.UnixNano())
			if _, err := c.ExecContext(ctx, "UPDATE console_sessions SET last_seen = ? WHERE key = ?", seen, key); err != nil {
				return err
			}
		}
		sess, err = consolestate.DecodeSession(body, seen)
		found = err == nil
		return err
	})
	if err != nil {
		return consolestate.Session{}, s.fail("reading a console session", err)
	}
	if !found {
		return consolestate.Session{}, consolestate.ErrNoSession
	}
	return sess, nil
}

// EndSession implements [consolestate.Store].
func (s *Console) EndSession(ctx context.Context, key string) error {
	err := s.change(ctx, func(c *sql.Conn, _ time.Time) error {
		_, err := c.ExecContext(ctx, "DELETE FROM console_sessions WHERE key = ?", key)
		return err
	})
	if err != nil {
		return s.fail("ending a console session", err)
	}
	return nil
}

// Sessions implements [consolestate.Store].
func (s *Console) Sessions(ctx context.Context) (map[string]consolestate.Session, error) {
	rows, err := s.db.QueryContext(ctx, "SELECT key, body, last_seen FROM console_sessions")
	if err != nil {
		return nil, s.fail("listing console sessions", err)
	}
	defer rows.Close()
	out := map[string]consolestate.Session{}
	for rows.Next() {
		var key, body string
		var seen int64
		if err := rows.Scan(&key, &body, &seen); err != nil {
			return nil, s.fail("listing console sessions", err)
		}
		if out[key], err = consolestate.DecodeSession(body, seen); err != nil {
			return nil, s.fail("listing console sessions", err)
		}
	}
	if err := rows.Err(); err != nil {
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
	err = s.change(ctx, func(c *sql.Conn, _ time.Time) error {
		res, err := c.ExecContext(ctx, "UPDATE console_sessions SET "+col+" = ? WHERE key = ?", value, key)
		if err != nil {
			return err
		}
		n, err = res.RowsAffected()
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
// IMMEDIATE transaction. Most pages find the slot empty: a read says so
// without waiting for the write lock.
func (s *Console) Take(ctx context.Context, key string, slot consolestate.Slot) ([]byte, error) {
	col, err := slot.Column()
	if err != nil {
		return nil, err
	}
	var held bool
	err = s.db.QueryRowContext(ctx, "SELECT "+col+" IS NOT NULL FROM console_sessions WHERE key = ?", key).Scan(&held)
	if errors.Is(err, sql.ErrNoRows) || (err == nil && !held) {
		return nil, nil
	}
	if err != nil {
		return nil, s.fail("taking a session's "+col, err)
	}
	var v []byte
	err = s.change(ctx, func(c *sql.Conn, _ time.Time) error {
		err := c.QueryRowContext(ctx, "SELECT "+col+" FROM console_sessions WHERE key = ?", key).Scan(&v)
		if errors.Is(err, sql.ErrNoRows) || (err == nil && v == nil) {
			return nil
		}
		if err != nil {
			return err
		}
		_, err = c.ExecContext(ctx, "UPDATE console_sessions SET "+col+" = NULL WHERE key = ?", key)
		return err
	})
	if err != nil {
		return nil, s.fail("taking a session's "+col, err)
	}
	return v, nil
}

// PasskeyUser implements [consolestate.Store].
func (s *Console) PasskeyUser(ctx context.Context, owner consolestate.Owner, fresh []byte) ([]byte, error) {
	var handle []byte
	// Most asks find the handle kept: they need not wait for the write
	// lock.
	err := s.db.QueryRowContext(ctx, "SELECT handle FROM console_passkey_users WHERE owner = ?", owner.Key()).Scan(&handle)
	if err == nil {
		return handle, nil
	}
	if !errors.Is(err, sql.ErrNoRows) {
		return nil, s.fail("reading a passkey user", err)
	}
	err = s.change(ctx, func(c *sql.Conn, _ time.Time) error {
		if _, err := c.ExecContext(ctx, "INSERT INTO console_passkey_users (owner, handle) VALUES (?, ?) ON CONFLICT (owner) DO NOTHING",
			owner.Key(), fresh); err != nil {
			return err
		}
		return c.QueryRowContext(ctx, "SELECT handle FROM console_passkey_users WHERE owner = ?", owner.Key()).Scan(&handle)
	})
	if err != nil {
		return nil, s.fail("reading a passkey user", err)
	}
	return handle, nil
}

// Passkeys implements [consolestate.Store].
func (s *Console) Passkeys(ctx context.Context, owner consolestate.Owner) ([]consolestate.Passkey, error) {
	rows, err := s.db.QueryContext(ctx, "SELECT body, rev FROM console_passkeys WHERE owner = ? ORDER BY seq", owner.Key())
	if err != nil {
		return nil, s.fail("reading passkeys", err)
	}
	defer rows.Close()
	var out []consolestate.Passkey
	for rows.Next() {
		var body string
		var p consolestate.Passkey
		var rev int64
		if err := rows.Scan(&body, &rev); err != nil {
			return nil, s.fail("reading passkeys", err)
		}
		if err := json.Unmarshal([]byte(body), &p); err != nil {
			return nil, s.fail("reading passkeys", err)
		}
		p.Rev = rev
		out = append(out, p)
	}
	if err := rows.Err(); err != nil {
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
	exists := false
	err = s.change(ctx, func(c *sql.Conn, _ time.Time) error {
		res, err := c.ExecContext(ctx, `INSERT INTO console_passkeys (owner, id, seq, rev, body)
			VALUES (?, ?, (SELECT coalesce(max(seq), 0) + 1 FROM console_passkeys), 1, ?) ON CONFLICT (owner, id) DO NOTHING`,
			owner.Key(), p.ID, string(body))
		if err != nil {
			return err
		}
		n, err := res.RowsAffected()
		exists = n == 0
		return err
	})
	if err != nil {
		return s.fail("keeping a passkey", err)
	}
	if exists {
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
	err = s.change(ctx, func(c *sql.Conn, _ time.Time) error {
		res, err := c.ExecContext(ctx, "UPDATE console_passkeys SET rev = rev + 1, body = ? WHERE owner = ? AND id = ? AND rev = ?",
			string(body), owner.Key(), p.ID, read)
		if err != nil {
			return err
		}
		n, err := res.RowsAffected()
		if err != nil || n == 1 {
			swapped = n == 1
			return err
		}
		var one int
		err = c.QueryRowContext(ctx, "SELECT 1 FROM console_passkeys WHERE owner = ? AND id = ?", owner.Key(), p.ID).Scan(&one)
		if errors.Is(err, sql.ErrNoRows) {
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
	rows, err := s.db.QueryContext(ctx, "SELECT DISTINCT owner FROM console_passkeys")
	if err != nil {
		return nil, s.fail("listing passkey owners", err)
	}
	defer rows.Close()
	var out []consolestate.Owner
	for rows.Next() {
		var key string
		var pair []string
		if err := rows.Scan(&key); err != nil {
			return nil, s.fail("listing passkey owners", err)
		}
		if err := json.Unmarshal([]byte(key), &pair); err != nil || len(pair) != 2 {
			return nil, s.fail("listing passkey owners", fmt.Errorf("an owner kept as %q", key))
		}
		out = append(out, consolestate.Owner{Tenant: pair[0], Principal: pair[1]})
	}
	if err := rows.Err(); err != nil {
		return nil, s.fail("listing passkey owners", err)
	}
	return out, nil
}

// ForgetPasskeys implements [consolestate.Store].
func (s *Console) ForgetPasskeys(ctx context.Context, owner consolestate.Owner) error {
	err := s.change(ctx, func(c *sql.Conn, _ time.Time) error {
		if _, err := c.ExecContext(ctx, "DELETE FROM console_passkeys WHERE owner = ?", owner.Key()); err != nil {
			return err
		}
		_, err := c.ExecContext(ctx, "DELETE FROM console_passkey_users WHERE owner = ?", owner.Key())
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
	err = s.change(ctx, func(c *sql.Conn, now time.Time) error {
		if _, err := c.ExecContext(ctx, "DELETE FROM console_once WHERE expires_at <= ?", now.UnixNano()); err != nil {
			return err
		}
		_, err := c.ExecContext(ctx, "INSERT INTO console_once (key, who, expires_at) VALUES (?, ?, ?)", key, string(body), expires.UnixNano())
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
	err := s.change(ctx, func(c *sql.Conn, _ time.Time) error {
		var body string
		err := c.QueryRowContext(ctx, "DELETE FROM console_once WHERE key = ? AND expires_at > ? RETURNING who", key, now.UnixNano()).Scan(&body)
		switch {
		case errors.Is(err, sql.ErrNoRows):
		case err != nil:
			return err
		default:
			if err := json.Unmarshal([]byte(body), &who); err != nil {
				return err
			}
			spent = true
		}
		// Expired links go too, this one among them if it was.
		_, err = c.ExecContext(ctx, "DELETE FROM console_once WHERE expires_at <= ?", now.UnixNano())
		return err
	})
	if err != nil {
		return approval.Identity{}, false, s.fail("spending a one-time link", err)
	}
	return who, spent, nil
}

// signalKept is how long a raised word stays in the file for listeners
// to read.
const signalKept = time.Minute

// Raise implements [consolestate.Signal].
func (s *Console) Raise(ctx context.Context, what string) error {
	err := s.change(ctx, func(c *sql.Conn, now time.Time) error {
		if _, err := c.ExecContext(ctx, "DELETE FROM console_signals WHERE at < ?", now.Add(-signalKept).UnixNano()); err != nil {
			return err
		}
		_, err := c.ExecContext(ctx, "INSERT INTO console_signals (what, at) VALUES (?, ?)", what, now.UnixNano())
		return err
	})
	if err != nil {
		return s.fail("raising a console signal", err)
	}
	return nil
}

// Listen implements [consolestate.Signal]: it reads the words raised
// after the last one it read, every Poll. A read that fails, or finds the
// words after its last dropped, is a gap: it sends "".
func (s *Console) Listen(ctx context.Context) (<-chan string, error) {
	var last int64
	if err := s.db.QueryRowContext(ctx, "SELECT coalesce(max(seq), 0) FROM console_signals").Scan(&last); err != nil {
		return nil, s.fail("listening for console signals", err)
	}
	poll := s.Poll
	if poll <= 0 {
		poll = 100 * time.Millisecond
	}
	ch := make(chan string, 16)
	go func() {
		defer close(ch)
		t := time.NewTicker(poll)
		defer t.Stop()
		gap := false
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			words, next, err := s.since(ctx, last)
			if err != nil {
				gap = true
				continue
			}
			if len(words) > 0 && next-int64(len(words)) != last {
				gap = true
			}
			last = next
			if gap {
				words, gap = append([]string{""}, words...), false
			}
			for _, w := range words {
				select {
				case ch <- w:
				case <-ctx.Done():
					return
				}
			}
		}
	}()
	return ch, nil
}

// since returns the words raised after seq, and the seq of the last.
func (s *Console) since(ctx context.Context, seq int64) ([]string, int64, error) {
	rows, err := s.db.QueryContext(ctx, "SELECT seq, what FROM console_signals WHERE seq > ? ORDER BY seq", seq)
	if err != nil {
		return nil, seq, err
	}
	defer rows.Close()
	var words []string
	for rows.Next() {
		var w string
		if err := rows.Scan(&seq, &w); err != nil {
			return nil, seq, err
		}
		words = append(words, w)
	}
	return words, seq, rows.Err()
}
