package sqlite

import (
	"context"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/interlock-mcp/interlock/approval"
	"github.com/interlock-mcp/interlock/approval/approvaltest"
	"github.com/interlock-mcp/interlock/storetest"
)

func openApprovals(t testing.TB, path string) *Approvals { return opened(t, OpenApprovals, path) }

// twoGateways opens one fresh file twice, as two gateways on one data
// directory would.
func twoGateways(t *testing.T) (*Approvals, *Approvals) {
	path := filepath.Join(t.TempDir(), "approvals.db")
	return openApprovals(t, path), openApprovals(t, path)
}

func TestApprovalsConformance(t *testing.T) {
	approvaltest.Run(t, storetest.Both(twoGateways, func(s *Approvals) approval.Store { return s }))
}

func TestGrantsConformance(t *testing.T) {
	approvaltest.RunGrants(t, storetest.Both(twoGateways, func(s *Approvals) approval.GrantStore { return s }))
}

// TestGrantUsesAcrossProcesses has two gateway processes use one grant in
// one file at once; between them they use it exactly its number of uses.
func TestGrantUsesAcrossProcesses(t *testing.T) {
	path := filepath.Join(t.TempDir(), "approvals.db")
	approvaltest.UsesAcrossProcesses(t, openApprovals(t, path), path)
}

// TestHelperProcess is a gateway process of TestGrantUsesAcrossProcesses,
// using the grants of the file it is given; run as a test it does nothing.
func TestHelperProcess(t *testing.T) {
	approvaltest.HelperProcess(t, func(t *testing.T, path string) approval.GrantStore {
		return openApprovals(t, path)
	})
}

// TestOpenApprovalsAtOnce has several gateways open one new file at once,
// as editor windows started together would: each creates the tables, or
// waits for another that is, and then shares its approvals.
func TestOpenApprovalsAtOnce(t *testing.T) {
	path := filepath.Join(t.TempDir(), "approvals.db")
	const gateways = 8
	handles := make([]*Approvals, gateways)
	errs := make([]error, gateways)
	var wg sync.WaitGroup
	for i := range handles {
		wg.Go(func() { handles[i], errs[i] = OpenApprovals(context.Background(), path) })
	}
	wg.Wait()
	for i, s := range handles {
		if errs[i] != nil {
			t.Fatalf("gateway %d: %v", i, errs[i])
		}
		t.Cleanup(func() { s.Close() })
	}
	now := time.Now()
	a := &approval.Approval{ID: "apr_1", Key: "k1", Tenant: "acme", Principal: "alice", Tool: "refund_invoice",
		Approvers: []string{"bob"}, Quorum: 1, CreatedAt: now, ExpiresAt: now.Add(time.Minute)}
	if _, err := handles[0].Request(context.Background(), a); err != nil {
		t.Fatal(err)
	}
	for i, s := range handles {
		if list, err := s.List(context.Background()); err != nil || len(list) != 1 || list[0].ID != a.ID {
			t.Errorf("gateway %d lists %v %v", i, list, err)
		}
	}
}

