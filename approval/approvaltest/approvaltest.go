// Package approvaltest checks that an approval store keeps the rules of
// mode approval: one live approval per binding, distinct approvers, one
// denial ends it, an approved call runs only before its deadline and is
// consumed exactly once, and a grant is never used beyond its limit,
// however many gateways race for them.
//
// Every race is tried from two handles on one store, as two gateways
// sharing it would, so a store that serialises only within one process
// fails.
package approvaltest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/interlock-mcp/interlock/approval"
	"github.com/interlock-mcp/interlock/internal/testproc"
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

func vote(who string, v approval.Verdict) approval.Vote {
	return approval.Vote{Principal: who, Verdict: v, At: time.Now()}
}

// request stores a new approval, failing the test if the store answers
// with another.
func request(t *testing.T, s approval.Store, a *approval.Approval) {
	t.Helper()
	if got, err := s.Request(context.Background(), a); err != nil || got.ID != a.ID {
		t.Fatalf("request %s: %+v %v", a.ID, got, err)
	}
}

// decided turns the errors a vote may lose a race with into a failed try,
// so that only a store's own errors fail the test.
func decided(err error, lost ...error) (bool, error) {
	for _, e := range lost {
		if errors.Is(err, e) {
			return false, nil
		}
	}
	return err == nil, err
}

