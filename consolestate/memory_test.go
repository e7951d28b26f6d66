package consolestate_test

import (
	"testing"

	"github.com/interlock-mcp/interlock/consolestate"
	"github.com/interlock-mcp/interlock/consolestate/consolestatetest"
)

func TestMemoryConformance(t *testing.T) {
	consolestatetest.Run(t, func(t *testing.T) (consolestate.Store, consolestate.Store) {
		m := consolestate.NewMemory()
		return m, m
	})
}

func TestMemorySignal(t *testing.T) {
	consolestatetest.RunSignal(t, func(t *testing.T) (consolestate.Signal, consolestate.Signal) {
		m := consolestate.NewMemory()
		return m, m
	})
}
