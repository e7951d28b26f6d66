package sqlite

import (
	"testing"

	"github.com/interlock-mcp/interlock/task"
	"github.com/interlock-mcp/interlock/task/tasktest"
)

func TestTasksConformance(t *testing.T) {
	tasktest.Run(t, func(t *testing.T) (task.Store, task.Store) {
		s, other := twoStates(t)
		return s.Tasks(), other.Tasks()
	})
}