// Run runs the conformance tests.
func Run(t *testing.T, open Open) {
	ctx := context.Background()

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

	t.Run("each caller's waiting approvals", func(t *testing.T) {
		s, other := open(t)
		now := time.Now()
		of := func(id, tenant, principal string, age, ttl time.Duration) *approval.Approval {
			a := newApproval(id, "k-"+id, 1, ttl)
			a.Tenant, a.Principal, a.CreatedAt, a.ExpiresAt = tenant, principal, now.Add(-age), now.Add(-age+ttl)
			return a
		}
		// Arguments may hold any string, a NUL included, which some
		// databases' JSON refuses.
		odd := of("apr_w2", "acme", "alice", time.Second, time.Minute)
		odd.Args = map[string]any{"note": "a\x00b", "text": `\u0000`}
		for i, a := range []*approval.Approval{
			odd,
			of("apr_w1", "acme", "alice", 2*time.Second, time.Minute),
			of("apr_denied", "acme", "alice", time.Second, time.Minute),
			of("apr_expired", "acme", "alice", time.Minute, time.Second),
			// The same principal in another tenant, another principal,
			// and names that run together as the first pair's would.
			of("apr_other", "other", "alice", time.Second, time.Minute),
			of("apr_bob", "acme", "bob", time.Second, time.Minute),
			of("apr_joined", "acme:alice", "", time.Second, time.Minute),
		} {
			request(t, []approval.Store{s, other}[i%2], a)
		}
		if _, err := other.Decide(ctx, "apr_denied", vote("bob", approval.Deny)); err != nil {
			t.Fatal(err)
		}
		for _, tc := range []struct {
			tenant, principal string
			want              []string
		}{
			{"acme", "alice", []string{"apr_w1", "apr_w2"}},
			{"other", "alice", []string{"apr_other"}},
			{"acme", "bob", []string{"apr_bob"}},
			{"acme:alice", "", []string{"apr_joined"}},
			{"acme", "carol", nil},
		} {
			// Read twice through s: a store that forgets ended approvals
			// as it reads them must read the same again.
			for _, h := range []approval.Store{s, other, s} {
				got, err := h.Waiting(ctx, tc.tenant, tc.principal)
				if ids := idsOf(got); err != nil || fmt.Sprint(ids) != fmt.Sprint(tc.want) {
					t.Errorf("waiting of %s/%s: %v %v, want %v", tc.tenant, tc.principal, ids, err, tc.want)
				}
			}
		}
	})

	t.Run("two tenants' callers of one name at once", func(t *testing.T) {
		s, other := open(t)
		const each = 12
		tenants := []string{"acme", "globex"}
		testproc.AtOnce(t, 2*each, s, other, func(h approval.Store, i int) (bool, error) {
			tenant := tenants[i/2%2] // each tenant through both handles
			a := newApproval(fmt.Sprintf("apr_t%d", i), fmt.Sprintf("kt%d", i), 1, time.Minute)
			a.Tenant = tenant
			if _, err := h.Request(ctx, a); err != nil {
				return false, err
			}
			got, err := h.Waiting(ctx, tenant, "alice")
			for _, w := range got {
				if w.Tenant != tenant {
					return false, fmt.Errorf("alice of %s waits on %s of %s", tenant, w.ID, w.Tenant)
				}
			}
			return err == nil, err
		})
		for _, tenant := range tenants {
			for _, h := range []approval.Store{s, other} {
				if got, err := h.Waiting(ctx, tenant, "alice"); err != nil || len(got) != each {
					t.Errorf("alice of %s waits on %d approvals (%v); want %d", tenant, len(got), err, each)
				}
			}
		}
	})

	t.Run("racing requests share one approval", func(t *testing.T) {
		s, other := open(t)
		ids := idSet{}
		testproc.AtOnce(t, 40, s, other, func(h approval.Store, i int) (bool, error) {
			a, err := h.Request(ctx, newApproval(fmt.Sprintf("apr_r%d", i), "kr", 1, time.Minute))
			if err != nil {
				return false, err
			}
			ids.add(a.ID)
			return true, nil
		})
		if len(ids.ids) != 1 {
			t.Errorf("one binding got %d approvals: %v", len(ids.ids), ids.ids)
		}
		if list, err := s.List(ctx); err != nil || len(list) != 1 {
			t.Errorf("pending: %v %v", list, err)
		}
	})

	t.Run("votes, quorum and denial", func(t *testing.T) {
		s, other := open(t)
		request(t, s, newApproval("apr_q", "kq", 2, time.Minute))
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
		request(t, s, newApproval("apr_d", "kd", 2, time.Minute))
		if a, err := s.Decide(ctx, "apr_d", vote("carol", approval.Deny)); err != nil || a.State(time.Now()) != approval.Denied {
			t.Errorf("denial: %+v %v", a, err)
		}
		if b, _ := other.Request(ctx, newApproval("apr_d2", "kd", 2, time.Minute)); b.ID != "apr_d" {
			t.Errorf("a denied approval stands for its binding: %s", b.ID)
		}
		if _, err := s.Decide(ctx, "apr_missing", vote("bob", approval.Approve)); !errors.Is(err, approval.ErrUnknown) {
			t.Errorf("voting on an unknown approval: %v", err)
		}
	})

	t.Run("a vote with no verdict is refused", func(t *testing.T) {
		s, other := open(t)
		request(t, s, newApproval("apr_v", "kv", 1, time.Minute))
		for _, verdict := range []approval.Verdict{"", "maybe", "Approve"} {
			if a, err := other.Decide(ctx, "apr_v", vote("bob", verdict)); !errors.Is(err, approval.ErrBadVerdict) {
				t.Errorf("verdict %q: %+v %v", verdict, a, err)
			}
		}
		a, err := s.Get(ctx, "apr_v")
		if err != nil || a.State(time.Now()) != approval.Pending || len(a.Approvals) != 0 || a.Denial != nil {
			t.Errorf("after refused votes: %+v %v", a, err)
		}
	})

	t.Run("the approving vote sets the deadline to run", func(t *testing.T) {
		// Votes are stamped a second before the store sees them, so a
		// deadline counted from the store's clock shows.
		stamp := func(who string) approval.Vote {
			v := vote(who, approval.Approve)
			v.At = v.At.Add(-time.Second)
			return v
		}
		tests := []struct {
			name      string
			quorum    int
			runWithin time.Duration
			// created is how long before now the approval was asked
			// for; its timeout is created plus a minute.
			created time.Duration
		}{
			{"run_within from the vote", 1, 5 * time.Minute, 0},
			{"the timeout when run_within is zero", 1, 0, time.Hour},
			{"from the vote that reaches the quorum", 2, 5 * time.Minute, 0},
			{"the timeout from the vote that reaches the quorum", 2, 0, time.Hour},
		}
		s, other := open(t)
		for n, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				a := newApproval(fmt.Sprintf("apr_t%d", n), fmt.Sprintf("kt%d", n), tt.quorum, time.Minute)
				a.CreatedAt = a.CreatedAt.Add(-tt.created)
				a.RunWithin = tt.runWithin
				timeout := a.ExpiresAt.Sub(a.CreatedAt)
				request(t, s, a)
				var last approval.Vote
				for i := range tt.quorum {
					last = stamp(fmt.Sprintf("approver%d", i))
					got, err := []approval.Store{s, other}[i%2].Decide(ctx, a.ID, last)
					if err != nil {
						t.Fatalf("vote %d: %v", i, err)
					}
					if i < tt.quorum-1 && !got.RunBy.IsZero() {
						t.Errorf("a vote below the quorum set the deadline %v", got.RunBy)
					}
				}
				want := last.At.Add(tt.runWithin)
				if tt.runWithin == 0 {
					want = last.At.Add(timeout)
				}
				got, err := s.Get(ctx, a.ID)
				if err != nil {
					t.Fatal(err)
				}
				if !got.RunBy.Equal(want) {
					t.Fatalf("RunBy = %v, want %v", got.RunBy, want)
				}
				if st := got.State(want.Add(-time.Millisecond)); st != approval.Approved {
					t.Errorf("just before its deadline: %s", st)
				}
				if st := got.State(want); st != approval.Lapsed {
					t.Errorf("at its deadline: %s", st)
				}
			})
		}
	})

	t.Run("an approved call lapses after its deadline", func(t *testing.T) {
		s, other := open(t)
		a := newApproval("apr_l", "kl", 1, time.Minute)
		a.RunWithin = 30 * time.Millisecond
		request(t, s, a)
		approved, err := s.Decide(ctx, "apr_l", vote("bob", approval.Approve))
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Until(approved.RunBy) + 10*time.Millisecond)
		if got, err := other.Get(ctx, "apr_l"); err != nil || got.State(time.Now()) != approval.Lapsed {
			t.Fatalf("after its deadline: %+v %v", got, err)
		}
		for _, h := range []approval.Store{s, other} {
			if ok, err := h.Consume(ctx, "apr_l"); ok || err != nil {
				t.Errorf("consumed after its deadline: %v %v", ok, err)
			}
		}
		if _, err := s.Decide(ctx, "apr_l", vote("dave", approval.Deny)); !errors.Is(err, approval.ErrAlreadyDecided) {
			t.Errorf("denying a lapsed approval: %v", err)
		}
		got, err := other.Request(ctx, newApproval("apr_l2", "kl", 1, time.Minute))
		if err != nil || got.ID != "apr_l" || got.State(time.Now()) != approval.Lapsed || !got.Reported || got.Consumed {
			t.Fatalf("first request after the deadline: %+v %v", got, err)
		}
		if got, err := s.Get(ctx, "apr_l"); err != nil || !got.Reported {
			t.Errorf("the report is stored: %+v %v", got, err)
		}
		if got, _ := s.Request(ctx, newApproval("apr_l3", "kl", 1, time.Minute)); got.ID != "apr_l3" {
			t.Errorf("the next request asks anew: %s", got.ID)
		}
		if got, _ := other.Request(ctx, newApproval("apr_l4", "kl", 1, time.Minute)); got.ID != "apr_l3" {
			t.Errorf("the new approval stands for its binding: %s", got.ID)
		}
		if list, _ := other.List(ctx); len(list) != 1 || list[0].ID != "apr_l3" {
			t.Errorf("pending after the lapse: %v", list)
		}
	})

	t.Run("consumed exactly once across handles", func(t *testing.T) {
		s, other := open(t)
		request(t, s, newApproval("apr_c", "kc", 1, time.Minute))
		s.Decide(ctx, "apr_c", vote("bob", approval.Approve))
		won := testproc.AtOnce(t, 40, s, other, func(h approval.Store, _ int) (bool, error) { return h.Consume(ctx, "apr_c") })
		if won != 1 {
			t.Errorf("%d consumers won", won)
		}
		if b, _ := other.Request(ctx, newApproval("apr_c2", "kc", 1, time.Minute)); b.ID != "apr_c2" {
			t.Errorf("after consumption a new approval is made: %s", b.ID)
		}
		if ok, err := s.Consume(ctx, "apr_missing"); ok || err != nil {
			t.Errorf("consuming an unknown approval: %v %v", ok, err)
		}
	})

	t.Run("an expired approval is reported once", func(t *testing.T) {
		s, other := open(t)
		request(t, s, newApproval("apr_e", "ke", 1, 50*time.Millisecond))
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

	t.Run("racing requests are told of an ended approval once", func(t *testing.T) {
		tests := []struct {
			name  string
			state string
			end   func(t *testing.T, s approval.Store, id string)
		}{
			{"expired", approval.Expired, func(*testing.T, approval.Store, string) {}},
			{"lapsed", approval.Lapsed, func(t *testing.T, s approval.Store, id string) {
				if _, err := s.Decide(ctx, id, vote("bob", approval.Approve)); err != nil {
					t.Fatal(err)
				}
			}},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				s, other := open(t)
				a := newApproval("apr_old", "kx", 1, time.Minute)
				if tt.state == approval.Expired {
					a.ExpiresAt = a.CreatedAt.Add(30 * time.Millisecond)
				}
				a.RunWithin = 30 * time.Millisecond
				request(t, s, a)
				tt.end(t, s, a.ID)
				time.Sleep(50 * time.Millisecond)
				if got, err := other.Get(ctx, a.ID); err != nil || got.State(time.Now()) != tt.state {
					t.Fatalf("before the race: %+v %v", got, err)
				}
				fresh := idSet{}
				told := testproc.AtOnce(t, 40, s, other, func(h approval.Store, i int) (bool, error) {
					got, err := h.Request(ctx, newApproval(fmt.Sprintf("apr_new%d", i), "kx", 1, time.Minute))
					if err != nil {
						return false, err
					}
					if got.ID != a.ID {
						fresh.add(got.ID)
						return false, nil
					}
					if !got.Reported || got.State(time.Now()) != tt.state {
						t.Errorf("the old approval answered a request as %s, reported %v", got.State(time.Now()), got.Reported)
					}
					return true, nil
				})
				if told != 1 || len(fresh.ids) != 1 {
					t.Errorf("%d requests were told it %s and the others got %d approvals %v; want 1 and 1", told, tt.state, len(fresh.ids), fresh.ids)
				}
			})
		}
	})

	t.Run("approve and deny race", func(t *testing.T) {
		for _, quorum := range []int{1, 2} {
			t.Run(fmt.Sprintf("quorum %d", quorum), func(t *testing.T) {
				s, other := open(t)
				request(t, s, newApproval("apr_ad", "kad", quorum, time.Minute))
				won := testproc.AtOnce(t, 40, s, other, func(h approval.Store, i int) (bool, error) {
					v := approval.Approve
					if i%4 == 1 {
						v = approval.Deny
					}
					_, err := h.Decide(ctx, "apr_ad", vote(fmt.Sprintf("approver%d", i), v))
					return decided(err, approval.ErrAlreadyDecided)
				})
				a, err := other.Get(ctx, "apr_ad")
				if err != nil {
					t.Fatal(err)
				}
				// Every vote a store accepted is in it: the winning ones
				// and, when a denial won, the approvals before it.
				switch st := a.State(time.Now()); st {
				case approval.Approved:
					if a.Denial != nil || len(a.Approvals) != quorum || int(won) != quorum || a.RunBy.IsZero() {
						t.Errorf("approved with %d votes won: %+v", won, a)
					}
				case approval.Denied:
					if len(a.Approvals) >= quorum || int(won) != len(a.Approvals)+1 || !a.RunBy.IsZero() {
						t.Errorf("denied with %d votes won: %+v", won, a)
					}
				default:
					t.Errorf("after the race: %s %+v", st, a)
				}
			})
		}
	})

	t.Run("approvals race at the quorum", func(t *testing.T) {
		for _, quorum := range []int{1, 2} {
			t.Run(fmt.Sprintf("quorum %d", quorum), func(t *testing.T) {
				s, other := open(t)
				a := newApproval("apr_aq", "kaq", quorum, time.Minute)
				a.RunWithin = time.Minute
				request(t, s, a)
				base := time.Now()
				won := testproc.AtOnce(t, 40, s, other, func(h approval.Store, i int) (bool, error) {
					v := vote(fmt.Sprintf("approver%d", i), approval.Approve)
					// Each vote has its own time, so the deadline shows
					// which vote reached the quorum.
					v.At = base.Add(time.Duration(i) * time.Millisecond)
					_, err := h.Decide(ctx, "apr_aq", v)
					return decided(err, approval.ErrAlreadyDecided)
				})
				got, err := s.Get(ctx, "apr_aq")
				if err != nil {
					t.Fatal(err)
				}
				if int(won) != quorum || len(got.Approvals) != quorum || got.State(time.Now()) != approval.Approved {
					t.Fatalf("%d votes counted, %d stored: %+v", won, len(got.Approvals), got)
				}
				if got.Approvals[0].Principal == got.Approvals[quorum-1].Principal && quorum > 1 {
					t.Errorf("one approver counted twice: %+v", got.Approvals)
				}
				if want := got.Approvals[quorum-1].At.Add(time.Minute); !got.RunBy.Equal(want) {
					t.Errorf("RunBy = %v, want the last counted vote's time plus run_within, %v", got.RunBy, want)
				}
			})
		}
	})

	t.Run("one approver's votes race", func(t *testing.T) {
		s, other := open(t)
		request(t, s, newApproval("apr_one", "kone", 2, time.Minute))
		won := testproc.AtOnce(t, 40, s, other, func(h approval.Store, _ int) (bool, error) {
			_, err := h.Decide(ctx, "apr_one", vote("bob", approval.Approve))
			return decided(err, approval.ErrAlreadyVoted)
		})
		got, err := other.Get(ctx, "apr_one")
		if won != 1 || err != nil || len(got.Approvals) != 1 || got.State(time.Now()) != approval.Pending {
			t.Errorf("%d of one approver's votes counted: %+v %v", won, got, err)
		}
	})

	t.Run("consuming races the deadline", func(t *testing.T) {
		s, other := open(t)
		// Each trial consumes at its own moment around the deadline while
		// requests of the binding ask the other way; what a store must
		// never do is both run the call and report it lapsed. The moments
		// lean early, from 3.6 ms before the deadline to 0.8 ms after,
		// because a consumer reaches the store later than it wakes: so
		// both outcomes are common.
		const trials = 12
		var wg sync.WaitGroup
		for k := range trials {
			offset := time.Duration(k)*400*time.Microsecond - 3600*time.Microsecond
			wg.Go(func() { raceDeadline(t, s, other, k, offset) })
		}
		wg.Wait()
	})
}

