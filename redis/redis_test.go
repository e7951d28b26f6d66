package redis_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/interlock-mcp/interlock"
	"github.com/interlock-mcp/interlock/approval"
	"github.com/interlock-mcp/interlock/approval/approvaltest"
	"github.com/interlock-mcp/interlock/consolestate"
	"github.com/interlock-mcp/interlock/consolestate/consolestatetest"
	"github.com/interlock-mcp/interlock/redis"
	"github.com/interlock-mcp/interlock/roster"
	"github.com/interlock-mcp/interlock/roster/rostertest"
	"github.com/interlock-mcp/interlock/seal"
	"github.com/interlock-mcp/interlock/storetest"
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
		c := client()
		defer c.Close()
		keys, _ := c.Keys(context.Background(), prefix+"*").Result()
		if len(keys) > 0 {
			c.Del(context.Background(), keys...)
		}
		s.Close()
	})
	return s
}

// client is a client of the server itself, for reading what the stores
// wrote under their prefix.
func client() *goredis.Client {
	opts, _ := goredis.ParseURL(redisURL)
	return goredis.NewClient(opts)
}

// openAt opens the keys under prefix, which store(t) or another process
// made, as one more gateway sharing the server would.
func openAt(t *testing.T, prefix string) *redis.Tokens {
	s, err := redis.Open(context.Background(), redisURL, prefix)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// twoHandles opens a second connection on the fresh store of store(t),
// as a second gateway sharing the server would.
func twoHandles(t *testing.T) (*redis.Tokens, *redis.Tokens) {
	s := store(t)
	return s, openAt(t, s.Prefix())
}

// both opens two handles on one fresh store and returns the view of of
// each: what a conformance suite opens.
func both[S any](of func(*redis.Tokens) S) func(*testing.T) (S, S) {
	return storetest.Both(twoHandles, of)
}

// Redis expires tokens and counts budgets by its own clock, which
// synctest cannot fake, so the suite checks their timing on real time.

func TestTokensConformance(t *testing.T) {
	storetest.RunTokens(t, both(func(s *redis.Tokens) interlock.TokenStore { return s }), storetest.Options{})
}

func TestBudgetsConformance(t *testing.T) {
	storetest.RunBudgets(t, both(func(s *redis.Tokens) interlock.BudgetStore { return s.Budgets() }), storetest.Options{})
}

// TestKeyLayout checks where the stores keep what they count: a token's
// nonce under token:BINDING, expiring with it; a budget's calls in a
// sorted set under budget:KEY, expiring with its window; a peek writes
// nothing.
func TestKeyLayout(t *testing.T) {
	ctx := context.Background()
	s := store(t)
	if err := s.Issue(ctx, "b", "n1", time.Minute); err != nil {
		t.Fatal(err)
	}
	if ok, _, _, err := s.Budgets().Take(ctx, one("k", 2, time.Hour)); !ok || err != nil {
		t.Fatal(ok, err)
	}
	if ok, _, _, err := s.Budgets().Peek(ctx, one("p", 2, time.Hour)); !ok || err != nil {
		t.Fatal(ok, err)
	}
	c := client()
	defer c.Close()
	if nonce, err := c.Get(ctx, s.Prefix()+"token:b").Result(); nonce != "n1" || err != nil {
		t.Errorf("token:b holds %q, %v; want the nonce", nonce, err)
	}
	if n, err := c.ZCard(ctx, s.Prefix()+"budget:k").Result(); n != 1 || err != nil {
		t.Errorf("budget:k holds %d calls, %v; want 1", n, err)
	}
	for key, ttl := range map[string]time.Duration{"token:b": time.Minute, "budget:k": time.Hour} {
		if got, err := c.PTTL(ctx, s.Prefix()+key).Result(); got <= 0 || got > ttl || err != nil {
			t.Errorf("%s expires in %v, %v; want within %v", key, got, err, ttl)
		}
	}
	if n, err := c.Exists(ctx, s.Prefix()+"budget:p").Result(); n != 0 || err != nil {
		t.Errorf("a peek wrote budget:p: %d %v", n, err)
	}
	// A caller's approvals are listed under its tenant and principal,
	// and the list goes once the caller asks for none in two days.
	now := time.Now()
	if _, err := s.Approvals().Request(ctx, &approval.Approval{ID: "apr_l", Key: "kl", Tenant: "acme", Principal: "alice",
		Tool: "refund_invoice", Approvers: []string{"bob"}, Quorum: 1, CreatedAt: now, ExpiresAt: now.Add(time.Minute)}); err != nil {
		t.Fatal(err)
	}
	list := s.Prefix() + `approvals-of:["acme","alice"]`
	if ids, err := c.ZRange(ctx, list, 0, -1).Result(); len(ids) != 1 || ids[0] != "apr_l" || err != nil {
		t.Errorf("%s holds %v, %v", list, ids, err)
	}
	if ttl, err := c.PTTL(ctx, list).Result(); ttl <= 0 || ttl > 48*time.Hour || err != nil {
		t.Errorf("%s expires in %v, %v; want within two days", list, ttl, err)
	}
	// Once decided, the approval leaves the lists the next reading finds
	// it in.
	if _, err := s.Approvals().Decide(ctx, "apr_l", approval.Vote{Principal: "bob", Verdict: approval.Deny, At: now}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Approvals().Waiting(ctx, "acme", "alice"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Approvals().List(ctx); err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{list, s.Prefix() + "approvals"} {
		if n, err := c.ZCard(ctx, key).Result(); n != 0 || err != nil {
			t.Errorf("%s holds %d ids of approvals decided, %v", key, n, err)
		}
	}
}

func TestOpenUnreachable(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if _, err := redis.Open(ctx, "redis://127.0.0.1:1/0", "x:"); err == nil || !strings.Contains(err.Error(), "cannot reach") {
		t.Errorf("Open = %v", err)
	}
}

// BenchmarkConsume measures issue-and-consume pairs per second in Redis
// and in memory, one after another and from several goroutines at once.
func BenchmarkConsume(b *testing.B) {
	stores := map[string]interlock.TokenStore{"memory": seal.NewMemoryTokens(), "redis": store(b)}
	for _, name := range []string{"memory", "redis"} {
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			storetest.BenchIssueConsume(b, stores[name])
		})
		b.Run(name+"/parallel", func(b *testing.B) { storetest.BenchIssueConsumeParallel(b, 8, stores[name]) })
	}
}

// BenchmarkListApprovals lists 200 pending approvals, as a gateway does on
// a call that may ask for a new one (its caller's max_pending).
func BenchmarkListApprovals(b *testing.B) {
	ctx := context.Background()
	approvals := store(b).Approvals()
	now := time.Now()
	for i := range 200 {
		a := &approval.Approval{ID: fmt.Sprintf("apr_%d", i), Key: fmt.Sprintf("k%d", i), Tenant: "acme", Principal: "alice",
			Tool: "refund_invoice", Approvers: []string{"bob"}, Quorum: 1, CreatedAt: now, ExpiresAt: now.Add(time.Hour)}
		if _, err := approvals.Request(ctx, a); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportAllocs()
	for b.Loop() {
		if pending, err := approvals.List(ctx); err != nil || len(pending) != 200 {
			b.Fatalf("List: %d, %v", len(pending), err)
		}
	}
}

// TestApprovalsConformance runs the approval store's rules against two
// handles on one Redis, as two gateways would share it.
func TestApprovalsConformance(t *testing.T) {
	approvaltest.Run(t, both(func(s *redis.Tokens) approval.Store { return s.Approvals() }))
}

// TestGrantsConformance runs the grant store's rules against two handles
// on one Redis.
func TestGrantsConformance(t *testing.T) {
	approvaltest.RunGrants(t, both(func(s *redis.Tokens) approval.GrantStore { return s.Grants() }))
}

// TestRosterConformance runs the roster's rules against two handles on
// one Redis.
func TestRosterConformance(t *testing.T) {
	rostertest.Run(t, both(func(s *redis.Tokens) roster.Store { return s.Roster() }))
}

// TestCountsApprovalsOfEarlierGateways reads approvals as a gateway
// before the lists by caller wrote them (the approval, its binding, its id
// in the list of all): a gateway that opens the store counts them among
// their callers' waiting approvals, and each tenant's alone.
func TestCountsApprovalsOfEarlierGateways(t *testing.T) {
	ctx := context.Background()
	s := store(t)
	c := client()
	defer c.Close()
	now := time.Now()
	for i, tenant := range []string{"acme", "globex", "acme"} {
		a := approval.Approval{ID: fmt.Sprintf("apr_old%d", i), Key: fmt.Sprintf("k%d", i), Tenant: tenant, Principal: "alice",
			Tool: "refund_invoice", Approvers: []string{"bob"}, Quorum: 1, CreatedAt: now.Add(time.Duration(i) * time.Second),
			ExpiresAt: now.Add(time.Hour)}
		if i == 2 {
			a.ExpiresAt = now.Add(-time.Second) // ended: no longer waiting
		}
		b, err := json.Marshal(a)
		if err != nil {
			t.Fatal(err)
		}
		if err := c.Set(ctx, s.Prefix()+"approval:"+a.ID, b, time.Hour).Err(); err != nil {
			t.Fatal(err)
		}
		c.Set(ctx, s.Prefix()+"approval-key:"+a.Key, a.ID, time.Hour)
		c.ZAdd(ctx, s.Prefix()+"approvals", goredis.Z{Score: float64(a.CreatedAt.UnixMilli()), Member: a.ID})
	}
	// Both gateways, the one that was running and the one that starts, see
	// them.
	for name, h := range map[string]*redis.Tokens{"running": s, "started": openAt(t, s.Prefix())} {
		for tenant, want := range map[string]string{"acme": "apr_old0", "globex": "apr_old1"} {
			got, err := h.Approvals().Waiting(ctx, tenant, "alice")
			if err != nil || len(got) != 1 || got[0].ID != want {
				t.Errorf("%s gateway: alice of %s waits on %v (%v); want %s alone", name, tenant, ids(got), err, want)
			}
		}
	}
}

// ids are the ids of all, in their order.
func ids(all []*approval.Approval) []string {
	var out []string
	for _, a := range all {
		out = append(out, a.ID)
	}
	return out
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
	c := client()
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
		return openAt(t, prefix).Grants()
	})
}

