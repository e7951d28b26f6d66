package console

import (
	"testing"

	"github.com/go-webauthn/webauthn/webauthn"

	"github.com/interlock-mcp/interlock"
)

// TestForgetPasskeys: the passkeys of an approver no credential names any
// more are dropped; those of the same principal name in another tenant,
// and of approvers still named, stay.
func TestForgetPasskeys(t *testing.T) {
	p := newPasskeys()
	bob := interlock.Identity{Tenant: "acme", Principal: "bob"}
	otherBob := interlock.Identity{Tenant: "other", Principal: "bob"}
	carol := interlock.Identity{Tenant: "acme", Principal: "carol"}
	for _, who := range []interlock.Identity{bob, otherBob, carol} {
		p.account(who)
		p.add(who, registered{credential: webauthn.Credential{ID: []byte(who.Tenant + "/" + who.Principal)}, rpID: "localhost"})
	}
	gone := p.forget(func(who interlock.Identity) bool { return who.Is(bob) })
	if len(gone) != 1 || !gone[0].Is(bob) {
		t.Fatalf("forgot %v", gone)
	}
	for _, tt := range []struct {
		who  interlock.Identity
		want int
	}{{bob, 0}, {otherBob, 1}, {carol, 1}} {
		if got := len(p.account(tt.who).forHost("localhost")); got != tt.want {
			t.Errorf("%s/%s has %d passkeys, want %d", tt.who.Tenant, tt.who.Principal, got, tt.want)
		}
	}
}
