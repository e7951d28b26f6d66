package sqlite

import (
	"context"
	"fmt"

	"github.com/interlock-mcp/interlock/approval"
	"github.com/interlock-mcp/interlock/consolestate/sqlstore"
)

// Approvals keeps approvals and standing grants in one SQLite file, so
// that every interlock process on a data directory (a stdio gateway per
// editor window, and the one serving the console) sees the same approvals
// and counts the same uses. Package sqlstore writes and reads them, as it
// does PostgreSQL's; here every change is one IMMEDIATE transaction,
// which holds SQLite's write lock from the read to the write, and the
// time a rule is applied at is read once the lock is held, so changes
// happen in the order of their times.
type Approvals struct {
	*handle
	*sqlstore.Approvals
}

var (
	_ approval.Store      = (*Approvals)(nil)
	_ approval.GrantStore = (*Approvals)(nil)
)

// approvalsSchema is the tables of approvals and grants, as package
// sqlstore lays them out in SQLite.
var approvalsSchema = sqlstore.SQLite.ApprovalsSchema()

// newApprovals returns the approvals and grants on h.
func newApprovals(h *handle) *Approvals {
	return &Approvals{h, sqlstore.NewApprovals(newDatabase(h), sqlstore.SQLite, "approval store "+h.path)}
}

// OpenApprovals opens (creating when needed) the approvals and grants at
// path. A gateway, which keeps its confirm tokens and budgets in the same
// file, opens them all with [OpenState].
func OpenApprovals(ctx context.Context, path string) (*Approvals, error) {
	h, err := openHandle(ctx, path, approvalsSchema+gatewaysSchema)
	if err != nil {
		return nil, fmt.Errorf("approval store %s: %w", path, err)
	}
	return newApprovals(h), nil
}

// Close waits for a change under way and closes the database; changes
// after it fail.
func (s *Approvals) Close() error { return s.close() }
