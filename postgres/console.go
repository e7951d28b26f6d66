package postgres

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/interlock-mcp/interlock/approval"
	"github.com/interlock-mcp/interlock/consolestate"
)

// consoleSchema keeps the console's state. Sessions and one-time links
// are kept by the SHA-256 of their secret ([consolestate.Key]), so a
// read of the database (a backup, a replica) signs nobody in. Times are
// Unix nanoseconds.
const consoleSchema = `
CREATE TABLE IF NOT EXISTS console_sessions (
	key          text PRIMARY KEY,
	body         text NOT NULL,
	last_seen    bigint NOT NULL,
	flash        bytea,
	registration bytea
);
CREATE TABLE IF NOT EXISTS console_passkey_users (
	owner  text PRIMARY KEY,
	handle bytea NOT NULL
);
CREATE TABLE IF NOT EXISTS console_passkeys (
	owner text NOT NULL,
	id    bytea NOT NULL,
	seq   bigserial,
	rev   bigint NOT NULL,
	body  text NOT NULL,
	PRIMARY KEY (owner, id)
);
CREATE TABLE IF NOT EXISTS console_once (
	key        text PRIMARY KEY,
	who        text NOT NULL,
	expires_at bigint NOT NULL
);`

// Console keeps the console's state ([consolestate.Store]) in
// PostgreSQL and carries its signal ([consolestate.Signal]) with
// LISTEN/NOTIFY, so that any replica sharing the database answers any of
// an approver's requests. Takes, swaps and spends are one statement each,
// and a touch reads its row FOR UPDATE, so of any number at once exactly
// one succeeds.
type Console struct {
	pool  *pgxpool.Pool
	where string
	// channel is the NOTIFY channel of the schema the tables are in:
	// notifications are the database's, and two schemas are two stores.
	channel string
}

var (
	_ consolestate.Store  = (*Console)(nil)
	_ consolestate.Signal = (*Console)(nil)
)

// Console returns the console's state in the approvals' database, on
// their connections.
func (s *Approvals) Console() *Console {
	return &Console{pool: s.pool, where: s.where, channel: s.channel}
}

// channelOf is the NOTIFY channel of schema: a hash, since a channel is
// an identifier of at most 63 bytes.
func channelOf(schema string) string {
	sum := sha256.Sum256([]byte(schema))
	return "interlock_console_" + hex.EncodeToString(sum[:8])
}

func (s *Console) fail(doing string, err error) error {
	return fmt.Errorf("console store %s: %s: %w", s.where, doing, err)
}

// StartSession implements [consolestate.Store].
func (s *Console) StartSession(ctx context.Context, key string, sess consolestate.Session, idle time.Duration) error {
	body, err := json.Marshal(sess)
	if err != nil {
		return s.fail("encoding a session", err)
	}
	err = pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "DELETE FROM console_sessions WHERE last_seen < $1", sess.Created.Add(-idle).UnixNano()); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, "INSERT INTO console_sessions (key, body, last_seen) VALUES ($1, $2, $3)", key, string(body), sess.LastSeen.UnixNano())
		return err
	})
	if err != nil {
		return s.fail("starting a console session", err)
	}
	return nil
}

// Session implements [consolestate.Store]. A read that neither touches
// nor finds the session idled out writes nothing; a touch is one UPDATE.
func (s *Console) Session(ctx context.Context, key string, now time.Time, idle time.Duration, touch bool) (consolestate.Session, error) {
	if !touch {
		var body string
		var seen int64
		err := s.pool.QueryRow(ctx, "SELECT body, last_seen FROM console_sessions WHERE key = $1", key).Scan(&body, &seen)
		if errors.Is(err, pgx.ErrNoRows) {
			return consolestate.Session{}, consolestate.ErrNoSession
		}
		if err != nil {
			return consolestate.Session{}, s.fail("reading a console session", err)
		}
		if now.Sub(time.Unix(0, seen)) <= idle {
			sess, err := consolestate.DecodeSession(body, seen)
			if err != nil {
				return consolestate.Session{}, s.fail("reading a console session", err)
			}
			return sess, nil
		}
	}
	// One statement touches a live session: last seen now, unless a
	// later request of it already said so.
	var body string
	var seen int64
	err := s.pool.QueryRow(ctx, `UPDATE console_sessions SET last_seen = greatest(last_seen, $2)
		WHERE key = $1 AND last_seen >= $3 RETURNING body, last_seen`, key, now.UnixNano(), now.Add(-idle).UnixNano()).Scan(&body, &seen)
	if err == nil {
		sess, err := consolestate.DecodeSession(body, seen)
		if err != nil {
			return consolestate.Session{}, s.fail("reading a console session", err)
		}
		return sess, nil
	}
	if !errors.Is(err, pgx.ErrNoRows) {
		return consolestate.Session{}, s.fail("reading a console session", err)
	}
	// Gone, or idled out: then it ends.
	if _, err := s.pool.Exec(ctx, "DELETE FROM console_sessions WHERE key = $1 AND last_seen < $2", key, now.Add(-idle).UnixNano()); err != nil {
		return consolestate.Session{}, s.fail("ending an idle console session", err)
	}
	return consolestate.Session{}, consolestate.ErrNoSession
}

