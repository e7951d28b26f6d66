package interlock_test

import (
	"testing"

	"github.com/interlock-mcp/interlock"
	"github.com/interlock-mcp/interlock/storetest"
)

// The in-memory stores serve one process, so both handles of a race are
// the same store; they read time.Now, so their timing runs on fake time.

func TestMemoryTokens(t *testing.T) {
	storetest.RunTokens(t, func(*testing.T) (interlock.TokenStore, interlock.TokenStore) {
		s := interlock.NewMemoryTokens()
		return s, s
	}, storetest.Options{Synctest: true})
}

func TestMemoryBudgets(t *testing.T) {
	storetest.RunBudgets(t, func(*testing.T) (interlock.BudgetStore, interlock.BudgetStore) {
		s := interlock.NewMemoryBudgets()
		return s, s
	}, storetest.Options{Synctest: true})
}
