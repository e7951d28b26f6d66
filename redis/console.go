package redis

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/interlock-mcp/interlock/approval"
	"github.com/interlock-mcp/interlock/consolestate"
)

// Console keeps the console's state ([consolestate.Store]) in Redis and
// carries its signal ([consolestate.Signal]) over pub/sub, so that any
// replica sharing the server answers any of an approver's requests.
//
// A session is a hash under console:session:KEY (KEY is the SHA-256 of
// its id, [consolestate.Key]: a dump of the server holds no session one
// could ride) with its JSON, the time it was last seen and its slots,
// expiring after the idle time; the set console:sessions lists them.
// An owner's passkeys are a hash of JSON by credential id, with a list
// keeping their order; a one-time link is a value under console:link:KEY.
// Takes, swaps and spends are one script or GETDEL each, so of any number
// at once exactly one succeeds.
type Console struct {
	client *goredis.Client
	prefix string
}

var (
	_ consolestate.Store  = (*Console)(nil)
	_ consolestate.Signal = (*Console)(nil)
)

// Console returns the console's state that shares the token store's
// connection and prefix.
func (t *Tokens) Console() *Console { return &Console{client: t.client, prefix: t.prefix} }

func (s *Console) sessionKey(key string) string { return s.prefix + "console:session:" + key }
func (s *Console) sessionsKey() string          { return s.prefix + "console:sessions" }
func (s *Console) linkKey(key string) string    { return s.prefix + "console:link:" + key }
func (s *Console) ownersKey() string            { return s.prefix + "console:passkey-owners" }
func (s *Console) signalChannel() string        { return s.prefix + "console:signal" }

// ownerJSON names an owner in the set of owners.
func ownerJSON(o consolestate.Owner) string {
	b, _ := json.Marshal([]string{o.Tenant, o.Principal}) // strings always encode
	return string(b)
}

// ownerKeys are where owner's passkeys, their order and user handle are.
func (s *Console) ownerKeys(o consolestate.Owner) (passkeys, order, user string) {
	h := hex.EncodeToString([]byte(ownerJSON(o)))
	return s.prefix + "console:passkeys:" + h, s.prefix + "console:passkey-order:" + h, s.prefix + "console:passkey-user:" + h
}

func fail(doing string, err error) error { return fmt.Errorf("redis store: %s: %w", doing, err) }

// StartSession implements [consolestate.Store].
func (s *Console) StartSession(ctx context.Context, key string, sess consolestate.Session, idle time.Duration) error {
	body, err := json.Marshal(sess)
	if err != nil {
		return fail("encoding a session", err)
	}
	if err := s.dropIdle(ctx, sess.Created.Add(-idle)); err != nil {
		return err
	}
	_, err = s.client.TxPipelined(ctx, func(p goredis.Pipeliner) error {
		p.Del(ctx, s.sessionKey(key))
		p.HSet(ctx, s.sessionKey(key), "body", string(body), "seen", strconv.FormatInt(sess.LastSeen.UnixNano(), 10))
		p.PExpire(ctx, s.sessionKey(key), idle)
		p.SAdd(ctx, s.sessionsKey(), key)
		return nil
	})
	if err != nil {
		return fail("starting a console session", err)
	}
	return nil
}

// dropIdle drops the sessions last seen before cutoff, and forgets those
// Redis expired. A session it drops is idle whoever reads it.
func (s *Console) dropIdle(ctx context.Context, cutoff time.Time) error {
	keys, err := s.client.SMembers(ctx, s.sessionsKey()).Result()
	if err != nil {
		return fail("listing console sessions", err)
	}
	seen := make([]*goredis.StringCmd, len(keys))
	if _, err := s.client.Pipelined(ctx, func(p goredis.Pipeliner) error {
		for i, k := range keys {
			seen[i] = p.HGet(ctx, s.sessionKey(k), "seen")
		}
		return nil
	}); err != nil && !errors.Is(err, goredis.Nil) {
		return fail("listing console sessions", err)
	}
	_, err = s.client.Pipelined(ctx, func(p goredis.Pipeliner) error {
		for i, k := range keys {
			v, err := seen[i].Int64()
			if err == nil && v >= cutoff.UnixNano() {
				continue
			}
			p.Del(ctx, s.sessionKey(k))
			p.SRem(ctx, s.sessionsKey(), k)
		}
		return nil
	})
	if err != nil {
		return fail("dropping idle console sessions", err)
	}
	return nil
}

