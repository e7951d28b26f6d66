// Package rostertest is the conformance suite of every [roster.Store]:
// the SQLite state file, Redis and PostgreSQL run it against real
// servers.
package rostertest

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/interlock-mcp/interlock/roster"
)

// Run checks the store open returns; open gives two handles on one empty
// store, as two gateways have.
func Run(t *testing.T, open func(t *testing.T) (roster.Store, roster.Store)) {
	ctx := context.Background()
	t.Run("announce, renew, list, depart", func(t *testing.T) {
		a, b := open(t)
		if gws, err := a.Gateways(ctx, time.Minute); err != nil || len(gws) != 0 {
			t.Fatalf("before any announcement: %+v %v", gws, err)
		}
		first := roster.Gateway{ID: "gw-a", Version: "1.0", ConsoleURL: "http://127.0.0.1:8740", ConfigDigest: "abc", Authenticates: true,
			Warnings: []string{`interlock.yaml:12: rule "refunds" matches no tool`, "approver \"bob\": no key names it"}}
		if err := a.Announce(ctx, first); err != nil {
			t.Fatal(err)
		}
		time.Sleep(5 * time.Millisecond)
		if err := b.Announce(ctx, roster.Gateway{ID: "gw-b", Version: "1.0", ConfigDigest: "abd"}); err != nil {
			t.Fatal(err)
		}
		gws, err := a.Gateways(ctx, time.Minute)
		if err == nil && len(gws) == 2 && (gws[0].ConsoleURL != "" || gws[0].Authenticates) {
			t.Errorf("gw-b, which serves no console and needs no key, read back as %+v", gws[0])
		}
		if err != nil {
			t.Fatal(err)
		}
		if len(gws) != 2 || gws[0].ID != "gw-b" || gws[1].ID != "gw-a" {
			t.Fatalf("gateways, most recently seen first: %+v", gws)
		}
		got := gws[1]
		if got.Version != "1.0" || got.ConsoleURL != first.ConsoleURL || got.ConfigDigest != "abc" || !got.Authenticates ||
			!slices.Equal(got.Warnings, first.Warnings) || got.Since.IsZero() || got.Seen.Before(got.Since) {
			t.Errorf("gw-a read back as %+v", got)
		}
		if roster.ConsoleURL(gws) != first.ConsoleURL {
			t.Errorf("console %q", roster.ConsoleURL(gws))
		}
		if d := roster.Drift(gws); d != "config digests differ: abd (gw-b), abc (gw-a)" {
			t.Errorf("drift %q", d)
		}

		// A renewal (after a reload) replaces what the gateway said, keeps
		// the time first announced and moves the time seen.
		time.Sleep(5 * time.Millisecond)
		first.ConfigDigest, first.Authenticates, first.Warnings = "abd", false, nil
		if err := a.Announce(ctx, first); err != nil {
			t.Fatal(err)
		}
		gws, err = b.Gateways(ctx, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if len(gws) != 2 || gws[0].ID != "gw-a" || gws[0].ConfigDigest != "abd" || gws[0].Authenticates || len(gws[0].Warnings) != 0 ||
			!gws[0].Since.Equal(got.Since) || !gws[0].Seen.After(got.Seen) {
			t.Fatalf("after renewing gw-a: %+v (first %+v)", gws, got)
		}
		if d := roster.Drift(gws); d != "" {
			t.Errorf("drift once both run one configuration: %q", d)
		}

		// Only those seen within the window are listed. The window spans
		// gw-b's announcement and a generous allowance for a loaded
		// machine's store, and gw-a was seen well before it.
		time.Sleep(500 * time.Millisecond)
		announced := time.Now()
		if err := b.Announce(ctx, roster.Gateway{ID: "gw-b", Version: "1.0", ConfigDigest: "abd"}); err != nil {
			t.Fatal(err)
		}
		window := time.Since(announced) + 200*time.Millisecond
		if gws, err = a.Gateways(ctx, window); err != nil || len(gws) != 1 || gws[0].ID != "gw-b" {
			t.Fatalf("seen within %s: %+v %v", window, gws, err)
		}

		if err := a.Depart(ctx, "gw-a"); err != nil {
			t.Fatal(err)
		}
		if err := a.Depart(ctx, "gw-none"); err != nil {
			t.Errorf("departing unannounced: %v", err)
		}
		if gws, err = b.Gateways(ctx, time.Minute); err != nil || len(gws) != 1 || gws[0].ID != "gw-b" {
			t.Fatalf("after gw-a departed: %+v %v", gws, err)
		}
	})
}
