package storetest

import (
	"testing"

	"github.com/interlock-mcp/interlock"
	"github.com/interlock-mcp/interlock/budget"
	"github.com/interlock-mcp/interlock/seal"
)

// The memory stores serve one process, so both handles of a race are one
// store; they read time.Now, so their timing runs on fake time.
var memory = Options{Synctest: true}

func TestMemoryTokens(t *testing.T) {
	RunTokens(t, func(*testing.T) (interlock.TokenStore, interlock.TokenStore) {
		s := seal.NewMemoryTokens()
		return s, s
	}, memory)
}

func TestMemoryBudgets(t *testing.T) {
	RunBudgets(t, func(*testing.T) (interlock.BudgetStore, interlock.BudgetStore) {
		s := budget.NewMemory()
		return s, s
	}, memory)
}
