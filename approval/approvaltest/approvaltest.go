// Package approvaltest checks that an approval store keeps the rules of
// mode approval: one live approval per binding, distinct approvers, one
// denial ends it, and an approved call is consumed exactly once, however
// many gateways race for it.
package approvaltest

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/interlock-mcp/interlock/approval"
)

// Open returns two handles on one fresh, empty store (two gateways
// sharing it); they may be the same value for a store of one process.
type Open func(t *testing.T) (approval.Store, approval.Store)

func newApproval(id, key string, quorum int, ttl time.Duration) *approval.Approval {
	now := time.Now()
	return &approval.Approval{ID: id, Key: key, Tenant: "acme", Principal: "alice", Tool: "refund_invoice",
		Args: map[string]any{"invoice_id": "inv_1001", "amount": 5000.0}, Summary: "Refund 5,000.00.",
		Approvers: []string{"bob", "group:finance"}, Quorum: quorum, CreatedAt: now, ExpiresAt: now.Add(ttl)}
}

// Run runs the conformance tests.
func Run(t *testing.T, open Open) {
	ctx := context.Background()
	vote := func(who string, v approval.Verdict) approval.Vote {
		return approval.Vote{Principal: who, Verdict: v, At: time.Now()}
	}

	t.Run("one live approval per binding", func(t *testing.T) {
		s, other := open(t)
		a, err := s.Request(ctx, newApproval("apr_1", "k1", 1, time.Minute))
		if err != nil || a.ID != "apr_1" {
			t.Fatalf("first request: %v %v", a, err)
		}
		if b, err := other.Request(ctx, newApproval("apr_2", "k1", 1, time.Minute)); err != nil || b.ID != "apr_1" || b.Summary != "Refund 5,000.00." {
			t.Errorf("the same binding again: %+v %v", b, err)
		}
		if c, err := s.Request(ctx, newApproval("apr_3", "k2", 1, time.Minute)); err != nil || c.ID != "apr_3" {
			t.Errorf("another binding: %+v %v", c, err)
		}
		list, err := other.List(ctx)
		if err != nil || len(list) != 2 {
			t.Errorf("pending: %d %v", len(list), err)
		}
		if _, err := s.Get(ctx, "apr_missing"); !errors.Is(err, approval.ErrUnknown) {
			t.Errorf("unknown id: %v", err)
		}
	})

	t.Run("votes, quorum and denial", func(t *testing.T) {
		s, other := open(t)
		s.Request(ctx, newApproval("apr_q", "kq", 2, time.Minute))
		if a, err := s.Decide(ctx, "apr_q", vote("bob", approval.Approve)); err != nil || a.State(time.Now()) != approval.Pending {
			t.Fatalf("first vote: %+v %v", a, err)
		}
		if _, err := other.Decide(ctx, "apr_q", vote("bob", approval.Approve)); !errors.Is(err, approval.ErrAlreadyVoted) {
			t.Errorf("the same approver twice: %v", err)
		}
		a, err := other.Decide(ctx, "apr_q", vote("dave", approval.Approve))
		if err != nil || a.State(time.Now()) != approval.Approved || len(a.Approvals) != 2 {
			t.Fatalf("second vote: %+v %v", a, err)
		}
		if _, err := s.Decide(ctx, "apr_q", vote("carol", approval.Deny)); !errors.Is(err, approval.ErrAlreadyDecided) {
			t.Errorf("denying an approved approval: %v", err)
		}
		s.Request(ctx, newApproval("apr_d", "kd", 2, time.Minute))
		if a, err := s.Decide(ctx, "apr_d", vote("carol", approval.Deny)); err != nil || a.State(time.Now()) != approval.Denied {
			t.Errorf("denial: %+v %v", a, err)
		}
		if b, _ := other.Request(ctx, newApproval("apr_d2", "kd", 2, time.Minute)); b.ID != "apr_d" {
			t.Errorf("a denied approval stands for its binding: %s", b.ID)
		}
	})

	t.Run("consumed exactly once across handles", func(t *testing.T) {
		s, other := open(t)
		s.Request(ctx, newApproval("apr_c", "kc", 1, time.Minute))
		s.Decide(ctx, "apr_c", vote("bob", approval.Approve))
		won := atOnce(t, s, other, func(h approval.Store) (bool, error) { return h.Consume(ctx, "apr_c") })
		if won != 1 {
			t.Errorf("%d consumers won", won)
		}
		if b, _ := other.Request(ctx, newApproval("apr_c2", "kc", 1, time.Minute)); b.ID != "apr_c2" {
			t.Errorf("after consumption a new approval is made: %s", b.ID)
		}
	})

	t.Run("an expired approval is reported once", func(t *testing.T) {
		s, other := open(t)
		s.Request(ctx, newApproval("apr_e", "ke", 1, 50*time.Millisecond))
		time.Sleep(100 * time.Millisecond)
		a, err := other.Request(ctx, newApproval("apr_e2", "ke", 1, time.Minute))
		if err != nil || a.ID != "apr_e" || a.State(time.Now()) != approval.Expired || !a.Reported {
			t.Fatalf("first request after expiry: %+v %v", a, err)
		}
		if b, _ := s.Request(ctx, newApproval("apr_e3", "ke", 1, time.Minute)); b.ID != "apr_e3" {
			t.Errorf("the next request asks anew: %s", b.ID)
		}
		if list, _ := s.List(ctx); len(list) != 1 || list[0].ID != "apr_e3" {
			t.Errorf("pending after expiry: %v", list)
		}
	})
}