// EndSession implements [consolestate.Store].
func (s *Console) EndSession(ctx context.Context, key string) error {
	if _, err := s.pool.Exec(ctx, "DELETE FROM console_sessions WHERE key = $1", key); err != nil {
		return s.fail("ending a console session", err)
	}
	return nil
}

// Sessions implements [consolestate.Store].
func (s *Console) Sessions(ctx context.Context) (map[string]consolestate.Session, error) {
	rows, err := s.pool.Query(ctx, "SELECT key, body, last_seen FROM console_sessions")
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
	tag, err := s.pool.Exec(ctx, "UPDATE console_sessions SET "+col+" = $1 WHERE key = $2", value, key)
	if err != nil {
		return s.fail("keeping a session's "+col, err)
	}
	if tag.RowsAffected() == 0 {
		return consolestate.ErrNoSession
	}
	return nil
}

// Take implements [consolestate.Store]: one UPDATE that returns the value
// it empties, read under the row's lock. Most pages find the slot empty:
// a read says so without a write.
func (s *Console) Take(ctx context.Context, key string, slot consolestate.Slot) ([]byte, error) {
	col, err := slot.Column()
	if err != nil {
		return nil, err
	}
	var held bool
	err = s.pool.QueryRow(ctx, "SELECT "+col+" IS NOT NULL FROM console_sessions WHERE key = $1", key).Scan(&held)
	if errors.Is(err, pgx.ErrNoRows) || (err == nil && !held) {
		return nil, nil
	}
	if err != nil {
		return nil, s.fail("taking a session's "+col, err)
	}
	var v []byte
	err = s.pool.QueryRow(ctx, `UPDATE console_sessions s SET `+col+` = NULL
		FROM (SELECT key, `+col+` AS value FROM console_sessions WHERE key = $1 FOR UPDATE) old
		WHERE s.key = old.key RETURNING old.value`, key).Scan(&v)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, s.fail("taking a session's "+col, err)
	}
	return v, nil
}

// PasskeyUser implements [consolestate.Store].
func (s *Console) PasskeyUser(ctx context.Context, owner consolestate.Owner, fresh []byte) ([]byte, error) {
	var handle []byte
	err := s.pool.QueryRow(ctx, `WITH made AS (
			INSERT INTO console_passkey_users (owner, handle) VALUES ($1, $2) ON CONFLICT (owner) DO NOTHING RETURNING handle)
		SELECT handle FROM made UNION ALL SELECT handle FROM console_passkey_users WHERE owner = $1 LIMIT 1`,
		owner.Key(), fresh).Scan(&handle)
	if err != nil {
		return nil, s.fail("reading a passkey user", err)
	}
	return handle, nil
}

