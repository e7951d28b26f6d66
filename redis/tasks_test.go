package redis_test

import (
	"context"
	"testing"
	"time"

	"github.com/interlock-mcp/interlock/redis"
	"github.com/interlock-mcp/interlock/task"
	"github.com/interlock-mcp/interlock/task/tasktest"
)

// TestTasksConformance runs the task store's rules against two handles
// on one Redis, as two gateways would share it.
func TestTasksConformance(t *testing.T) {
	tasktest.Run(t, both(func(s *redis.Tokens) task.Store { return s.Tasks() }))
}

// TestTaskKeys checks where tasks are kept: a task under task:ID and its
// owner's index under tasks-of:TENANT/PRINCIPAL, names escaped, both
// dropped by Redis when the task expires, and kept longer when an update
// moves its expiry later.
func TestTaskKeys(t *testing.T) {
	ctx := context.Background()
	s := store(t)
	tasks := s.Tasks()
	now := time.Now()
	tk := &task.Task{ID: "tsk_keys", Tenant: "acme/eu", Principal: "alice", Tool: "refund_invoice", Status: task.Working,
		CreatedAt: now, UpdatedAt: now, ExpiresAt: now.Add(time.Hour)}
	if err := tasks.Create(ctx, tk); err != nil {
		t.Fatal(err)
	}
	c := client()
	defer c.Close()
	keys := []string{"task:tsk_keys", "tasks-of:acme%2Feu/alice"}
	kept := func(within time.Duration) {
		t.Helper()
		for _, key := range keys {
			if ttl, err := c.PTTL(ctx, s.Prefix()+key).Result(); err != nil || ttl <= within-time.Minute || ttl > within {
				t.Errorf("%s is kept %v (%v), want about %v", key, ttl, err, within)
			}
		}
	}
	kept(time.Hour)
	tk.Status, tk.ExpiresAt = task.Completed, now.Add(3*time.Hour)
	if ok, err := tasks.Update(ctx, tk); !ok || err != nil {
		t.Fatal(ok, err)
	}
	kept(3 * time.Hour)
}
