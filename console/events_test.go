package console

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/interlock-mcp/interlock/approval"
	"github.com/interlock-mcp/interlock/consolestate"
)

// heldList is an approval store whose List waits, once, until the test
// lets it go, so a test can act while the watcher reads.
type heldList struct {
	*approval.Memory
	entered chan struct{}
	release chan struct{}
}

func (h *heldList) List(ctx context.Context) ([]*approval.Approval, error) {
	select {
	case h.entered <- struct{}{}:
		<-h.release
	default:
	}
	return h.Memory.List(ctx)
}

// TestSubscriptionIsReadyAfterARead: a page is told it listens only once
// the watcher has read the stores since it subscribed. A watcher with no
// listener compares its next reads with that first one, so a decision
// made between a page's "listening" and that read would never be
// announced.
func TestSubscriptionIsReadyAfterARead(t *testing.T) {
	ctx := context.Background()
	store := &heldList{Memory: approval.NewMemory(), entered: make(chan struct{}), release: make(chan struct{})}
	now := time.Now()
	if _, err := store.Request(ctx, &approval.Approval{ID: "a1", Key: "k1", Tenant: "acme", Principal: "alice", Tool: "delete_customer",
		Approvers: []string{"bob"}, Quorum: 1, CreatedAt: now, ExpiresAt: now.Add(time.Hour)}); err != nil {
		t.Fatal(err)
	}
	// A long poll: only the subscription and the test's pokes wake it.
	w := newWatcher(store, approval.NewMemoryGrants(), consolestate.NewMemory(), time.Hour, slog.New(slog.NewTextHandler(io.Discard, nil)))
	defer w.close()

	changes, ready, cancel := w.subscribe()
	defer cancel()
	<-store.entered
	select {
	case <-ready:
		t.Fatal("the subscription was ready while the watcher's first read was under way")
	default:
	}
	close(store.release)
	select {
	case <-ready:
	case <-time.After(5 * time.Second):
		t.Fatal("the subscription was never ready")
	}

	if _, err := store.Decide(ctx, "a1", approval.Vote{Principal: "bob", Verdict: approval.Deny, At: time.Now()}); err != nil {
		t.Fatal(err)
	}
	w.poke()
	select {
	case c := <-changes:
		if c.approval == nil || c.approval.ID != "a1" || c.message != "bob denied delete_customer." {
			t.Fatalf("change: %+v", c)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("a decision made once the subscription was ready was never announced")
	}
}