// raceDeadline approves an approval that must run within 40 ms, then
// consumes it from both handles at offset from its deadline while both
// handles request its binding again and again, and checks that exactly one
// of them happened: it ran, or its caller was told it lapsed.
func raceDeadline(t *testing.T, s, other approval.Store, k int, offset time.Duration) {
	ctx := context.Background()
	a := newApproval(fmt.Sprintf("apr_rd%d", k), fmt.Sprintf("krd%d", k), 1, time.Minute)
	a.RunWithin = 40 * time.Millisecond
	if _, err := s.Request(ctx, a); err != nil {
		t.Error(err)
		return
	}
	approved, err := other.Decide(ctx, a.ID, vote("bob", approval.Approve))
	if err != nil {
		t.Error(err)
		return
	}
	runBy := approved.RunBy
	var consumed, reported atomic.Int64
	var wg sync.WaitGroup
	for n, h := range []approval.Store{s, other} {
		wg.Go(func() {
			time.Sleep(time.Until(runBy.Add(offset + time.Duration(n)*100*time.Microsecond)))
			ok, err := h.Consume(ctx, a.ID)
			if err != nil {
				t.Error(err)
			}
			if ok {
				consumed.Add(1)
			}
		})
		wg.Go(func() {
			time.Sleep(time.Until(runBy.Add(-2 * time.Millisecond)))
			// Asking ends once a request is answered with another
			// approval: the old one ran, or its caller was told.
			for i := 0; ; i++ {
				if time.Now().After(runBy.Add(10 * time.Second)) {
					t.Errorf("%s still answers requests long after its deadline", a.ID)
					return
				}
				got, err := h.Request(ctx, newApproval(fmt.Sprintf("%s_%d_%d", a.ID, n, i), a.Key, 1, time.Minute))
				if err != nil {
					t.Error(err)
					return
				}
				if got.ID != a.ID {
					return
				}
				if got.Reported {
					reported.Add(1)
				}
			}
		})
	}
	wg.Wait()
	got, err := s.Get(ctx, a.ID)
	if err != nil {
		t.Error(err)
		return
	}
	c, r := consumed.Load(), reported.Load()
	if c+r != 1 || got.Consumed != (c == 1) || got.Reported != (r == 1) {
		t.Errorf("%s: consumed %d times and reported lapsed %d times, stored consumed %v reported %v; want exactly one of them",
			a.ID, c, r, got.Consumed, got.Reported)
	}
}