// Passkeys implements [consolestate.Store].
func (s *Console) Passkeys(ctx context.Context, owner consolestate.Owner) ([]consolestate.Passkey, error) {
	rows, err := s.pool.Query(ctx, "SELECT body, rev FROM console_passkeys WHERE owner = $1 ORDER BY seq", owner.Key())
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
	tag, err := s.pool.Exec(ctx, "INSERT INTO console_passkeys (owner, id, rev, body) VALUES ($1, $2, 1, $3) ON CONFLICT (owner, id) DO NOTHING",
		owner.Key(), p.ID, string(body))
	if err != nil {
		return s.fail("keeping a passkey", err)
	}
	if tag.RowsAffected() == 0 {
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
	tag, err := s.pool.Exec(ctx, "UPDATE console_passkeys SET rev = rev + 1, body = $1 WHERE owner = $2 AND id = $3 AND rev = $4",
		string(body), owner.Key(), p.ID, read)
	if err != nil {
		return false, s.fail("moving a passkey", err)
	}
	if tag.RowsAffected() == 1 {
		return true, nil
	}
	var one int
	err = s.pool.QueryRow(ctx, "SELECT 1 FROM console_passkeys WHERE owner = $1 AND id = $2", owner.Key(), p.ID).Scan(&one)
	if errors.Is(err, pgx.ErrNoRows) {
		return false, consolestate.ErrNoPasskey
	}
	if err != nil {
		return false, s.fail("moving a passkey", err)
	}
	return false, nil
}

// PasskeyOwners implements [consolestate.Store].
func (s *Console) PasskeyOwners(ctx context.Context) ([]consolestate.Owner, error) {
	rows, err := s.pool.Query(ctx, "SELECT DISTINCT owner FROM console_passkeys")
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
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "DELETE FROM console_passkeys WHERE owner = $1", owner.Key()); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, "DELETE FROM console_passkey_users WHERE owner = $1", owner.Key())
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
	if _, err := s.pool.Exec(ctx, "INSERT INTO console_once (key, who, expires_at) VALUES ($1, $2, $3)", key, string(body), expires.UnixNano()); err != nil {
		return s.fail("keeping a one-time link", err)
	}
	return nil
}

// SpendLink implements [consolestate.Store]: one DELETE, so of any
// number of gateways presenting one link, exactly one is told true.
func (s *Console) SpendLink(ctx context.Context, key string, now time.Time) (approval.Identity, bool, error) {
	var who approval.Identity
	var body string
	err := s.pool.QueryRow(ctx, "DELETE FROM console_once WHERE key = $1 AND expires_at > $2 RETURNING who", key, now.UnixNano()).Scan(&body)
	spent := err == nil
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return approval.Identity{}, false, s.fail("spending a one-time link", err)
	}
	if spent {
		if err := json.Unmarshal([]byte(body), &who); err != nil {
			return approval.Identity{}, false, s.fail("reading a one-time link", err)
		}
	}
	// Expired links go too: they sign nobody in, now or later.
	if _, err := s.pool.Exec(ctx, "DELETE FROM console_once WHERE expires_at <= $1", now.UnixNano()); err != nil {
		return approval.Identity{}, false, s.fail("dropping expired one-time links", err)
	}
	return who, spent, nil
}

// Raise implements [consolestate.Signal].
func (s *Console) Raise(ctx context.Context, what string) error {
	if _, err := s.pool.Exec(ctx, "SELECT pg_notify($1, $2)", s.channel, what); err != nil {
		return s.fail("raising a console signal", err)
	}
	return nil
}

// Listen implements [consolestate.Signal]: LISTEN on a connection of its
// own, outside the pool. It returns once listening, so a word raised
// after it is heard. When the connection drops it connects again, and
// reports the gap with "".
func (s *Console) Listen(ctx context.Context) (<-chan string, error) {
	conn, err := s.listen(ctx)
	if err != nil {
		return nil, s.fail("listening for console signals", err)
	}
	ch := make(chan string, 16)
	go func() {
		defer close(ch)
		send := func(w string) bool {
			select {
			case ch <- w:
				return true
			case <-ctx.Done():
				return false
			}
		}
		for {
			for conn != nil {
				n, err := conn.WaitForNotification(ctx)
				if err != nil {
					conn.Close(context.WithoutCancel(ctx))
					conn = nil
					break
				}
				if !send(n.Payload) {
					conn.Close(context.WithoutCancel(ctx))
					return
				}
			}
			if ctx.Err() != nil {
				return
			}
			select {
			case <-time.After(250 * time.Millisecond):
			case <-ctx.Done():
				return
			}
			if conn, _ = s.listen(ctx); conn != nil && !send("") {
				conn.Close(context.WithoutCancel(ctx))
				return
			}
		}
	}()
	return ch, nil
}

// listen opens a connection listening on the channel.
func (s *Console) listen(ctx context.Context) (*pgx.Conn, error) {
	conn, err := pgx.ConnectConfig(ctx, s.pool.Config().ConnConfig.Copy())
	if err != nil {
		return nil, err
	}
	if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{s.channel}.Sanitize()); err != nil {
		conn.Close(ctx)
		return nil, err
	}
	return conn, nil
}
