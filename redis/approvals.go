package redis

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/interlock-mcp/interlock/approval"
)

// Approvals is an [approval.Store] in Redis, so that any gateway
// sharing the server serves an approved call, once.
//
// Each approval is a JSON value under approval:ID; approval-key:KEY names
// the binding's live approval. The sorted set approvals lists the ids of
// approvals that may still be pending, by creation, and
// approvals-of:CALLER those of one caller (its tenant and principal as a
// JSON pair). Every change reads and writes under WATCH in one MULTI
// transaction and is retried when another gateway changed the same keys
// first, so two gateways never both consume an approval or lose a vote.
type Approvals struct {
	client *goredis.Client
	prefix string
}

var _ approval.Store = (*Approvals)(nil)

// Approvals returns the approval store that shares the token store's
// connection and prefix.
func (t *Tokens) Approvals() *Approvals { return &Approvals{client: t.client, prefix: t.prefix} }

func (s *Approvals) idKey(id string) string    { return s.prefix + "approval:" + id }
func (s *Approvals) bindKey(key string) string { return s.prefix + "approval-key:" + key }
func (s *Approvals) listKey() string           { return s.prefix + "approvals" }

// callerKey is the sorted set of the approvals that principal of tenant
// asked for; the pair is JSON, so no caller's names read as another's.
func (s *Approvals) callerKey(tenant, principal string) string {
	pair, _ := json.Marshal([]string{tenant, principal}) // strings always encode
	return s.prefix + "approvals-of:" + string(pair)
}

// kept is how long ids stay in the sorted sets of approvals: past the
// longest wait a rule allows (24 hours) and the longest time to run.
const kept = 48 * time.Hour

// keep is how long an approval and its binding stay: an hour past the end
// of the wait for a decision, or past the deadline to run once approved,
// which can be later.
func keep(a *approval.Approval) time.Duration {
	end := a.ExpiresAt
	if a.RunBy.After(end) {
		end = a.RunBy
	}
	return time.Until(end) + time.Hour
}

// maxAttempts bounds the retries of a transaction that keeps losing races.
const maxAttempts = 50

// update runs fn under WATCH of keys until its transaction commits.
func (s *Approvals) update(ctx context.Context, fn func(tx *goredis.Tx) error, keys ...string) error {
	for range maxAttempts {
		err := s.client.Watch(ctx, fn, keys...)
		if !errors.Is(err, goredis.TxFailedErr) {
			return err
		}
	}
	return fmt.Errorf("redis store: approval changed concurrently %d times in a row", maxAttempts)
}

// getJSON reads the JSON value at key; unknown when there is none.
func getJSON[T any](ctx context.Context, c goredis.Cmdable, key string, unknown error) (*T, error) {
	b, err := c.Get(ctx, key).Bytes()
	if errors.Is(err, goredis.Nil) {
		return nil, unknown
	}
	if err != nil {
		return nil, fmt.Errorf("redis store: reading %s: %w", key, err)
	}
	return decodeJSON[T](key, b)
}

// decodeJSON decodes b, the value at key.
func decodeJSON[T any](key string, b []byte) (*T, error) {
	v := new(T)
	if err := json.Unmarshal(b, v); err != nil {
		return nil, fmt.Errorf("redis store: %s: %w", key, err)
	}
	return v, nil
}

// setJSON queues the write of v as JSON at key, kept for ttl.
func setJSON(ctx context.Context, p goredis.Pipeliner, key string, v any, ttl time.Duration) error {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("redis store: encoding %s: %w", key, err)
	}
	p.Set(ctx, key, b, ttl)
	return nil
}

func (s *Approvals) read(ctx context.Context, c goredis.Cmdable, id string) (*approval.Approval, error) {
	return getJSON[approval.Approval](ctx, c, s.idKey(id), approval.ErrUnknown)
}

func (s *Approvals) write(ctx context.Context, p goredis.Pipeliner, a *approval.Approval) error {
	return setJSON(ctx, p, s.idKey(a.ID), a, keep(a))
}

// Request implements [approval.Store].
func (s *Approvals) Request(ctx context.Context, a *approval.Approval) (*approval.Approval, error) {
	var out *approval.Approval
	err := s.update(ctx, func(tx *goredis.Tx) error {
		id, err := tx.Get(ctx, s.bindKey(a.Key)).Result()
		if err != nil && !errors.Is(err, goredis.Nil) {
			return fmt.Errorf("redis store: %w", err)
		}
		var live *approval.Approval
		if id != "" {
			// The live approval is watched too: marking it Reported must
			// not overwrite a vote or a consumption, nor be done twice.
			if err := tx.Watch(ctx, s.idKey(id)).Err(); err != nil {
				return fmt.Errorf("redis store: %w", err)
			}
			if live, err = s.read(ctx, tx, id); err != nil && !errors.Is(err, approval.ErrUnknown) {
				return err
			}
		}
		answer, store := approval.Resolve(live, a, time.Now())
		out = answer
		switch store {
		case nil:
			return nil
		case live:
			_, err := tx.TxPipelined(ctx, func(p goredis.Pipeliner) error { return s.write(ctx, p, live) })
			return err
		}
		_, err = tx.TxPipelined(ctx, func(p goredis.Pipeliner) error {
			if err := s.write(ctx, p, a); err != nil {
				return err
			}
			p.Set(ctx, s.bindKey(a.Key), a.ID, keep(a))
			// Ids of approvals long gone leave the lists.
			gone := fmt.Sprint(time.Now().Add(-kept).UnixMilli())
			for _, list := range []string{s.listKey(), s.callerKey(a.Tenant, a.Principal)} {
				p.ZAdd(ctx, list, goredis.Z{Score: float64(a.CreatedAt.UnixMilli()), Member: a.ID})
				p.ZRemRangeByScore(ctx, list, "-inf", gone)
			}
			p.Expire(ctx, s.callerKey(a.Tenant, a.Principal), kept)
			return nil
		})
		return err
	}, s.bindKey(a.Key))
	if err != nil {
		return nil, err
	}
	return out, nil
}