func decodeSession(body, seen string) (consolestate.Session, error) {
	var sess consolestate.Session
	if err := json.Unmarshal([]byte(body), &sess); err != nil {
		return consolestate.Session{}, fail("reading a session", err)
	}
	ns, err := strconv.ParseInt(seen, 10, 64)
	if err != nil {
		return consolestate.Session{}, fail("reading a session", err)
	}
	sess.LastSeen = time.Unix(0, ns).In(sess.Created.Location())
	return sess, nil
}

// Session implements [consolestate.Store]: a touch or an end is a
// transaction under WATCH of the session, retried when another gateway
// changed it first.
func (s *Console) Session(ctx context.Context, key string, now time.Time, idle time.Duration, touch bool) (consolestate.Session, error) {
	k := s.sessionKey(key)
	var out consolestate.Session
	found := false
	err := watch(ctx, s.client, func(tx *goredis.Tx) error {
		found = false
		vals, err := tx.HMGet(ctx, k, "body", "seen").Result()
		if err != nil {
			return err
		}
		body, ok1 := vals[0].(string)
		seen, ok2 := vals[1].(string)
		if !ok1 || !ok2 {
			return nil
		}
		sess, err := decodeSession(body, seen)
		if err != nil {
			return err
		}
		if now.Sub(sess.LastSeen) > idle {
			_, err := tx.TxPipelined(ctx, func(p goredis.Pipeliner) error {
				p.Del(ctx, k)
				p.SRem(ctx, s.sessionsKey(), key)
				return nil
			})
			return err
		}
		if touch {
			// Last seen now, unless a later request of it already said so.
			if now.After(sess.LastSeen) {
				sess.LastSeen = now
			}
			if _, err := tx.TxPipelined(ctx, func(p goredis.Pipeliner) error {
				p.HSet(ctx, k, "seen", strconv.FormatInt(sess.LastSeen.UnixNano(), 10))
				p.PExpire(ctx, k, idle)
				return nil
			}); err != nil {
				return err
			}
		}
		out, found = sess, true
		return nil
	}, k)
	if err != nil {
		return consolestate.Session{}, fail("reading a console session", err)
	}
	if !found {
		return consolestate.Session{}, consolestate.ErrNoSession
	}
	return out, nil
}

// watch runs fn under WATCH of keys until its transaction commits.
func watch(ctx context.Context, c *goredis.Client, fn func(*goredis.Tx) error, keys ...string) error {
	for range maxAttempts {
		err := c.Watch(ctx, fn, keys...)
		if !errors.Is(err, goredis.TxFailedErr) {
			return err
		}
	}
	return fmt.Errorf("changed concurrently %d times in a row", maxAttempts)
}

// EndSession implements [consolestate.Store].
func (s *Console) EndSession(ctx context.Context, key string) error {
	_, err := s.client.TxPipelined(ctx, func(p goredis.Pipeliner) error {
		p.Del(ctx, s.sessionKey(key))
		p.SRem(ctx, s.sessionsKey(), key)
		return nil
	})
	if err != nil {
		return fail("ending a console session", err)
	}
	return nil
}

