package sqlite

import (
	"context"
	"path/filepath"
	"testing"
	"time"
)

// TestGatewaysOfAnEarlierVersion: a table of announcements made before
// gateways recorded their config digest is read, and gets the columns at
// the next announcement, keeping the rows an earlier gateway wrote.
func TestGatewaysOfAnEarlierVersion(t *testing.T) {
	ctx := context.Background()
	s := openApprovals(t, filepath.Join(t.TempDir(), "state.db"))
	now := time.Now().UnixNano()
	if _, err := s.db.ExecContext(ctx, `CREATE TABLE gateways (id TEXT PRIMARY KEY, version TEXT NOT NULL,
		console_url TEXT NOT NULL, since INTEGER NOT NULL, seen INTEGER NOT NULL);
		INSERT INTO gateways VALUES ('old', '0.0.9', 'http://127.0.0.1:8740', ?, ?)`, now, now); err != nil {
		t.Fatal(err)
	}
	gws, err := s.Gateways(ctx, time.Minute)
	if err != nil || len(gws) != 1 || gws[0].ID != "old" || gws[0].ConfigDigest != "" || gws[0].Authenticates {
		t.Fatalf("an earlier version's table: %+v %v", gws, err)
	}
	if err := s.Announce(ctx, Gateway{ID: "new", Version: "0.1.0", ConfigDigest: "abc", Authenticates: true}); err != nil {
		t.Fatal(err)
	}
	gws, err = s.Gateways(ctx, time.Minute)
	if err != nil || len(gws) != 2 || gws[0].ID != "new" || gws[0].ConfigDigest != "abc" || !gws[0].Authenticates || gws[1].ID != "old" {
		t.Fatalf("after a new gateway announced itself: %+v %v", gws, err)
	}
	if url := s.ConsoleURL(ctx, time.Minute); url != "http://127.0.0.1:8740" {
		t.Errorf("the console of the gateway that serves one: %q", url)
	}
}

// TestAnnounceFollowsTheGateway: a gateway's later announcement (after a
// reload) replaces what it said, keeps when it started, and departing
// removes it.
func TestAnnounceFollowsTheGateway(t *testing.T) {
	ctx := context.Background()
	s := openApprovals(t, filepath.Join(t.TempDir(), "state.db"))
	if err := s.Announce(ctx, Gateway{ID: "g1", Version: "0.1.0", ConfigDigest: "one"}); err != nil {
		t.Fatal(err)
	}
	first, err := s.Gateways(ctx, time.Minute)
	if err != nil || len(first) != 1 {
		t.Fatalf("%+v %v", first, err)
	}
	if err := s.Announce(ctx, Gateway{ID: "g1", Version: "0.1.0", ConfigDigest: "two", Authenticates: true}); err != nil {
		t.Fatal(err)
	}
	gws, err := s.Gateways(ctx, time.Minute)
	if err != nil || len(gws) != 1 || gws[0].ConfigDigest != "two" || !gws[0].Authenticates || !gws[0].Since.Equal(first[0].Since) {
		t.Fatalf("after announcing again: %+v %v", gws, err)
	}
	if err := s.Depart(ctx, "g1"); err != nil {
		t.Fatal(err)
	}
	if gws, err := s.Gateways(ctx, time.Minute); err != nil || len(gws) != 0 {
		t.Errorf("after departing: %+v %v", gws, err)
	}
}