// TestApprovalsDropOld checks that a new approval drops those an hour past
// the later of their wait and their deadline to run, and a new grant those
// a day past their expiry, and nothing younger.
func TestApprovalsDropOld(t *testing.T) {
	ctx := context.Background()
	s, _ := twoGateways(t)
	now := time.Now()
	pending := func(id string, expired time.Duration) *approval.Approval {
		return &approval.Approval{ID: id, Key: "k_" + id, Tenant: "acme", Principal: "alice", Tool: "refund_invoice",
			Approvers: []string{"bob"}, Quorum: 1, CreatedAt: now.Add(-expired - time.Minute), ExpiresAt: now.Add(-expired)}
	}
	approved := pending("apr_ran_late", 3*time.Hour)
	approved.RunBy = now.Add(-30 * time.Minute)
	for _, a := range []*approval.Approval{pending("apr_old", 2*time.Hour), pending("apr_recent", 30*time.Minute), approved} {
		if _, err := s.Request(ctx, a); err != nil {
			t.Fatal(err)
		}
	}
	grant := func(id string, expired time.Duration) *approval.StandingGrant {
		return &approval.StandingGrant{ID: id, Tool: "refund_invoice", Tenant: "acme", Principal: "alice", GrantedBy: "bob",
			CreatedAt: now.Add(-expired - time.Hour), ExpiresAt: now.Add(-expired), Uses: 1}
	}
	for _, g := range []*approval.StandingGrant{grant("grt_old", 25*time.Hour), grant("grt_recent", 23*time.Hour)} {
		if err := s.AddGrant(ctx, g); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.Request(ctx, pending("apr_new", -time.Minute)); err != nil {
		t.Fatal(err)
	}
	if err := s.AddGrant(ctx, grant("grt_new", -time.Hour)); err != nil {
		t.Fatal(err)
	}
	for id, kept := range map[string]bool{"apr_old": false, "apr_recent": true, "apr_ran_late": true, "apr_new": true} {
		if _, err := s.Get(ctx, id); (err == nil) != kept {
			t.Errorf("%s kept %v: %v", id, kept, err)
		}
	}
	for id, kept := range map[string]bool{"grt_old": false, "grt_recent": true, "grt_new": true} {
		if _, err := s.Grant(ctx, id); (err == nil) != kept {
			t.Errorf("%s kept %v: %v", id, kept, err)
		}
	}
}

// TestApprovalsClosed checks that a closed handle refuses changes rather
// than hanging or writing.
func TestApprovalsClosed(t *testing.T) {
	path := filepath.Join(t.TempDir(), "approvals.db")
	s, err := OpenApprovals(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	g := &approval.StandingGrant{ID: "grt_closed", ExpiresAt: time.Now().Add(time.Hour), Uses: 1}
	if err := s.AddGrant(context.Background(), g); err == nil {
		t.Error("a closed handle added a grant")
	}
	if _, err := openApprovals(t, path).Grant(context.Background(), g.ID); err == nil {
		t.Error("the grant was stored")
	}
}

// BenchmarkApprovals measures a Request that stores a new approval, a
// Request answered by the binding's pending approval, a Decide and a
// Consume, on one handle; the last runs Decide from eight goroutines on
// two handles at once.
func BenchmarkApprovals(b *testing.B) {
	ctx := context.Background()
	newApproval := func(id string) *approval.Approval {
		now := time.Now()
		return &approval.Approval{ID: id, Key: "k_" + id, Tenant: "acme", Principal: "alice", Tool: "refund_invoice",
			Args: map[string]any{"invoice_id": "inv_1001", "amount": 5000.0}, Summary: "Refund 5,000.00.",
			Approvers: []string{"bob", "group:finance"}, Quorum: 1, CreatedAt: now, ExpiresAt: now.Add(time.Hour)}
	}
	// requested stores n approvals and returns their ids.
	requested := func(b *testing.B, s *Approvals, n int) []string {
		ids := make([]string, n)
		for i := range ids {
			ids[i] = fmt.Sprintf("apr_%d", i)
			if _, err := s.Request(ctx, newApproval(ids[i])); err != nil {
				b.Fatal(err)
			}
		}
		return ids
	}
	vote := approval.Vote{Principal: "bob", Verdict: approval.Approve}
	b.Run("Request new", func(b *testing.B) {
		s := openApprovals(b, filepath.Join(b.TempDir(), "approvals.db"))
		i := 0
		for b.Loop() {
			if _, err := s.Request(ctx, newApproval(fmt.Sprintf("apr_%d", i))); err != nil {
				b.Fatal(err)
			}
			i++
		}
	})
	b.Run("Request pending", func(b *testing.B) {
		s := openApprovals(b, filepath.Join(b.TempDir(), "approvals.db"))
		a := newApproval("apr_0")
		requested(b, s, 1)
		for b.Loop() {
			if got, err := s.Request(ctx, a); err != nil || got.ID != "apr_0" {
				b.Fatal(got, err)
			}
		}
	})
	b.Run("Decide", func(b *testing.B) {
		s := openApprovals(b, filepath.Join(b.TempDir(), "approvals.db"))
		ids := requested(b, s, b.N)
		b.ResetTimer()
		for i := range b.N {
			vote.At = time.Now()
			if _, err := s.Decide(ctx, ids[i], vote); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("Consume", func(b *testing.B) {
		s := openApprovals(b, filepath.Join(b.TempDir(), "approvals.db"))
		ids := requested(b, s, b.N)
		for _, id := range ids {
			vote.At = time.Now()
			if _, err := s.Decide(ctx, id, vote); err != nil {
				b.Fatal(err)
			}
		}
		b.ResetTimer()
		for i := range b.N {
			if ok, err := s.Consume(ctx, ids[i]); !ok || err != nil {
				b.Fatal(ok, err)
			}
		}
	})
	b.Run("Decide two handles", func(b *testing.B) {
		path := filepath.Join(b.TempDir(), "approvals.db")
		s, other := openApprovals(b, path), openApprovals(b, path)
		ids := requested(b, s, b.N)
		next := make(chan string, len(ids))
		for _, id := range ids {
			next <- id
		}
		close(next)
		b.ResetTimer()
		done := make(chan error)
		for w := range 8 {
			h := []*Approvals{s, other}[w%2]
			go func() {
				for id := range next {
					if _, err := h.Decide(ctx, id, approval.Vote{Principal: "bob", Verdict: approval.Approve, At: time.Now()}); err != nil {
						done <- err
						return
					}
				}
				done <- nil
			}()
		}
		for range 8 {
			if err := <-done; err != nil {
				b.Error(err)
			}
		}
	})
}

func BenchmarkWaiting(b *testing.B) {
	approvaltest.BenchmarkWaiting(b, openApprovals(b, filepath.Join(b.TempDir(), "approvals.db")))
}
