package interlock_test

import (
	"testing"

	"github.com/interlock-mcp/interlock/approval"
	"github.com/interlock-mcp/interlock/approval/approvaltest"
)

// The in-memory stores serve one process, so both handles of a race are
// the same store.

func TestMemoryApprovals(t *testing.T) {
	approvaltest.Run(t, func(*testing.T) (approval.Store, approval.Store) {
		s := approval.NewMemory()
		return s, s
	})
}

func TestMemoryGrants(t *testing.T) {
	approvaltest.RunGrants(t, func(*testing.T) (approval.GrantStore, approval.GrantStore) {
		s := approval.NewMemoryGrants()
		return s, s
	})
}
