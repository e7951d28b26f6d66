// Package approval is out-of-band approval's domain: who acts
// ([Identity]), the [Approval] of one call and its votes, [StandingGrant]s,
// and the pure rules that answer every question about them — may this
// identity see an approval, a grant or a line of history, may it decide,
// may it revoke, does a grant cover this call.
//
// # One answer for every face
//
// The REST face, the console's pages and its live events, history, the
// command line and notifications all ask the functions of rules.go, so two
// faces can never disagree about who sees or decides what. Stores apply
// the same state transitions ([Approval.AddVote], [Approval.Consume],
// [StandingGrant.Use]) inside their own transactions.
//
// # Identity is a pair
//
// Principal names are unique only within a tenant. No rule here compares a
// name alone: an identity is (tenant, principal), and the approvers a rule
// names are names within the tenant of the call they approve.
package approval

import (
	"slices"
	"strings"
)

// Identity is who acts: a principal of a tenant, with the groups its
// credential names. Two identities are the same person when their tenant
// and principal are ([Identity.Is]); groups only say what rules may name
// them by.
type Identity struct {
	Tenant    string
	Principal string
	Groups    []string
}

// Is reports whether i and o are the same principal of the same tenant.
func (i Identity) Is(o Identity) bool { return i.Tenant == o.Tenant && i.Principal == o.Principal }

// Named reports whether names (principals, or groups as "group:NAME")
// name i, by principal or by one of its groups. Names carry no tenant: the
// caller of Named has already checked that i acts for the tenant the names
// belong to.
func (i Identity) Named(names []string) bool {
	for _, name := range names {
		if g, ok := strings.CutPrefix(name, "group:"); ok {
			if slices.Contains(i.Groups, g) {
				return true
			}
		} else if name == i.Principal {
			return true
		}
	}
	return false
}
