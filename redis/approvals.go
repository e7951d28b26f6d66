package redis

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
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

func (s *Approvals) read(ctx context.Context, c goredis.Cmdable, id string) (*interlock.Approval, error) {
	b, err := c.Get(ctx, s.idKey(id)).Bytes()
	if errors.Is(err, goredis.Nil) {
		return nil, interlock.ErrApprovalUnknown
	}
	if err != nil {
		return nil, fmt.Errorf("redis store: reading approval: %w", err)
	}
	a := &interlock.Approval{}
	if err := json.Unmarshal(b, a); err != nil {
		return nil, fmt.Errorf("redis store: approval %s: %w", id, err)
	}
	return a, nil
}

func (s *Approvals) write(ctx context.Context, p goredis.Pipeliner, a *interlock.Approval) error {
	b, err := json.Marshal(a)
	if err != nil {
		return fmt.Errorf("redis store: encoding approval: %w", err)
	}
	p.Set(ctx, s.idKey(a.ID), b, keep(a))
	return nil
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
				switch live.State(time.Now()) {
				case interlock.ApprovalPending, interlock.ApprovalApproved, interlock.ApprovalDenied:
					out = live
					return nil
				case interlock.ApprovalExpired:
					if !live.Reported {
						live.Reported = true
						out = live
						_, err := tx.TxPipelined(ctx, func(p goredis.Pipeliner) error { return s.write(ctx, p, live) })
						return err
					}
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
	var out *interlock.Approval
	err := s.update(ctx, func(tx *goredis.Tx) error {
		a, err := s.read(ctx, tx, id)
		if err != nil {
			return err
		}
		if err := fn(a); err != nil {
			return err
		}
		out = a
		_, err = tx.TxPipelined(ctx, func(p goredis.Pipeliner) error { return s.write(ctx, p, a) })
		return err
	}, s.idKey(id))
	return out, err
}

// Decide implements [interlock.ApprovalStore].
func (s *Approvals) Decide(ctx context.Context, id string, v interlock.Vote, approve bool) (*interlock.Approval, error) {
	return s.change(ctx, id, func(a *interlock.Approval) error {
		if a.State(time.Now()) != interlock.ApprovalPending {
			return interlock.ErrAlreadyDecided
		}
		if !approve {
			a.Denial = &v
			return nil
		}
		if slices.ContainsFunc(a.Approvals, func(x interlock.Vote) bool { return x.Principal == v.Principal }) {
			return interlock.ErrAlreadyVoted
		}
		a.Approvals = append(a.Approvals, v)
		return nil
	})
}

// errNotApproved ends a consume that finds nothing to consume.
var errNotApproved = errors.New("not approved")

// Consume implements [interlock.ApprovalStore].
func (s *Approvals) Consume(ctx context.Context, id string) (bool, error) {
	_, err := s.change(ctx, id, func(a *interlock.Approval) error {
		if a.State(time.Now()) != interlock.ApprovalApproved {
			return errNotApproved
		}
		a.Consumed = true
		return nil
	})
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, errNotApproved), errors.Is(err, interlock.ErrApprovalUnknown):
		return false, nil
	}
	return false, err
}
