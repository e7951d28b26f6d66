package redis_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/interlock-mcp/interlock"
	"github.com/interlock-mcp/interlock/approval"
	"github.com/interlock-mcp/interlock/approval/approvaltest"
	"github.com/interlock-mcp/interlock/redis"
	"github.com/interlock-mcp/interlock/seal"
)

// The real Redis server CI runs; each test writes under its own prefix.
const redisURL = "redis://127.0.0.1:6379/0"

func store(t testing.TB) *redis.Tokens {
	t.Helper()
	prefix := fmt.Sprintf("interlock-test:%s:%d:", t.Name(), time.Now().UnixNano())
	s, err := redis.Open(context.Background(), redisURL, prefix)
	if err != nil {
		t.Fatalf("Redis must be running at %s: %v", redisURL, err)
	}
	t.Cleanup(func() {
		opts, _ := goredis.ParseURL(redisURL)
		c := goredis.NewClient(opts)
		defer c.Close()
		keys, _ := c.Keys(context.Background(), prefix+"*").Result()
		if len(keys) > 0 {
			c.Del(context.Background(), keys...)
		}
		s.Close()
	})
	return s
}

func TestTokens(t *testing.T) {
	ctx := context.Background()
	tests := []struct {
		name string
		run  func(s *redis.Tokens) (bool, error)
		want bool
	}{
		{"issued token consumes", func(s *redis.Tokens) (bool, error) {
			s.Issue(ctx, "b", "n1", time.Minute)
			return s.Consume(ctx, "b", "n1")
		}, true},
		{"second consume fails", func(s *redis.Tokens) (bool, error) {
			s.Issue(ctx, "b", "n1", time.Minute)
			s.Consume(ctx, "b", "n1")
			return s.Consume(ctx, "b", "n1")
		}, false},
		{"superseded nonce fails", func(s *redis.Tokens) (bool, error) {
			s.Issue(ctx, "b", "n1", time.Minute)
			s.Issue(ctx, "b", "n2", time.Minute)
			return s.Consume(ctx, "b", "n1")
		}, false},
		{"a failed consume leaves the live token", func(s *redis.Tokens) (bool, error) {
			s.Issue(ctx, "b", "n2", time.Minute)
			s.Consume(ctx, "b", "n1")
			return s.Consume(ctx, "b", "n2")
		}, true},
		{"other binding", func(s *redis.Tokens) (bool, error) {
			s.Issue(ctx, "b", "n1", time.Minute)
			return s.Consume(ctx, "c", "n1")
		}, false},
		{"expired by Redis", func(s *redis.Tokens) (bool, error) {
			s.Issue(ctx, "b", "n1", 50*time.Millisecond)
			time.Sleep(150 * time.Millisecond)
			return s.Consume(ctx, "b", "n1")
		}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := tt.run(store(t))
			if err != nil {
				t.Fatal(err)
			}
			if got != tt.want {
				t.Errorf("Consume = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestOpenUnreachable(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if _, err := redis.Open(ctx, "redis://127.0.0.1:1/0", "x:"); err == nil || !strings.Contains(err.Error(), "cannot reach") {
		t.Errorf("Open = %v", err)
	}
}

// TestExactlyOnceAcrossReplicas issues a token on one gate and redeems it
// 1,000 times at once on two gates that share Redis and the sealing key.
func TestExactlyOnceAcrossReplicas(t *testing.T) {
	sealer, err := seal.New([]byte(strings.Repeat("s", seal.MinKeyLength)))
	if err != nil {
		t.Fatal(err)
	}
	tokens := store(t)
	newReplica := func() *interlock.Gate {
		g, err := interlock.NewGate(interlock.ByAnnotations{Mode: interlock.ModeToken}, &interlock.GateOptions{
			Getenv: func(k string) string { return map[string]string{"MCP_DRY_RUN": "false"}[k] },
			Logger: slog.New(slog.DiscardHandler), Sealer: sealer, Tokens: tokens,
		})
		if err != nil {
			t.Fatal(err)
		}
		return g
	}
	replicas := []*interlock.Gate{newReplica(), newReplica()}
	tool, _ := interlock.NewTool("refund_invoice", "", interlock.HintsOf(nil), nil)
	id := interlock.Identity{Principal: "alice", Tenant: "acme"}
	var runs atomic.Int64
	call := func(g *interlock.Gate, args string) *mcp.CallToolResult {
		return g.Call(context.Background(), tool, id, json.RawMessage(args), func(context.Context, json.RawMessage) (*mcp.CallToolResult, error) {
			runs.Add(1)
			return &mcp.CallToolResult{Content: []mcp.Content{}}, nil
		})
	}
	res := call(replicas[0], `{"invoice_id":"inv_1003","amount":5}`)
	var body interlock.Body
	b, _ := json.Marshal(res.StructuredContent)
	json.Unmarshal(b, &body)
	if body.Code != interlock.CodeConfirmationRequired {
		t.Fatalf("describe: %+v", body)
	}
	redeem := fmt.Sprintf(`{"invoice_id":"inv_1003","amount":5,"__confirm_token":%q}`, body.ConfirmToken)

	var wg sync.WaitGroup
	var invalid atomic.Int64
	start := make(chan struct{})
	for i := range 1000 {
		wg.Go(func() {
			<-start
			res := call(replicas[i%2], redeem)
			var body interlock.Body
			b, _ := json.Marshal(res.StructuredContent)
			json.Unmarshal(b, &body)
			if body.Code == interlock.CodeConsentTokenInvalid {
				invalid.Add(1)
			}
		})
	}
	close(start)
	wg.Wait()
	if runs.Load() != 1 || invalid.Load() != 999 {
		t.Errorf("runs %d, CONSENT_TOKEN_INVALID %d; want 1 and 999", runs.Load(), invalid.Load())
	}
}

// BenchmarkConsume measures issue-and-consume pairs per second in Redis
// and in memory.
func BenchmarkConsume(b *testing.B) {
	ctx := context.Background()
	stores := map[string]interlock.TokenStore{"memory": interlock.NewMemoryTokens(), "redis": store(b)}
	for _, name := range []string{"memory", "redis"} {
		s := stores[name]
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				binding := fmt.Sprintf("b%d", i%64)
				i++
				if err := s.Issue(ctx, binding, "n", time.Minute); err != nil {
					b.Fatal(err)
				}
				if ok, err := s.Consume(ctx, binding, "n"); err != nil || !ok {
					b.Fatal("consume failed", err)
				}
			}
		})
	}
}

