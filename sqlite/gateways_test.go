package sqlite

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/interlock-mcp/interlock/roster"
	"github.com/interlock-mcp/interlock/roster/rostertest"
	"github.com/interlock-mcp/interlock/storetest"
)

// TestRosterConformance: two handles on one state file, as two gateways
// on one data directory have. The suite checks what a gateway announces,
// its renewal after a reload and its departure.
func TestRosterConformance(t *testing.T) {
	rostertest.Run(t, storetest.Both(twoGateways, func(s *Approvals) roster.Store { return s }))
}

// TestGatewaysOfAnOlderFile: a state file whose gateways table was made
// before warnings were announced gains their column when opened, keeps its
// rows, and then holds what gateways announce.
func TestGatewaysOfAnOlderFile(t *testing.T) {
	ctx := context.Background()
	older := strings.Replace(gatewaysSchema, ",\n\twarnings      TEXT NOT NULL DEFAULT '[]'", "", 1)
	if older == gatewaysSchema {
		t.Fatal("the test no longer makes the older table")
	}
	path := earlierFile(t,
		statement{older, nil},
		statement{`INSERT INTO gateways (id, version, console_url, since, seen) VALUES ('gw-old', '0.1.0', '', ?, ?)`,
			[]any{time.Now().UnixNano(), time.Now().UnixNano()}})
	a := openApprovals(t, path)
	warned := roster.Gateway{ID: "gw-new", Version: "0.2.0", Warnings: []string{`rule "refunds" matches no tool`}}
	if err := a.Announce(ctx, warned); err != nil {
		t.Fatal(err)
	}
	gws, err := a.Gateways(ctx, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	byID := map[string]roster.Gateway{}
	for _, g := range gws {
		byID[g.ID] = g
	}
	if g, ok := byID["gw-old"]; !ok || len(g.Warnings) != 0 {
		t.Errorf("the older row read back as %+v (present %v)", g, ok)
	}
	if g := byID["gw-new"]; !slices.Equal(g.Warnings, warned.Warnings) {
		t.Errorf("the warnings read back as %q", g.Warnings)
	}
	// A second process opening the file finds the column there.
	openApprovals(t, path)
}
