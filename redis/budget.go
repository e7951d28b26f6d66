package redis

import (
	"context"
	"crypto/rand"
	"fmt"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/interlock-mcp/interlock"
)

// budgetRoom keeps, under KEYS[1], a sorted set of the calls counted in
// the budget's sliding window, scored by when they ran in milliseconds of
// the Redis server's clock (one clock for every gateway). It drops the
// calls that left the window, then answers {1, 0} when there is room, and
// counts one call (member ARGV[3]) if ARGV[4] is "1"; {0, wait in ms}
// when there is none. ARGV[1] is the limit, ARGV[2] the window in ms. A
// script runs alone, so check and count are one step on every replica.
var budgetRoom = goredis.NewScript(`
local t = redis.call("TIME")
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local limit, window = tonumber(ARGV[1]), tonumber(ARGV[2])
redis.call("ZREMRANGEBYSCORE", KEYS[1], "-inf", now - window)
local n = redis.call("ZCARD", KEYS[1])
if n < limit then
  if ARGV[4] == "1" then
    redis.call("ZADD", KEYS[1], now, ARGV[3])
    redis.call("PEXPIRE", KEYS[1], window)
  end
  return {1, 0}
end
local oldest = redis.call("ZRANGE", KEYS[1], n - limit, n - limit, "WITHSCORES")
return {0, tonumber(oldest[2]) + window - now}
`)

// Budgets is an [interlock.BudgetStore] in Redis, shared by every gateway
// that uses the same server and prefix: a sliding window per key, checked
// and counted by one script.
type Budgets struct {
	client *goredis.Client
	prefix string
}

var _ interlock.BudgetStore = (*Budgets)(nil)

// Budgets returns the budget store that shares the token store's
// connection and prefix.
func (t *Tokens) Budgets() *Budgets { return &Budgets{client: t.client, prefix: t.prefix} }

func (b *Budgets) key(key string) string { return b.prefix + "budget:" + key }

// room runs the script; take counts the call when there is room.
func (b *Budgets) room(ctx context.Context, key string, limit int, window time.Duration, take bool) (bool, time.Duration, error) {
	flag := "0"
	if take {
		flag = "1"
	}
	out, err := budgetRoom.Run(ctx, b.client, []string{b.key(key)}, limit, window.Milliseconds(), rand.Text(), flag).Int64Slice()
	if err != nil {
		return false, 0, fmt.Errorf("redis store: budget %s: %w", key, err)
	}
	if len(out) != 2 {
		return false, 0, fmt.Errorf("redis store: budget %s: unexpected answer %v", key, out)
	}
	if out[0] == 1 {
		return true, 0, nil
	}
	// The oldest call may leave the window this very millisecond; that is
	// still a wait.
	return false, max(time.Duration(out[1])*time.Millisecond, time.Millisecond), nil
}

// Peek implements [interlock.BudgetStore].
func (b *Budgets) Peek(ctx context.Context, key string, limit int, window time.Duration) (time.Duration, error) {
	_, wait, err := b.room(ctx, key, limit, window, false)
	return wait, err
}

// Take implements [interlock.BudgetStore].
func (b *Budgets) Take(ctx context.Context, key string, limit int, window time.Duration) (bool, time.Duration, error) {
	return b.room(ctx, key, limit, window, true)
}
