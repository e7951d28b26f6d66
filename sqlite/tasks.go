package sqlite

import (
	"github.com/interlock-mcp/interlock/consolestate/sqlstore"
	"github.com/interlock-mcp/interlock/task"
)

// Tasks keeps tasks in the state file, so that every interlock process on
// a data directory answers for a task any of them made, after a restart
// too. Package sqlstore writes and reads them, as it does PostgreSQL's;
// an update is one statement in an IMMEDIATE transaction, which holds
// SQLite's write lock, so of updates from one version exactly one lands.
type Tasks struct{ *sqlstore.Tasks }

var _ task.Store = (*Tasks)(nil)

// tasksSchema is the table of tasks, as package sqlstore lays it out in
// SQLite.
var tasksSchema = sqlstore.SQLite.TasksSchema()

// Tasks returns the tasks of s.
func (s *State) Tasks() *Tasks {
	return &Tasks{sqlstore.NewTasks(newDatabase(s.h), sqlstore.SQLite, "task store "+s.h.path)}
}
