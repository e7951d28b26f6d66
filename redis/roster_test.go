package redis_test

import (
	"testing"

	"github.com/interlock-mcp/interlock/roster"
	"github.com/interlock-mcp/interlock/roster/rostertest"
)

func TestRosterConformance(t *testing.T) {
	rostertest.Run(t, func(t *testing.T) (roster.Store, roster.Store) {
		a, b := twoHandles(t)
		return a.Roster(), b.Roster()
	})
}
