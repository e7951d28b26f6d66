package sqlite

import (
	"path/filepath"
	"testing"

	"github.com/interlock-mcp/interlock/roster"
	"github.com/interlock-mcp/interlock/roster/rostertest"
)

// TestRosterConformance: two handles on one state file, as two gateways
// on one data directory have. The suite checks what a gateway announces,
// its renewal after a reload and its departure.
func TestRosterConformance(t *testing.T) {
	rostertest.Run(t, func(t *testing.T) (roster.Store, roster.Store) {
		path := filepath.Join(t.TempDir(), "state.db")
		return openApprovals(t, path), openApprovals(t, path)
	})
}
