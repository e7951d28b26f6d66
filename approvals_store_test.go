package interlock_test

import (
	"testing"

	"github.com/interlock-mcp/interlock"
	"github.com/interlock-mcp/interlock/approvaltest"
)

func TestMemoryApprovals(t *testing.T) {
	approvaltest.Run(t, func(*testing.T) (interlock.ApprovalStore, interlock.ApprovalStore) {
		s := interlock.NewMemoryApprovals()
		return s, s
	})
}

func TestMemoryGrants(t *testing.T) {
	approvaltest.RunGrants(t, func(*testing.T) (interlock.GrantStore, interlock.GrantStore) {
		s := interlock.NewMemoryGrants()
		return s, s
	})
}