// Sessions implements [consolestate.Store].
func (s *Console) Sessions(ctx context.Context) (map[string]consolestate.Session, error) {
	keys, err := s.client.SMembers(ctx, s.sessionsKey()).Result()
	if err != nil {
		return nil, fail("listing console sessions", err)
	}
	vals := make([]*goredis.SliceCmd, len(keys))
	if _, err := s.client.Pipelined(ctx, func(p goredis.Pipeliner) error {
		for i, k := range keys {
			vals[i] = p.HMGet(ctx, s.sessionKey(k), "body", "seen")
		}
		return nil
	}); err != nil {
		return nil, fail("listing console sessions", err)
	}
	out := map[string]consolestate.Session{}
	for i, k := range keys {
		v := vals[i].Val()
		body, ok1 := v[0].(string)
		seen, ok2 := v[1].(string)
		if !ok1 || !ok2 {
			// Expired by the server; StartSession forgets it.
			continue
		}
		if out[k], err = decodeSession(body, seen); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// put sets a slot of an existing session; 0 when there is none.
var put = goredis.NewScript(`
if redis.call("EXISTS", KEYS[1]) == 0 then
  return 0
end
redis.call("HSET", KEYS[1], ARGV[1], ARGV[2])
return 1
`)

// take returns a slot's value and deletes it, in one step.
var take = goredis.NewScript(`
local v = redis.call("HGET", KEYS[1], ARGV[1])
if v then
  redis.call("HDEL", KEYS[1], ARGV[1])
end
return v
`)

// Put implements [consolestate.Store].
func (s *Console) Put(ctx context.Context, key string, slot consolestate.Slot, value []byte) error {
	if err := consolestate.CheckSlot(slot); err != nil {
		return err
	}
	n, err := put.Run(ctx, s.client, []string{s.sessionKey(key)}, "slot:"+string(slot), value).Int()
	if err != nil {
		return fail("keeping a session's "+string(slot), err)
	}
	if n == 0 {
		return consolestate.ErrNoSession
	}
	return nil
}

// Take implements [consolestate.Store].
func (s *Console) Take(ctx context.Context, key string, slot consolestate.Slot) ([]byte, error) {
	if err := consolestate.CheckSlot(slot); err != nil {
		return nil, err
	}
	v, err := take.Run(ctx, s.client, []string{s.sessionKey(key)}, "slot:"+string(slot)).Text()
	if errors.Is(err, goredis.Nil) {
		return nil, nil
	}
	if err != nil {
		return nil, fail("taking a session's "+string(slot), err)
	}
	return []byte(v), nil
}

// PasskeyUser implements [consolestate.Store].
func (s *Console) PasskeyUser(ctx context.Context, owner consolestate.Owner, fresh []byte) ([]byte, error) {
	_, _, user := s.ownerKeys(owner)
	if err := s.client.SetNX(ctx, user, fresh, 0).Err(); err != nil {
		return nil, fail("keeping a passkey user", err)
	}
	b, err := s.client.Get(ctx, user).Bytes()
	if err != nil {
		return nil, fail("reading a passkey user", err)
	}
	return b, nil
}

// Passkeys implements [consolestate.Store].
func (s *Console) Passkeys(ctx context.Context, owner consolestate.Owner) ([]consolestate.Passkey, error) {
	keys, order, _ := s.ownerKeys(owner)
	ids, err := s.client.LRange(ctx, order, 0, -1).Result()
	if err != nil {
		return nil, fail("reading passkeys", err)
	}
	if len(ids) == 0 {
		return nil, nil
	}
	bodies, err := s.client.HMGet(ctx, keys, ids...).Result()
	if err != nil {
		return nil, fail("reading passkeys", err)
	}
	var out []consolestate.Passkey
	for _, b := range bodies {
		body, ok := b.(string)
		if !ok {
			continue
		}
		var p consolestate.Passkey
		if err := json.Unmarshal([]byte(body), &p); err != nil {
			return nil, fail("reading passkeys", err)
		}
		out = append(out, p)
	}
	return out, nil
}

// addPasskey keeps a passkey unless one of its id is kept; 0 when one is.
var addPasskey = goredis.NewScript(`
if redis.call("HEXISTS", KEYS[1], ARGV[1]) == 1 then
  return 0
end
redis.call("HSET", KEYS[1], ARGV[1], ARGV[2])
redis.call("RPUSH", KEYS[2], ARGV[1])
redis.call("SADD", KEYS[3], ARGV[3])
return 1
`)

// swapPasskey replaces a passkey while its revision is ARGV[2]: 1 when it
// did, 0 when the revision moved, -1 when there is no such passkey.
var swapPasskey = goredis.NewScript(`
local cur = redis.call("HGET", KEYS[1], ARGV[1])
if not cur then
  return -1
end
if tostring(cjson.decode(cur)["rev"]) ~= ARGV[2] then
  return 0
end
redis.call("HSET", KEYS[1], ARGV[1], ARGV[3])
return 1
`)

// AddPasskey implements [consolestate.Store].
func (s *Console) AddPasskey(ctx context.Context, owner consolestate.Owner, p consolestate.Passkey) error {
	p.Rev = 1
	body, err := json.Marshal(p)
	if err != nil {
		return fail("encoding a passkey", err)
	}
	keys, order, _ := s.ownerKeys(owner)
	n, err := addPasskey.Run(ctx, s.client, []string{keys, order, s.ownersKey()}, hex.EncodeToString(p.ID), string(body), ownerJSON(owner)).Int()
	if err != nil {
		return fail("keeping a passkey", err)
	}
	if n == 0 {
		return consolestate.ErrPasskeyExists
	}
	return nil
}

// SwapPasskey implements [consolestate.Store].
func (s *Console) SwapPasskey(ctx context.Context, owner consolestate.Owner, p consolestate.Passkey) (bool, error) {
	read := p.Rev
	p.Rev++
	body, err := json.Marshal(p)
	if err != nil {
		return false, fail("encoding a passkey", err)
	}
	keys, _, _ := s.ownerKeys(owner)
	n, err := swapPasskey.Run(ctx, s.client, []string{keys}, hex.EncodeToString(p.ID), strconv.FormatInt(read, 10), string(body)).Int()
	if err != nil {
		return false, fail("moving a passkey", err)
	}
	if n < 0 {
		return false, consolestate.ErrNoPasskey
	}
	return n == 1, nil
}

// PasskeyOwners implements [consolestate.Store].
func (s *Console) PasskeyOwners(ctx context.Context) ([]consolestate.Owner, error) {
	members, err := s.client.SMembers(ctx, s.ownersKey()).Result()
	if err != nil {
		return nil, fail("listing passkey owners", err)
	}
	out := make([]consolestate.Owner, 0, len(members))
	for _, m := range members {
		var pair []string
		if err := json.Unmarshal([]byte(m), &pair); err != nil || len(pair) != 2 {
			return nil, fail("listing passkey owners", fmt.Errorf("an owner kept as %q", m))
		}
		out = append(out, consolestate.Owner{Tenant: pair[0], Principal: pair[1]})
	}
	return out, nil
}

// ForgetPasskeys implements [consolestate.Store].
func (s *Console) ForgetPasskeys(ctx context.Context, owner consolestate.Owner) error {
	keys, order, user := s.ownerKeys(owner)
	_, err := s.client.TxPipelined(ctx, func(p goredis.Pipeliner) error {
		p.Del(ctx, keys, order, user)
		p.SRem(ctx, s.ownersKey(), ownerJSON(owner))
		return nil
	})
	if err != nil {
		return fail("forgetting passkeys", err)
	}
	return nil
}

// link is a one-time link as Redis keeps it.
type link struct {
	Who     approval.Identity `json:"who"`
	Expires int64             `json:"expires"`
}

// AddLink implements [consolestate.Store]. The server drops the link a
// minute after it expires by its own clock, whatever the gateways' clocks
// say; the expiry that counts is the one kept.
func (s *Console) AddLink(ctx context.Context, key string, who approval.Identity, expires time.Time) error {
	body, err := json.Marshal(link{Who: who, Expires: expires.UnixNano()})
	if err != nil {
		return fail("encoding a link", err)
	}
	if err := s.client.Set(ctx, s.linkKey(key), body, max(time.Until(expires), 0)+time.Minute).Err(); err != nil {
		return fail("keeping a one-time link", err)
	}
	return nil
}

// SpendLink implements [consolestate.Store]: GETDEL reads and spends in
// one step.
func (s *Console) SpendLink(ctx context.Context, key string, now time.Time) (approval.Identity, bool, error) {
	body, err := s.client.GetDel(ctx, s.linkKey(key)).Bytes()
	if errors.Is(err, goredis.Nil) {
		return approval.Identity{}, false, nil
	}
	if err != nil {
		return approval.Identity{}, false, fail("spending a one-time link", err)
	}
	var l link
	if err := json.Unmarshal(body, &l); err != nil {
		return approval.Identity{}, false, fail("reading a one-time link", err)
	}
	if now.UnixNano() >= l.Expires {
		return approval.Identity{}, false, nil
	}
	return l.Who, true, nil
}

// Raise implements [consolestate.Signal].
func (s *Console) Raise(ctx context.Context, what string) error {
	if err := s.client.Publish(ctx, s.signalChannel(), what).Err(); err != nil {
		return fail("raising a console signal", err)
	}
	return nil
}

// Listen implements [consolestate.Signal]. It returns once the server
// confirmed the subscription, so a word raised after it is heard. The
// subscription is made again after the connection drops, and the gap is
// reported with "".
func (s *Console) Listen(ctx context.Context) (<-chan string, error) {
	ps := s.client.Subscribe(ctx, s.signalChannel())
	if _, err := ps.Receive(ctx); err != nil {
		ps.Close()
		return nil, fail("listening for console signals", err)
	}
	ch := make(chan string, 16)
	// A blocked read does not heed ctx; closing the subscription ends it.
	stop := context.AfterFunc(ctx, func() { ps.Close() })
	go func() {
		defer close(ch)
		defer stop()
		for {
			msg, err := ps.Receive(ctx)
			if ctx.Err() != nil {
				return
			}
			switch m := msg.(type) {
			case *goredis.Message:
				if !consolestate.Send(ctx, ch, m.Payload) {
					return
				}
			case *goredis.Subscription:
				// Subscribed again after a reconnection: words raised
				// in between are lost.
				if !consolestate.Send(ctx, ch, "") {
					return
				}
			}
			if err != nil {
				select {
				case <-time.After(100 * time.Millisecond):
				case <-ctx.Done():
					return
				}
			}
		}
	}()
	return ch, nil
}
