package sqlite

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/interlock-mcp/interlock/roster"
	"github.com/interlock-mcp/interlock/roster/rostertest"
)

// TestGatewaysListed: the gateways that announced themselves are listed
// most recently seen first, with what they said, and approvers are sent
// to the console of the one seen last that serves one.
func TestGatewaysListed(t *testing.T) {
	ctx := context.Background()
	s := openApprovals(t, filepath.Join(t.TempDir(), "state.db"))
	if gws, err := s.Gateways(ctx, time.Minute); err != nil || len(gws) != 0 {
		t.Fatalf("before any announcement: %+v %v", gws, err)
	}
	if err := s.Announce(ctx, Gateway{ID: "old", Version: "0.0.9", ConsoleURL: "http://127.0.0.1:8740"}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Millisecond)
	if err := s.Announce(ctx, Gateway{ID: "new", Version: "0.1.0", ConfigDigest: "abc", Authenticates: true}); err != nil {
		t.Fatal(err)
	}
	gws, err := s.Gateways(ctx, time.Minute)
	if err != nil || len(gws) != 2 || gws[0].ID != "new" || gws[0].ConfigDigest != "abc" || !gws[0].Authenticates ||
		gws[1].ID != "old" || gws[1].ConfigDigest != "" || gws[1].Authenticates {
		t.Fatalf("gateways: %+v %v", gws, err)
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

// TestRosterConformance: two handles on one state file, as two gateways
// on one data directory have.
func TestRosterConformance(t *testing.T) {
	rostertest.Run(t, func(t *testing.T) (roster.Store, roster.Store) {
		path := filepath.Join(t.TempDir(), "state.db")
		return openApprovals(t, path), openApprovals(t, path)
	})
}
