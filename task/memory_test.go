package task_test

import (
	"testing"

	"github.com/interlock-mcp/interlock/task"
	"github.com/interlock-mcp/interlock/task/tasktest"
)

func TestMemoryConformance(t *testing.T) {
	tasktest.Run(t, func(*testing.T) (task.Store, task.Store) {
		s := task.NewMemory()
		return s, s
	})
}
