package postgres

import (
	"github.com/interlock-mcp/interlock/consolestate/sqlstore"
	"github.com/interlock-mcp/interlock/task"
)

// Tasks keeps tasks in PostgreSQL, so that any gateway sharing the
// database answers for a task another made. Package sqlstore writes and
// reads them, as it does SQLite's: an update writes the row only where it
// still holds the version its caller read, and PostgreSQL checks that
// again on the newest row once a concurrent update commits, so of updates
// from one version exactly one lands, whichever gateways send them.
type Tasks struct{ *sqlstore.Tasks }

var _ task.Store = (*Tasks)(nil)

// Tasks returns the tasks in the approvals' database, on their
// connections.
func (s *Approvals) Tasks() *Tasks {
	return &Tasks{sqlstore.NewTasks(newDatabase(s.pool), sqlstore.PostgreSQL, "task store "+s.where)}
}