// OpenGrants returns two handles on one fresh, empty grant store.
type OpenGrants func(t *testing.T) (approval.GrantStore, approval.GrantStore)

// RunGrants checks a grant store: uses from several handles at once never
// exceed a grant's limit nor get lost, and revoked, used-up or expired
// grants are not live.
func RunGrants(t *testing.T, open OpenGrants) {
	ctx := context.Background()
	grant := func(id string, uses int, ttl time.Duration) *approval.StandingGrant {
		now := time.Now()
		return &approval.StandingGrant{ID: id, Tool: "refund_invoice", Tenant: "acme", Principal: "alice", GrantedBy: "bob",
			Approvers: []string{"bob"}, CreatedAt: now, ExpiresAt: now.Add(ttl), Uses: uses}
	}
	add := func(t *testing.T, s approval.GrantStore, g *approval.StandingGrant) {
		t.Helper()
		if err := s.AddGrant(ctx, g); err != nil {
			t.Fatal(err)
		}
	}

	t.Run("uses never exceed the limit", func(t *testing.T) {
		s, other := open(t)
		add(t, s, grant("grt_uses", 5, time.Hour))
		if used := testproc.AtOnce(t, 40, s, other, func(h approval.GrantStore, _ int) (bool, error) { return h.UseGrant(ctx, "grt_uses") }); used != 5 {
			t.Errorf("%d uses succeeded, want 5", used)
		}
		if g, err := other.Grant(ctx, "grt_uses"); err != nil || g.Used != 5 || g.Live(time.Now()) {
			t.Errorf("after the race: %+v %v", g, err)
		}
		if live, err := s.LiveGrants(ctx); err != nil || len(live) != 0 {
			t.Errorf("a used-up grant is live: %v %v", live, err)
		}
	})

	t.Run("uses race a revocation", func(t *testing.T) {
		s, other := open(t)
		add(t, s, grant("grt_race", 100, time.Hour))
		used := testproc.AtOnce(t, 40, s, other, func(h approval.GrantStore, i int) (bool, error) {
			if i == 13 {
				_, err := h.RevokeGrant(ctx, "grt_race", "rule changed")
				return false, err
			}
			return h.UseGrant(ctx, "grt_race")
		})
		// Neither the revocation nor any use may be lost to another.
		g, err := s.Grant(ctx, "grt_race")
		if err != nil || !g.Revoked || g.Voided != "rule changed" || g.Used != used {
			t.Errorf("%d uses succeeded: %+v %v", used, g, err)
		}
		if ok, err := other.UseGrant(ctx, "grt_race"); ok || err != nil {
			t.Errorf("used after revocation: %v %v", ok, err)
		}
	})

	t.Run("revoking, with and without a reason", func(t *testing.T) {
		s, other := open(t)
		add(t, s, grant("grt_void", 5, time.Hour))
		add(t, s, grant("grt_revoke", 5, time.Hour))
		add(t, s, grant("grt_live", 5, time.Hour))
		if ok, err := s.UseGrant(ctx, "grt_void"); !ok || err != nil {
			t.Fatalf("use before revocation: %v %v", ok, err)
		}
		r, err := other.RevokeGrant(ctx, "grt_void", "rule changed")
		if err != nil || !r.Revoked || r.Voided != "rule changed" || r.Used != 1 || r.Live(time.Now()) {
			t.Errorf("voiding: %+v %v", r, err)
		}
		if r, err := s.RevokeGrant(ctx, "grt_void", "granter removed"); err != nil || !r.Revoked || r.Voided != "rule changed" {
			t.Errorf("a second revocation: %+v %v", r, err)
		}
		if r, err := s.RevokeGrant(ctx, "grt_revoke", ""); err != nil || !r.Revoked || r.Voided != "" {
			t.Errorf("revoking: %+v %v", r, err)
		}
		for _, id := range []string{"grt_void", "grt_revoke"} {
			if g, err := s.Grant(ctx, id); err != nil || !g.Revoked || g.Live(time.Now()) {
				t.Errorf("%s as stored: %+v %v", id, g, err)
			}
			if ok, err := other.UseGrant(ctx, id); ok || err != nil {
				t.Errorf("%s used after revocation: %v %v", id, ok, err)
			}
		}
		if g, err := other.Grant(ctx, "grt_void"); err != nil || g.Voided != "rule changed" || g.Used != 1 {
			t.Errorf("the reason is stored: %+v %v", g, err)
		}
		if live, err := other.LiveGrants(ctx); err != nil || len(live) != 1 || live[0].ID != "grt_live" {
			t.Errorf("live after revocations: %v %v", live, err)
		}
	})

	t.Run("an expired grant is not live", func(t *testing.T) {
		s, other := open(t)
		g := grant("grt_gone", 5, 50*time.Millisecond)
		add(t, s, g)
		// On a slow machine the grant may have expired already; it must be
		// listed only if it has not.
		live, err := other.LiveGrants(ctx)
		if err != nil || (len(live) != 1 && time.Now().Before(g.ExpiresAt)) {
			t.Fatalf("live before expiry: %v %v", live, err)
		}
		time.Sleep(100 * time.Millisecond)
		if live, err := other.LiveGrants(ctx); err != nil || len(live) != 0 {
			t.Errorf("live after expiry: %v %v", live, err)
		}
		if ok, err := s.UseGrant(ctx, "grt_gone"); ok || err != nil {
			t.Errorf("used after expiry: %v %v", ok, err)
		}
	})

	t.Run("unknown grants", func(t *testing.T) {
		s, _ := open(t)
		if _, err := s.Grant(ctx, "grt_none"); !errors.Is(err, approval.ErrGrantUnknown) {
			t.Errorf("unknown grant: %v", err)
		}
		if _, err := s.RevokeGrant(ctx, "grt_none", ""); !errors.Is(err, approval.ErrGrantUnknown) {
			t.Errorf("revoking an unknown grant: %v", err)
		}
		if ok, err := s.UseGrant(ctx, "grt_none"); ok || err != nil {
			t.Errorf("using an unknown grant: %v %v", ok, err)
		}
	})
}

