package redis

import (
	"context"
	"crypto/rand"
	"fmt"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/interlock-mcp/interlock"
	"github.com/interlock-mcp/interlock/budget"
)

// budgetRoom keeps, under each of KEYS, a sorted set of the calls counted
// in its budget's sliding window, scored by when they ran in milliseconds
// of the Redis server's clock (one clock for every gateway). ARGV[1] is
// the member of this call, ARGV[2] "1" to count it; then, for the i-th
// key, ARGV[2i+1] is its limit and ARGV[2i+2] its window in ms.
//
// It drops the calls that left each window, then answers {0, 0} when
// every key has room, counting the call under each if asked; else {i,
// wait in ms} of the key with the longest wait, counting nothing. A
// script runs alone, so the checks of every key and the counts are one
// step on every replica.
var budgetRoom = goredis.NewScript(`
local t = redis.call("TIME")
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local spent, wait = 0, 0
for i, key in ipairs(KEYS) do
  local limit, window = tonumber(ARGV[2 * i + 1]), tonumber(ARGV[2 * i + 2])
  redis.call("ZREMRANGEBYSCORE", key, "-inf", now - window)
  local n = redis.call("ZCARD", key)
  if n >= limit then
    local oldest = redis.call("ZRANGE", key, n - limit, n - limit, "WITHSCORES")
    local w = tonumber(oldest[2]) + window - now
    if spent == 0 or w > wait then
      spent, wait = i, w
    end
  end
end
if spent > 0 then
  return {spent, wait}
end
if ARGV[2] == "1" then
  for i, key in ipairs(KEYS) do
    redis.call("ZADD", key, now, ARGV[1])
    redis.call("PEXPIRE", key, ARGV[2 * i + 2])
  end
end
return {0, 0}
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

// room runs the script; take counts the call when every key has room.
func (b *Budgets) room(ctx context.Context, takes []interlock.BudgetTake, take bool) (bool, time.Duration, int, error) {
	if err := budget.CheckTakes(takes); err != nil {
		return false, 0, 0, fmt.Errorf("redis store: %w", err)
	}
	if len(takes) == 0 {
		return true, 0, 0, nil
	}
	flag := "0"
	if take {
		flag = "1"
	}
	keys := make([]string, len(takes))
	args := make([]any, 2, 2+2*len(takes))
	args[0], args[1] = rand.Text(), flag
	for i, t := range takes {
		keys[i] = b.key(t.Key)
		args = append(args, t.Limit, t.Window.Milliseconds())
	}
	out, err := budgetRoom.Run(ctx, b.client, keys, args...).Int64Slice()
	if err != nil {
		return false, 0, 0, fmt.Errorf("redis store: budgets: %w", err)
	}
	if len(out) != 2 || out[0] < 0 || out[0] > int64(len(takes)) {
		return false, 0, 0, fmt.Errorf("redis store: budgets: unexpected answer %v", out)
	}
	if out[0] == 0 {
		return true, 0, 0, nil
	}
	// The oldest call may leave the window this very millisecond; that is
	// still a wait.
	return false, max(time.Duration(out[1])*time.Millisecond, time.Millisecond), int(out[0] - 1), nil
}

// Peek implements [interlock.BudgetStore].
func (b *Budgets) Peek(ctx context.Context, takes []interlock.BudgetTake) (bool, time.Duration, int, error) {
	return b.room(ctx, takes, false)
}

// Take implements [interlock.BudgetStore].
func (b *Budgets) Take(ctx context.Context, takes []interlock.BudgetTake) (bool, time.Duration, int, error) {
	return b.room(ctx, takes, true)
}