// OpenGrants returns two handles on one fresh, empty grant store.
type OpenGrants func(t *testing.T) (approval.GrantStore, approval.GrantStore)

// RunGrants checks a grant store: uses from several handles at once never
// exceed a grant's limit, and revoked, used-up or expired grants are not
// live.
func RunGrants(t *testing.T, open OpenGrants) {
	ctx := context.Background()
	s, other := open(t)
	now := time.Now()
	grant := func(id string, uses int, ttl time.Duration) *approval.StandingGrant {
		return &approval.StandingGrant{ID: id, Tool: "refund_invoice", Tenant: "acme", Principal: "alice", GrantedBy: "bob",
			CreatedAt: now, ExpiresAt: now.Add(ttl), Uses: uses}
	}
	for _, g := range []*approval.StandingGrant{grant("grt_uses", 5, time.Hour), grant("grt_gone", 5, 50*time.Millisecond), grant("grt_revoked", 5, time.Hour)} {
		if err := s.AddGrant(ctx, g); err != nil {
			t.Fatal(err)
		}
	}
	if used := atOnce(t, s, other, func(h approval.GrantStore) (bool, error) { return h.UseGrant(ctx, "grt_uses") }); used != 5 {
		t.Errorf("%d uses succeeded, want 5", used)
	}
	if r, err := other.RevokeGrant(ctx, "grt_revoked", ""); err != nil || !r.Revoked {
		t.Errorf("revoke: %+v %v", r, err)
	}
	if ok, _ := s.UseGrant(ctx, "grt_revoked"); ok {
		t.Error("a revoked grant was used")
	}
	time.Sleep(100 * time.Millisecond)
	if live, err := other.LiveGrants(ctx); err != nil || len(live) != 0 {
		t.Errorf("live after use, expiry and revocation: %v %v", live, err)
	}
	if _, err := s.Grant(ctx, "grt_none"); !errors.Is(err, approval.ErrGrantUnknown) {
		t.Errorf("unknown grant: %v", err)
	}
	if _, err := s.RevokeGrant(ctx, "grt_none", ""); !errors.Is(err, approval.ErrGrantUnknown) {
		t.Errorf("revoking an unknown grant: %v", err)
	}
}

// atOnce tries 40 times at once, alternately on two handles of one store,
// and returns how many tries succeeded.
func atOnce[S any](t *testing.T, one, other S, try func(S) (bool, error)) int64 {
	var won atomic.Int64
	var wg sync.WaitGroup
	for i := range 40 {
		h := one
		if i%2 == 1 {
			h = other
		}
		wg.Go(func() {
			ok, err := try(h)
			if err != nil {
				t.Error(err)
			}
			if ok {
				won.Add(1)
			}
		})
	}
	wg.Wait()
	return won.Load()
}
