package approval_test

import (
	"fmt"

	"github.com/interlock-mcp/interlock/approval"
)

// Principal names are unique only within a tenant: the approvers a rule
// names are names in the tenant of the call.
func ExampleMaySee() {
	a := &approval.Approval{Tenant: "acme", Principal: "alice", Approvers: []string{"bob", "group:finance"}}
	for _, who := range []approval.Identity{
		{Tenant: "acme", Principal: "alice"},
		{Tenant: "acme", Principal: "bob"},
		{Tenant: "globex", Principal: "bob"},
		{Tenant: "acme", Principal: "erin", Groups: []string{"finance"}},
		{Tenant: "globex", Principal: "erin", Groups: []string{"finance"}},
	} {
		fmt.Printf("%s/%s sees: %t, may decide: %v\n", who.Tenant, who.Principal, approval.MaySee(who, a.Subject()), approval.MayDecide(who, a))
	}
	// Output:
	// acme/alice sees: true, may decide: the caller cannot approve their own call
	// acme/bob sees: true, may decide: <nil>
	// globex/bob sees: false, may decide: the rule does not name this approver
	// acme/erin sees: true, may decide: <nil>
	// globex/erin sees: false, may decide: the rule does not name this approver
}
