package redis

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/interlock-mcp/interlock"
)

// Approvals is an [interlock.ApprovalStore] in Redis, so that any gateway
// sharing the server serves an approved call, once.
//
// Each approval is a JSON value under approval:ID; approval-key:KEY names
// the binding's live approval; the sorted set approvals lists ids by
// creation. Every change reads and writes under WATCH in one MULTI
// transaction and is retried when another gateway changed the same keys
// first, so two gateways never both consume an approval or lose a vote.
type Approvals struct {
	client *goredis.Client
	prefix string
}

var _ interlock.ApprovalStore = (*Approvals)(nil)

// Approvals returns the approval store that shares the token store's
// connection and prefix.
func (t *Tokens) Approvals() *Approvals { return &Approvals{client: t.client, prefix: t.prefix} }

func (s *Approvals) idKey(id string) string    { return s.prefix + "approval:" + id }
func (s *Approvals) bindKey(key string) string { return s.prefix + "approval-key:" + key }
func (s *Approvals) listKey() string           { return s.prefix + "approvals" }
func keep(a *interlock.Approval) time.Duration { return time.Until(a.ExpiresAt) + time.Hour }

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

func (s *Approvals) read(ctx context.Context, c goredis.Cmdable, id string) (*interlock.Approval, error) {
	return getJSON[interlock.Approval](ctx, c, s.idKey(id), interlock.ErrApprovalUnknown)
}

func (s *Approvals) write(ctx context.Context, p goredis.Pipeliner, a *interlock.Approval) error {
	return setJSON(ctx, p, s.idKey(a.ID), a, keep(a))
}

// Request implements [interlock.ApprovalStore].
func (s *Approvals) Request(ctx context.Context, a *interlock.Approval) (*interlock.Approval, error) {
	var out *interlock.Approval
	err := s.update(ctx, func(tx *goredis.Tx) error {
		out = a
		id, err := tx.Get(ctx, s.bindKey(a.Key)).Result()
		if err != nil && !errors.Is(err, goredis.Nil) {
			return fmt.Errorf("redis store: %w", err)
		}
		if id != "" {
			live, err := s.read(ctx, tx, id)
			if err != nil && !errors.Is(err, interlock.ErrApprovalUnknown) {
				return err
			}
			if live != nil {
				if answers, changed := live.Answers(time.Now()); answers {
					out = live
					if changed {
						_, err := tx.TxPipelined(ctx, func(p goredis.Pipeliner) error { return s.write(ctx, p, live) })
						return err
					}
					return nil
				}
			}
		}
		_, err = tx.TxPipelined(ctx, func(p goredis.Pipeliner) error {
			if err := s.write(ctx, p, a); err != nil {
				return err
			}
			p.Set(ctx, s.bindKey(a.Key), a.ID, keep(a))
			p.ZAdd(ctx, s.listKey(), goredis.Z{Score: float64(a.CreatedAt.UnixMilli()), Member: a.ID})
			// Ids of approvals long gone leave the list.
			p.ZRemRangeByScore(ctx, s.listKey(), "-inf", fmt.Sprint(time.Now().Add(-48*time.Hour).UnixMilli()))
			return nil
		})
		return err
	}, s.bindKey(a.Key))
	if err != nil {
		return nil, err
	}
	return out, nil
}

// Get implements [interlock.ApprovalStore].
func (s *Approvals) Get(ctx context.Context, id string) (*interlock.Approval, error) {
	return s.read(ctx, s.client, id)
}

// List implements [interlock.ApprovalStore].
func (s *Approvals) List(ctx context.Context) ([]*interlock.Approval, error) {
	ids, err := s.client.ZRange(ctx, s.listKey(), 0, -1).Result()
	if err != nil {
		return nil, fmt.Errorf("redis store: listing approvals: %w", err)
	}
	var out []*interlock.Approval
	now := time.Now()
	for _, id := range ids {
		a, err := s.read(ctx, s.client, id)
		if errors.Is(err, interlock.ErrApprovalUnknown) {
			continue
		}
		if err != nil {
			return nil, err
		}
		if a.State(now) == interlock.ApprovalPending {
			out = append(out, a)
		}
	}
	return out, nil
}

// change applies fn to the approval id under WATCH and writes it back.
func (s *Approvals) change(ctx context.Context, id string, fn func(a *interlock.Approval) error) (*interlock.Approval, error) {
	return watched(ctx, s, s.idKey(id), func(c goredis.Cmdable) (*interlock.Approval, error) { return s.read(ctx, c, id) },
		func(p goredis.Pipeliner, a *interlock.Approval) error { return s.write(ctx, p, a) }, fn)
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

// Decide implements [interlock.ApprovalStore].
func (s *Approvals) Decide(ctx context.Context, id string, v interlock.Vote, approve bool) (*interlock.Approval, error) {
	return s.change(ctx, id, func(a *interlock.Approval) error {
		return a.AddVote(v, approve, time.Now())
	})
}

// Consume implements [interlock.ApprovalStore].
func (s *Approvals) Consume(ctx context.Context, id string) (bool, error) {
	_, err := s.change(ctx, id, func(a *interlock.Approval) error {
		return a.Consume(time.Now())
	})
	return interlock.Spent(err)
}