// Get implements [approval.Store].
func (s *Approvals) Get(ctx context.Context, id string) (*approval.Approval, error) {
	return s.read(ctx, s.client, id)
}

// List implements [approval.Store].
func (s *Approvals) List(ctx context.Context) ([]*approval.Approval, error) {
	return s.pending(ctx, s.listKey())
}

// Waiting implements [approval.Store].
func (s *Approvals) Waiting(ctx context.Context, tenant, principal string) ([]*approval.Approval, error) {
	return s.pending(ctx, s.callerKey(tenant, principal))
}

// indexCallers puts each pending approval in its caller's list. Gateways
// before those lists wrote none, and their approvals would escape their
// callers' max_pending until they ended. Each gateway does it as it opens
// the store, so that what an older gateway still running beside it wrote
// is found at the next start too.
func (s *Approvals) indexCallers(ctx context.Context) error {
	all, err := s.List(ctx)
	if err != nil {
		return err
	}
	_, err = s.client.Pipelined(ctx, func(p goredis.Pipeliner) error {
		for _, a := range all {
			list := s.callerKey(a.Tenant, a.Principal)
			p.ZAddNX(ctx, list, goredis.Z{Score: float64(a.CreatedAt.UnixMilli()), Member: a.ID})
			p.Expire(ctx, list, kept)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("redis store: listing approvals by caller: %w", err)
	}
	return nil
}

// pending reads the approvals the sorted set list names that are still
// pending, oldest first. The ids of the others leave the list as they
// are found, since no approval is pending again.
func (s *Approvals) pending(ctx context.Context, list string) ([]*approval.Approval, error) {
	ids, err := s.client.ZRange(ctx, list, 0, -1).Result()
	if err != nil {
		return nil, fmt.Errorf("redis store: listing approvals: %w", err)
	}
	all, err := getAllJSON[approval.Approval](ctx, s.client, ids, s.idKey)
	if err != nil {
		return nil, err
	}
	now, found := time.Now(), map[string]bool{}
	var out []*approval.Approval
	for _, a := range all {
		if a.State(now) == approval.Pending {
			found[a.ID] = true
			out = append(out, a)
		}
	}
	var ended []any
	for _, id := range ids {
		if !found[id] {
			ended = append(ended, id)
		}
	}
	if len(ended) > 0 {
		if err := s.client.ZRem(ctx, list, ended...).Err(); err != nil {
			return nil, fmt.Errorf("redis store: %w", err)
		}
	}
	return out, nil
}

// getAllJSON reads the values of JSON the ids name (at keyOf(id)) in one
// round trip, leaving out those that are gone.
func getAllJSON[T any](ctx context.Context, c goredis.Cmdable, ids []string, keyOf func(string) string) ([]*T, error) {
	reads := make([]*goredis.StringCmd, len(ids))
	_, err := c.Pipelined(ctx, func(p goredis.Pipeliner) error {
		for i, id := range ids {
			reads[i] = p.Get(ctx, keyOf(id))
		}
		return nil
	})
	if err != nil && !errors.Is(err, goredis.Nil) {
		return nil, fmt.Errorf("redis store: reading %d values: %w", len(ids), err)
	}
	out := make([]*T, 0, len(ids))
	for i, r := range reads {
		b, err := r.Bytes()
		if errors.Is(err, goredis.Nil) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("redis store: reading %s: %w", keyOf(ids[i]), err)
		}
		v, err := decodeJSON[T](keyOf(ids[i]), b)
		if err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, nil
}

// change applies fn to the approval id under WATCH and writes it back.
// Only a pending or approved approval changes here, and either is still
// its binding's live one, so the binding is kept as long as the approval.
func (s *Approvals) change(ctx context.Context, id string, fn func(a *approval.Approval) error) (*approval.Approval, error) {
	return watched(ctx, s, s.idKey(id), func(c goredis.Cmdable) (*approval.Approval, error) { return s.read(ctx, c, id) },
		func(p goredis.Pipeliner, a *approval.Approval) error {
			if err := s.write(ctx, p, a); err != nil {
				return err
			}
			p.PExpire(ctx, s.bindKey(a.Key), keep(a))
			return nil
		}, fn)
}

// watched reads a value under WATCH of key, applies fn, and writes it back
// in the same transaction, retrying when another gateway got there first.
func watched[T any](ctx context.Context, s *Approvals, key string, read func(goredis.Cmdable) (*T, error),
	write func(goredis.Pipeliner, *T) error, fn func(*T) error) (*T, error) {
	var out *T
	err := s.update(ctx, func(tx *goredis.Tx) error {
		v, err := read(tx)
		if err != nil {
			return err
		}
		if err := fn(v); err != nil {
			return err
		}
		out = v
		_, err = tx.TxPipelined(ctx, func(p goredis.Pipeliner) error { return write(p, v) })
		return err
	}, key)
	return out, err
}

// Decide implements [approval.Store].
func (s *Approvals) Decide(ctx context.Context, id string, v approval.Vote) (*approval.Approval, error) {
	return s.change(ctx, id, func(a *approval.Approval) error {
		return a.AddVote(v, time.Now())
	})
}

// Consume implements [approval.Store].
func (s *Approvals) Consume(ctx context.Context, id string) (bool, error) {
	_, err := s.change(ctx, id, func(a *approval.Approval) error {
		return a.Consume(time.Now())
	})
	return approval.Spent(err)
}