// TestTokensAcrossProcesses has two gateway processes race to consume
// tokens in one Redis; each is consumed exactly once.
func TestTokensAcrossProcesses(t *testing.T) {
	s := store(t)
	storetest.TokensAcrossProcesses(t, s, s.Prefix())
}

// TestBudgetsAcrossProcesses has two gateway processes take under one
// budget in one Redis at once; between them they take exactly its limit.
func TestBudgetsAcrossProcesses(t *testing.T) {
	s := store(t)
	storetest.BudgetsAcrossProcesses(t, s.Budgets(), s.Prefix())
}

// TestStoreHelperProcess is a gateway process of the tests across
// processes, using the stores under the prefix it is given; run as a
// test it does nothing.
func TestStoreHelperProcess(t *testing.T) {
	storetest.HelperProcess(t, func(t *testing.T, prefix string) (interlock.TokenStore, interlock.BudgetStore) {
		s := openAt(t, prefix)
		return s, s.Budgets()
	})
}

func TestConsoleConformance(t *testing.T) {
	consolestatetest.Run(t, both(func(s *redis.Tokens) consolestate.Store { return s.Console() }))
}

func TestConsoleSignal(t *testing.T) {
	consolestatetest.RunSignal(t, both(func(s *redis.Tokens) consolestate.Signal { return s.Console() }))
}

// TestConsoleAcrossProcesses: two processes on one Redis race for a
// link, a challenge and a counter; one wins each time.
func TestConsoleAcrossProcesses(t *testing.T) {
	s := store(t)
	consolestatetest.AcrossProcesses(t, s.Console(), s.Prefix())
}

// TestConsoleHelperProcess is a gateway process of
// TestConsoleAcrossProcesses, on the keys of the prefix it is given; run
// as a test it does nothing.
func TestConsoleHelperProcess(t *testing.T) {
	consolestatetest.HelperProcess(t, func(t *testing.T, prefix string) consolestate.Store {
		return openAt(t, prefix).Console()
	})
}

func BenchmarkWaiting(b *testing.B) { approvaltest.BenchmarkWaiting(b, store(b).Approvals()) }
