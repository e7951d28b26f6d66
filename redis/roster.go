package redis

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/interlock-mcp/interlock/roster"
)

// Roster is the gateways that share this Redis, as [roster.Store]: one
// hash under the prefix, a field per gateway holding its announcement.
type Roster struct {
	client *goredis.Client
	prefix string
}

var _ roster.Store = (*Roster)(nil)

// Roster returns the gateways that share the store.
func (t *Tokens) Roster() *Roster { return &Roster{client: t.client, prefix: t.prefix} }

func (s *Roster) key() string { return s.prefix + "gateways" }

// announceScript keeps the time a gateway was first announced: it takes
// the stored announcement's since, if any, into the new one.
var announceScript = goredis.NewScript(`
local old = redis.call('HGET', KEYS[1], ARGV[1])
local new = cjson.decode(ARGV[2])
if old then
	local was = cjson.decode(old)
	if was.since then new.since = was.since end
end
redis.call('HSET', KEYS[1], ARGV[1], cjson.encode(new))
return 1
`)

// Announce implements [roster.Store].
func (s *Roster) Announce(ctx context.Context, g roster.Gateway) error {
	now := time.Now()
	g = g.SeenAt(now)
	body, err := json.Marshal(g)
	if err != nil {
		return fmt.Errorf("redis store: announcing gateway %s: %w", g.ID, err)
	}
	if err := announceScript.Run(ctx, s.client, []string{s.key()}, g.ID, body).Err(); err != nil {
		return fmt.Errorf("redis store: announcing gateway %s: %w", g.ID, err)
	}
	// Gateways killed without departing age out.
	all, err := s.all(ctx)
	if err != nil {
		return fmt.Errorf("redis store: announcing gateway %s: %w", g.ID, err)
	}
	var stale []string
	for _, o := range all {
		if now.Sub(o.Seen) > roster.Forget {
			stale = append(stale, o.ID)
		}
	}
	if len(stale) > 0 {
		if err := s.client.HDel(ctx, s.key(), stale...).Err(); err != nil {
			return fmt.Errorf("redis store: forgetting gateways: %w", err)
		}
	}
	return nil
}

// Depart implements [roster.Store].
func (s *Roster) Depart(ctx context.Context, id string) error {
	if err := s.client.HDel(ctx, s.key(), id).Err(); err != nil {
		return fmt.Errorf("redis store: gateway %s departing: %w", id, err)
	}
	return nil
}

// Gateways implements [roster.Store].
func (s *Roster) Gateways(ctx context.Context, within time.Duration) ([]roster.Gateway, error) {
	all, err := s.all(ctx)
	if err != nil {
		return nil, fmt.Errorf("redis store: listing gateways: %w", err)
	}
	since := time.Now().Add(-within)
	out := slices.DeleteFunc(all, func(g roster.Gateway) bool { return g.Seen.Before(since) })
	slices.SortFunc(out, func(a, b roster.Gateway) int { return cmp.Or(b.Seen.Compare(a.Seen), strings.Compare(a.ID, b.ID)) })
	return out, nil
}

// all reads every announcement; one that does not decode is skipped.
func (s *Roster) all(ctx context.Context) ([]roster.Gateway, error) {
	fields, err := s.client.HGetAll(ctx, s.key()).Result()
	if err != nil && !errors.Is(err, goredis.Nil) {
		return nil, err
	}
	out := make([]roster.Gateway, 0, len(fields))
	for _, body := range fields {
		var g roster.Gateway
		if json.Unmarshal([]byte(body), &g) == nil {
			out = append(out, g)
		}
	}
	return out, nil
}
