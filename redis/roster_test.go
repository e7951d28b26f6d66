package redis_test

import (
	"testing"

	"github.com/interlock-mcp/interlock/redis"
	"github.com/interlock-mcp/interlock/roster"
	"github.com/interlock-mcp/interlock/roster/rostertest"
)

func TestRosterConformance(t *testing.T) {
	rostertest.Run(t, both(func(s *redis.Tokens) roster.Store { return s.Roster() }))
}