// BenchmarkConsumeParallel is BenchmarkConsume from several goroutines at
// once, as a busy gateway consumes.
func BenchmarkConsumeParallel(b *testing.B) {
	ctx := context.Background()
	stores := map[string]interlock.TokenStore{"memory": interlock.NewMemoryTokens(), "redis": store(b)}
	for _, name := range []string{"memory", "redis"} {
		s := stores[name]
		b.Run(name, func(b *testing.B) {
			var n atomic.Int64
			b.SetParallelism(8)
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					binding := fmt.Sprintf("p%d", n.Add(1))
					if err := s.Issue(ctx, binding, "n", time.Minute); err != nil {
						b.Error(err)
						return
					}
					if ok, err := s.Consume(ctx, binding, "n"); err != nil || !ok {
						b.Error("consume failed", err)
						return
					}
				}
			})
		})
	}
}

// TestApprovalsConformance runs the approval store's rules against two
// handles on one Redis, as two gateways would share it.
func TestApprovalsConformance(t *testing.T) {
	approvaltest.Run(t, func(t *testing.T) (approval.Store, approval.Store) {
		s := store(t)
		other, err := redis.Open(context.Background(), redisURL, s.Prefix())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { other.Close() })
		return s.Approvals(), other.Approvals()
	})
}

// TestGrantsConformance runs the grant store's rules against two handles
// on one Redis.
func TestGrantsConformance(t *testing.T) {
	approvaltest.RunGrants(t, func(t *testing.T) (approval.GrantStore, approval.GrantStore) {
		s := store(t)
		other, err := redis.Open(context.Background(), redisURL, s.Prefix())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { other.Close() })
		return s.Grants(), other.Grants()
	})
}

// TestApprovedKeptUntilItsDeadline checks that Redis keeps an approved
// approval and its binding at least until its deadline to run, which may
// be long after the wait for a decision ended.
func TestApprovedKeptUntilItsDeadline(t *testing.T) {
	ctx := context.Background()
	s := store(t)
	approvals := s.Approvals()
	now := time.Now()
	a := &approval.Approval{ID: "apr_keep", Key: "kkeep", Tenant: "acme", Principal: "alice", Tool: "refund_invoice",
		Approvers: []string{"bob"}, Quorum: 1, CreatedAt: now, ExpiresAt: now.Add(time.Minute), RunWithin: 3 * time.Hour}
	if _, err := approvals.Request(ctx, a); err != nil {
		t.Fatal(err)
	}
	approved, err := approvals.Decide(ctx, a.ID, approval.Vote{Principal: "bob", Verdict: approval.Approve, At: now})
	if err != nil {
		t.Fatal(err)
	}
	opts, _ := goredis.ParseURL(redisURL)
	c := goredis.NewClient(opts)
	defer c.Close()
	for _, key := range []string{"approval:apr_keep", "approval-key:kkeep"} {
		ttl, err := c.PTTL(ctx, s.Prefix()+key).Result()
		if err != nil || ttl < time.Until(approved.RunBy) {
			t.Errorf("%s is kept %v (%v), less than the %v until its deadline to run", key, ttl, err, time.Until(approved.RunBy).Round(time.Second))
		}
	}
}

// TestGrantUsesAcrossProcesses has two gateway processes use one grant in
// one Redis at once; between them they use it exactly its number of uses.
func TestGrantUsesAcrossProcesses(t *testing.T) {
	s := store(t)
	approvaltest.UsesAcrossProcesses(t, s.Grants(), s.Prefix())
}

// TestHelperProcess is a gateway process of TestGrantUsesAcrossProcesses,
// using the grants under the prefix it is given; run as a test it does
// nothing.
func TestHelperProcess(t *testing.T) {
	approvaltest.HelperProcess(t, func(t *testing.T, prefix string) approval.GrantStore {
		s, err := redis.Open(context.Background(), redisURL, prefix)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s.Grants()
	})
}
