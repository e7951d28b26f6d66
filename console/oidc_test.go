package console

import (
	"context"
	"errors"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/interlock-mcp/interlock"
	"github.com/interlock-mcp/interlock/seal"
)

// TestSealedSignInFlows: a sign-in under way lives in its browser's
// cookie, sealed: it opens only in the console that sealed it, unaltered,
// within its ten minutes.
func TestSealedSignInFlows(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c, other := &Console{flows: boxes(t, seal.RandomKey())}, &Console{flows: boxes(t, seal.RandomKey())}
		f := oidcFlow{State: "s", Nonce: "n", Verifier: "v", Next: "/console/grants", Expires: time.Now().Add(flowTTL)}
		sealed := c.sealFlow(f)
		if strings.Contains(sealed, "/console/grants") || strings.Contains(sealed, `"v"`) {
			t.Errorf("the cookie shows what it holds: %s", sealed)
		}
		if got, ok := c.openFlow(sealed); !ok || got.State != "s" || got.Nonce != "n" || got.Verifier != "v" || got.Next != "/console/grants" {
			t.Fatalf("open = %+v, %t", got, ok)
		}
		flipped := []byte(sealed)
		flipped[len(flipped)/2] ^= 1
		for name, v := range map[string]string{
			"another console's": other.sealFlow(f),
			"altered":           string(flipped),
			"cut short":         sealed[:len(sealed)-4],
			"empty":             "",
			"not base64":        "%%%",
			"a bare nonce":      sealed[:10],
		} {
			if _, ok := c.openFlow(v); ok {
				t.Errorf("%s cookie opened", name)
			}
		}
		time.Sleep(flowTTL)
		if _, ok := c.openFlow(sealed); ok {
			t.Error("a flow opened after its ten minutes")
		}
	})
}

// TestFlowsAcrossReplicas: consoles of the same sealing keys open each
// other's sign-ins under way, through a rotation (new key first, old key
// kept); one with other sealing keys does not.
func TestFlowsAcrossReplicas(t *testing.T) {
	old, next := []byte(strings.Repeat("o", 32)), []byte(strings.Repeat("n", 32))
	f := oidcFlow{State: "s", Expires: time.Now().Add(flowTTL)}
	sealedBy := func(keys ...[]byte) string { return (&Console{flows: boxes(t, keys...)}).sealFlow(f) }
	tests := []struct {
		name   string
		sealed string
		opener [][]byte
		want   bool
	}{
		{"same keys", sealedBy(old), [][]byte{old}, true},
		{"sealed before a rotation, opened after", sealedBy(old), [][]byte{next, old}, true},
		{"sealed after a rotation, opened by one not yet rotated", sealedBy(next, old), [][]byte{old}, false},
		{"other keys", sealedBy(next), [][]byte{old}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, ok := (&Console{flows: boxes(t, tt.opener...)}).openFlow(tt.sealed); ok != tt.want {
				t.Errorf("opened: %v, want %v", ok, tt.want)
			}
		})
	}
}

// boxes is a sealer of keys.
func boxes(t *testing.T, keys ...[]byte) *seal.Sealer {
	s, err := seal.New(keys...)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestSessionsEndWithTheirCredential: a session made with the identity
// provider ends when the sign-in it came from does, and one whose
// credential the gateway no longer stands by ends at its next request.
func TestSessionsEndWithTheirCredential(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		gone := map[string]bool{}
		c := New(Options{Logger: quiet, SessionIdle: 24 * time.Hour,
			Recheck: func(_ context.Context, who interlock.Identity, cred Credential) (interlock.Identity, error) {
				if gone[cred.Ref] {
					return interlock.Identity{}, errors.New("gone")
				}
				return who, nil
			}})
		defer c.Close()
		carol := interlock.Identity{Tenant: "acme", Principal: "carol"}
		ctx := context.Background()
		open := func(cred Credential) (string, *session) {
			id, err := c.openSession(ctx, carol, cred)
			if err != nil {
				t.Fatal(err)
			}
			s, err := c.session(ctx, id, false)
			if err != nil || s == nil {
				t.Fatalf("a fresh session: %v", err)
			}
			return id, s
		}
		live := func(id string) bool {
			s, err := c.session(ctx, id, false)
			if err != nil {
				t.Fatal(err)
			}
			return s != nil
		}
		provided, s := open(Credential{Kind: CredentialProvider, Ref: "p", Expires: time.Now().Add(time.Hour)})
		keyed, k := open(Credential{Kind: CredentialKey, Ref: "k"})
		streams, release := c.endings.of(s.key)
		defer release()
		time.Sleep(time.Hour - time.Second)
		if !c.stands(ctx, s) || !c.stands(ctx, k) {
			t.Fatal("a session ended before its credential did")
		}
		time.Sleep(time.Second)
		if c.stands(ctx, s) {
			t.Error("a session outlived the identity provider's sign-in")
		}
		if live(provided) {
			t.Error("the ended session is still kept")
		}
		select {
		case <-streams:
		default:
			t.Error("the ended session's streams were not told")
		}
		gone["k"] = true
		if n := c.Recheck(ctx); n != 1 || live(keyed) {
			t.Errorf("Recheck ended %d sessions", n)
		}
	})
}
