package console

import (
	"context"
	"testing"

	"github.com/go-webauthn/webauthn/webauthn"

	"github.com/interlock-mcp/interlock"
	"github.com/interlock-mcp/interlock/consolestate"
)

// TestForgetPasskeys: the passkeys of an approver no credential names any
// more are dropped; those of the same principal name in another tenant,
// and of approvers still named, stay.
func TestForgetPasskeys(t *testing.T) {
	ctx := context.Background()
	p := &passkeys{state: consolestate.NewMemory()}
	bob := interlock.Identity{Tenant: "acme", Principal: "bob"}
	otherBob := interlock.Identity{Tenant: "other", Principal: "bob"}
	carol := interlock.Identity{Tenant: "acme", Principal: "carol"}
	for _, who := range []interlock.Identity{bob, otherBob, carol} {
		if err := p.add(ctx, who, registered{credential: webauthn.Credential{ID: []byte(who.Tenant + "/" + who.Principal)}, rpID: "localhost"}); err != nil {
			t.Fatal(err)
		}
	}
	gone, err := p.forget(ctx, func(who interlock.Identity) bool { return who.Is(bob) })
	if err != nil || len(gone) != 1 || !gone[0].Is(bob) {
		t.Fatalf("forgot %v (%v)", gone, err)
	}
	for _, tt := range []struct {
		who  interlock.Identity
		want int
	}{{bob, 0}, {otherBob, 1}, {carol, 1}} {
		a, err := p.account(ctx, tt.who)
		if err != nil {
			t.Fatal(err)
		}
		if got := len(a.forHost("localhost")); got != tt.want {
			t.Errorf("%s/%s has %d passkeys, want %d", tt.who.Tenant, tt.who.Principal, got, tt.want)
		}
	}
}