// idSet collects the approval ids racing requests were answered with.
type idSet struct {
	mu  sync.Mutex
	ids map[string]bool
}

func (s *idSet) add(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ids == nil {
		s.ids = map[string]bool{}
	}
	s.ids[id] = true
}

func idsOf(list []*approval.Approval) []string {
	var ids []string
	for _, a := range list {
		ids = append(ids, a.ID)
	}
	return ids
}

// BenchmarkWaiting measures what a call under a cap on waiting approvals
// reads, beside 2,000 approvals of 50 other tenants waiting in s: one
// caller's approvals (Waiting), and every tenant's (List), as such a
// call read them before Waiting.
func BenchmarkWaiting(b *testing.B, s approval.Store) {
	ctx := context.Background()
	for i := range 2001 {
		a := newApproval(fmt.Sprintf("apr_b%d", i), fmt.Sprintf("kb%d", i), 1, time.Hour)
		if i < 2000 {
			a.Tenant = fmt.Sprintf("tenant-%d", i%50)
		}
		if _, err := s.Request(ctx, a); err != nil {
			b.Fatal(err)
		}
	}
	b.Run("waiting", func(b *testing.B) {
		for b.Loop() {
			if list, err := s.Waiting(ctx, "acme", "alice"); err != nil || len(list) != 1 {
				b.Fatal(len(list), err)
			}
		}
	})
	b.Run("list", func(b *testing.B) {
		for b.Loop() {
			if list, err := s.List(ctx); err != nil || len(list) != 2001 {
				b.Fatal(len(list), err)
			}
		}
	})
}
