package postgres

import (
	"testing"

	"github.com/interlock-mcp/interlock/task"
	"github.com/interlock-mcp/interlock/task/tasktest"
)

func TestTasksConformance(t *testing.T) {
	tasktest.Run(t, func(t *testing.T) (task.Store, task.Store) {
		s, other := twoGateways(t)
		return s.Tasks(), other.Tasks()
	})
}
