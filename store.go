package interlock

import "github.com/interlock-mcp/interlock/seal"

// Stores the gate keeps what must outlive one call in: confirm tokens
// (package seal has the store and its memory store), budgets (package
// budget) and approvals (package approval).
type TokenStore = seal.TokenStore
