package sqlite

import (
	"context"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestConsoleLinkSpentOnce: a link kept by one process signs in once,
// whichever of two processes presenting it at once wins, and never again;
// the file holds only its hash.
func TestConsoleLinkSpentOnce(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "state.db")
	cli, a, b := openApprovals(t, path), openApprovals(t, path), openApprovals(t, path)
	if err := cli.AddConsoleLink(ctx, "the-token", 15*time.Minute); err != nil {
		t.Fatal(err)
	}
	var kept int
	if err := cli.db.QueryRowContext(ctx, "SELECT count(*) FROM console_links WHERE hash = ?", "the-token").Scan(&kept); err != nil || kept != 0 {
		t.Fatalf("the token itself is in the file (%d rows, %v)", kept, err)
	}
	var wins atomic.Int32
	var wg sync.WaitGroup
	for i := range 16 {
		s := a
		if i%2 == 1 {
			s = b
		}
		wg.Go(func() {
			ok, err := s.SpendConsoleLink(ctx, "the-token")
			if err != nil {
				t.Error(err)
			}
			if ok {
				wins.Add(1)
			}
		})
	}
	wg.Wait()
	if n := wins.Load(); n != 1 {
		t.Fatalf("the link signed in %d times", n)
	}
	if ok, err := a.SpendConsoleLink(ctx, "the-token"); ok || err != nil {
		t.Errorf("spent again later: %v %v", ok, err)
	}
	if ok, err := b.SpendConsoleLink(ctx, "a-made-up-token"); ok || err != nil {
		t.Errorf("a token never kept: %v %v", ok, err)
	}
}

// TestConsoleLinkExpires: a link past its end signs nobody in, and is
// dropped; one still live beside it is not.
func TestConsoleLinkExpires(t *testing.T) {
	ctx := context.Background()
	s := openApprovals(t, filepath.Join(t.TempDir(), "state.db"))
	if err := s.AddConsoleLink(ctx, "short", time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if err := s.AddConsoleLink(ctx, "long", time.Hour); err != nil {
		t.Fatal(err)
	}
	time.Sleep(10 * time.Millisecond)
	if ok, err := s.SpendConsoleLink(ctx, "short"); ok || err != nil {
		t.Errorf("an expired link: %v %v", ok, err)
	}
	var left int
	if err := s.db.QueryRowContext(ctx, "SELECT count(*) FROM console_links").Scan(&left); err != nil || left != 1 {
		t.Errorf("%d links left (%v), want the live one only", left, err)
	}
	if ok, err := s.SpendConsoleLink(ctx, "long"); !ok || err != nil {
		t.Errorf("a live link: %v %v", ok, err)
	}
}
