package postgres

import (
	"context"
	"testing"

	"github.com/interlock-mcp/interlock/approval"
	"github.com/interlock-mcp/interlock/approval/approvaltest"
)

// twoGateways opens two handles on one fresh schema, as two gateways
// sharing the database would.
func twoGateways(t *testing.T) (*Approvals, *Approvals) {
	url, _ := schemaURL(t)
	open := func() *Approvals {
		s, err := OpenApprovals(context.Background(), url)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(s.Close)
		return s
	}
	return open(), open()
}

func TestApprovalsConformance(t *testing.T) {
	approvaltest.Run(t, func(t *testing.T) (approval.Store, approval.Store) {
		return twoGateways(t)
	})
}

func TestGrantsConformance(t *testing.T) {
	approvaltest.RunGrants(t, func(t *testing.T) (approval.GrantStore, approval.GrantStore) {
		return twoGateways(t)
	})
}
