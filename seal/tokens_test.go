package seal_test

import (
	"testing"

	"github.com/interlock-mcp/interlock"
	"github.com/interlock-mcp/interlock/seal"
	"github.com/interlock-mcp/interlock/storetest"
)

// The memory store serves one process, so both handles of a race are the
// same store; it reads time.Now, so its timing runs on fake time.
func TestMemoryTokens(t *testing.T) {
	storetest.RunTokens(t, func(*testing.T) (interlock.TokenStore, interlock.TokenStore) {
		s := seal.NewMemoryTokens()
		return s, s
	}, storetest.Options{Synctest: true})
}
