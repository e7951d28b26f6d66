package redis

import (
	"context"
	"fmt"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/interlock-mcp/interlock/approval"
)

// Grants is an [approval.GrantStore] in Redis: each grant a JSON value
// under grant:ID, the set grants listing them. A use is counted under
// WATCH, so concurrent uses on any gateway never exceed the grant's limit.
type Grants struct {
	*Approvals
}

var _ approval.GrantStore = (*Grants)(nil)

// Grants returns the grant store that shares the token store's connection
// and prefix.
func (t *Tokens) Grants() *Grants { return &Grants{t.Approvals()} }

func (s *Grants) grantKey(id string) string { return s.prefix + "grant:" + id }
func (s *Grants) grantsKey() string         { return s.prefix + "grants" }

func (s *Grants) readGrant(ctx context.Context, c goredis.Cmdable, id string) (*approval.StandingGrant, error) {
	return getJSON[approval.StandingGrant](ctx, c, s.grantKey(id), approval.ErrGrantUnknown)
}

func (s *Grants) writeGrant(ctx context.Context, p goredis.Pipeliner, g *approval.StandingGrant) error {
	return setJSON(ctx, p, s.grantKey(g.ID), g, time.Until(g.ExpiresAt)+24*time.Hour)
}

// AddGrant implements [approval.GrantStore].
func (s *Grants) AddGrant(ctx context.Context, g *approval.StandingGrant) error {
	_, err := s.client.TxPipelined(ctx, func(p goredis.Pipeliner) error {
		if err := s.writeGrant(ctx, p, g); err != nil {
			return err
		}
		p.ZAdd(ctx, s.grantsKey(), goredis.Z{Score: float64(g.ExpiresAt.UnixMilli()), Member: g.ID})
		p.ZRemRangeByScore(ctx, s.grantsKey(), "-inf", fmt.Sprint(time.Now().Add(-24*time.Hour).UnixMilli()))
		return nil
	})
	if err != nil {
		return fmt.Errorf("redis store: adding grant: %w", err)
	}
	return nil
}

// LiveGrants implements [approval.GrantStore].
func (s *Grants) LiveGrants(ctx context.Context) ([]*approval.StandingGrant, error) {
	ids, err := s.client.ZRangeByScore(ctx, s.grantsKey(), &goredis.ZRangeBy{Min: fmt.Sprint(time.Now().UnixMilli()), Max: "+inf"}).Result()
	if err != nil {
		return nil, fmt.Errorf("redis store: listing grants: %w", err)
	}
	all, err := getAllJSON[approval.StandingGrant](ctx, s.client, ids, s.grantKey)
	if err != nil {
		return nil, err
	}
	var out []*approval.StandingGrant
	now := time.Now()
	for _, g := range all {
		if g.Live(now) {
			out = append(out, g)
		}
	}
	return out, nil
}

// changeGrant applies fn to the grant id under WATCH and writes it back.
func (s *Grants) changeGrant(ctx context.Context, id string, fn func(g *approval.StandingGrant) error) (*approval.StandingGrant, error) {
	return watched(ctx, s.Approvals, s.grantKey(id), func(c goredis.Cmdable) (*approval.StandingGrant, error) { return s.readGrant(ctx, c, id) },
		func(p goredis.Pipeliner, g *approval.StandingGrant) error { return s.writeGrant(ctx, p, g) }, fn)
}

// UseGrant implements [approval.GrantStore].
func (s *Grants) UseGrant(ctx context.Context, id string) (bool, error) {
	_, err := s.changeGrant(ctx, id, func(g *approval.StandingGrant) error {
		return g.Use(time.Now())
	})
	return approval.Spent(err)
}

// RevokeGrant implements [approval.GrantStore].
func (s *Grants) RevokeGrant(ctx context.Context, id, void string) (*approval.StandingGrant, error) {
	return s.changeGrant(ctx, id, func(g *approval.StandingGrant) error {
		g.Revoke(void)
		return nil
	})
}

// Grant implements [approval.GrantStore].
func (s *Grants) Grant(ctx context.Context, id string) (*approval.StandingGrant, error) {
	return s.readGrant(ctx, s.client, id)
}
