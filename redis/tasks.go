package redis

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/interlock-mcp/interlock/task"
)

// Tasks is a [task.Store] in Redis, so that any gateway sharing the
// server answers for a task another made.
//
// Each task is a hash under task:ID: its stored form ([task.Encode]) as
// body, its version, and when it expires, in Unix milliseconds, which is
// also when Redis drops the key. The sorted set tasks-of:TENANT/PRINCIPAL
// lists its owner's task ids by creation, and lives as long as the last
// of them. Creates and updates are Lua scripts, which Redis runs whole,
// one at a time, so of updates from one version exactly one lands,
// whichever gateways send them. Reads check the expiry too: by the
// gateway's clock, as every other store's reads do.
type Tasks struct {
	client *goredis.Client
	prefix string
}

var _ task.Store = (*Tasks)(nil)

// Tasks returns the task store that shares the token store's connection
// and prefix.
func (t *Tokens) Tasks() *Tasks { return &Tasks{client: t.client, prefix: t.prefix} }

func (s *Tasks) key(id string) string { return s.prefix + "task:" + id }

// ownerKey is the key of the index of tenant and principal's tasks; each
// name is escaped, so no two owners share one.
func (s *Tasks) ownerKey(tenant, principal string) string {
	return s.prefix + "tasks-of:" + url.PathEscape(tenant) + "/" + url.PathEscape(principal)
}

// writeTask is the end of the scripts that write a task: KEYS[1] is the
// task, KEYS[2] its owner's index; ARGV[1] is now and ARGV[2] when the
// task expires, in Unix milliseconds, ARGV[3] its body, ARGV[4] its
// version, ARGV[5] when it was made, in Unix milliseconds, and ARGV[6]
// its id. The index is kept until the last of its tasks expires.
const writeTask = `
redis.call("HSET", KEYS[1], "body", ARGV[3], "version", ARGV[4], "expires", ARGV[2])
redis.call("PEXPIREAT", KEYS[1], ARGV[2])
redis.call("ZADD", KEYS[2], ARGV[5], ARGV[6])
if redis.call("PTTL", KEYS[2]) < tonumber(ARGV[2]) - tonumber(ARGV[1]) then
  redis.call("PEXPIREAT", KEYS[2], ARGV[2])
end
return 1
`

// createTask writes a task unless a live one has its id; 1 when it did.
var createTask = goredis.NewScript(`
local expires = redis.call("HGET", KEYS[1], "expires")
if expires and tonumber(expires) > tonumber(ARGV[1]) then
  return 0
end
redis.call("DEL", KEYS[1])
` + writeTask)

// updateTask writes a task if the stored one is live and at version
// ARGV[7]: 1 when it did, 0 when it is at another version, -1 when it is
// gone.
var updateTask = goredis.NewScript(`
local stored = redis.call("HMGET", KEYS[1], "version", "expires")
if not stored[1] or tonumber(stored[2]) <= tonumber(ARGV[1]) then
  return -1
end
if stored[1] ~= ARGV[7] then
  return 0
end
` + writeTask)

// write runs script on t as version, with more arguments after those of
// writeTask, and returns what it answered.
func (s *Tasks) write(ctx context.Context, script *goredis.Script, t *task.Task, version int64, more ...any) (int, error) {
	next := *t
	next.Version = version
	body, err := task.Encode(&next)
	if err != nil {
		return 0, fmt.Errorf("redis store: %w", err)
	}
	args := append([]any{time.Now().UnixMilli(), t.ExpiresAt.UnixMilli(), body, version, t.CreatedAt.UnixMilli(), t.ID}, more...)
	n, err := script.Run(ctx, s.client, []string{s.key(t.ID), s.ownerKey(t.Tenant, t.Principal)}, args...).Int()
	if err != nil {
		return 0, fmt.Errorf("redis store: writing task %s: %w", t.ID, err)
	}
	return n, nil
}

// Create implements [task.Store].
func (s *Tasks) Create(ctx context.Context, t *task.Task) error {
	n, err := s.write(ctx, createTask, t, 1)
	if err != nil {
		return err
	}
	if n == 0 {
		return fmt.Errorf("redis store: task %s: %w", t.ID, task.ErrExists)
	}
	t.Version = 1
	return nil
}

// Get implements [task.Store].
func (s *Tasks) Get(ctx context.Context, id string) (*task.Task, error) {
	body, err := s.client.HGet(ctx, s.key(id), "body").Bytes()
	return s.live(id, body, err, time.Now())
}

// live reads the task id from the body a read of it returned with err;
// task.ErrUnknown when there was none, or it expired at now.
func (s *Tasks) live(id string, body []byte, err error, now time.Time) (*task.Task, error) {
	if errors.Is(err, goredis.Nil) {
		return nil, fmt.Errorf("redis store: task %s: %w", id, task.ErrUnknown)
	}
	if err != nil {
		return nil, fmt.Errorf("redis store: reading task %s: %w", id, err)
	}
	t, err := task.Decode(body)
	if err != nil {
		return nil, fmt.Errorf("redis store: task %s: %w", id, err)
	}
	if !t.Live(now) {
		return nil, fmt.Errorf("redis store: task %s: %w", id, task.ErrUnknown)
	}
	return t, nil
}

// Update implements [task.Store].
func (s *Tasks) Update(ctx context.Context, t *task.Task) (bool, error) {
	n, err := s.write(ctx, updateTask, t, t.Version+1, t.Version)
	switch {
	case err != nil:
		return false, err
	case n < 0:
		return false, fmt.Errorf("redis store: task %s: %w", t.ID, task.ErrUnknown)
	case n == 0:
		return false, nil
	}
	t.Version++
	return true, nil
}

// List implements [task.Store]. Ids of tasks that are gone, or whose
// owner an update changed, leave the index as it is read.
func (s *Tasks) List(ctx context.Context, tenant, principal string) ([]*task.Task, error) {
	index := s.ownerKey(tenant, principal)
	ids, err := s.client.ZRange(ctx, index, 0, -1).Result()
	if err != nil {
		return nil, fmt.Errorf("redis store: listing tasks: %w", err)
	}
	reads := make([]*goredis.StringCmd, len(ids))
	_, err = s.client.Pipelined(ctx, func(p goredis.Pipeliner) error {
		for i, id := range ids {
			reads[i] = p.HGet(ctx, s.key(id), "body")
		}
		return nil
	})
	if err != nil && !errors.Is(err, goredis.Nil) {
		return nil, fmt.Errorf("redis store: listing tasks: %w", err)
	}
	now := time.Now()
	var out []*task.Task
	var stale []any
	for i, id := range ids {
		body, err := reads[i].Bytes()
		if errors.Is(err, goredis.Nil) {
			stale = append(stale, id)
			continue
		}
		t, err := s.live(id, body, err, now)
		switch {
		case errors.Is(err, task.ErrUnknown):
			// Expired by this gateway's clock: Redis drops it by its own.
		case err != nil:
			return nil, err
		case t.OwnedBy(tenant, principal):
			out = append(out, t)
		default:
			// An update gave it another owner.
			stale = append(stale, id)
		}
	}
	if len(stale) > 0 {
		if err := s.client.ZRem(ctx, index, stale...).Err(); err != nil {
			return nil, fmt.Errorf("redis store: dropping gone tasks from %s: %w", index, err)
		}
	}
	// The index's scores are milliseconds; the order is the tasks' own.
	slices.SortFunc(out, task.Newest)
	return out, nil
}
