package oauth_test

import (
	"context"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/interlock-mcp/interlock/oauth"
	"github.com/interlock-mcp/interlock/oauth/oauthtest"
)

const audience = "https://gateway.example/mcp"

// clock is a settable clock for the provider under test.
type clock struct{ now time.Time }

func (c *clock) Now() time.Time { return c.now }

func newProvider(t *testing.T, iss *oauthtest.Issuer, c *clock, claims oauth.Claims) *oauth.Provider {
	t.Helper()
	p, err := oauth.New(oauth.Config{Issuer: iss.URL, Audience: audience, Claims: claims, Now: c.Now})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestVerify(t *testing.T) {
	iss := oauthtest.Start(t)
	rsaKey, ecKey := iss.Keys()[0], iss.Keys()[1]
	with := func(change func(map[string]any)) map[string]any {
		c := iss.AccessClaims(audience, "alice")
		c["scope"] = "tools:call approvals"
		c["groups"] = []any{"finance", "ops"}
		change(c)
		return c
	}
	same := func(map[string]any) {}
	publicDER, err := x509.MarshalPKIXPublicKey(rsaKey.Private.Public())
	if err != nil {
		t.Fatal(err)
	}
	publicPEM := pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: publicDER})
	stranger := iss.NewRSAKey("rsa-1") // the published key's id, another key

	tests := []struct {
		name  string
		token string
		want  string // in the error; empty when valid
	}{
		{"valid RSA", iss.Sign(rsaKey, with(same), nil), ""},
		{"valid EC", iss.Sign(ecKey, with(same), nil), ""},
		{"typ application/at+jwt", iss.Sign(rsaKey, with(same), map[string]any{"typ": "application/at+jwt"}), ""},
		{"expired", iss.Sign(rsaKey, with(func(c map[string]any) { c["exp"] = time.Now().Add(-time.Minute).Unix() }), nil), "expired"},
		{"expired within the leeway", iss.Sign(rsaKey, with(func(c map[string]any) { c["exp"] = time.Now().Add(-10 * time.Second).Unix() }), nil), ""},
		{"not yet valid", iss.Sign(rsaKey, with(func(c map[string]any) { c["nbf"] = time.Now().Add(time.Minute).Unix() }), nil), "nbf"},
		{"issued in the future", iss.Sign(rsaKey, with(func(c map[string]any) { c["iat"] = time.Now().Add(time.Hour).Unix() }), nil), "iat"},
		{"wrong audience", iss.Sign(rsaKey, with(func(c map[string]any) { c["aud"] = "https://other.example/mcp" }), nil), "audience"},
		{"one of several audiences", iss.Sign(rsaKey, with(func(c map[string]any) { c["aud"] = []any{"https://other.example", audience} }), nil), ""},
		{"wrong issuer", iss.Sign(rsaKey, with(func(c map[string]any) { c["iss"] = "https://evil.example" }), nil), "issued by a different provider"},
		{"unknown key id", iss.Sign(iss.NewECKey("ec-9"), with(same), nil), "key id \"ec-9\""},
		{"another key under a known id", iss.Sign(stranger, with(same), nil), "verifies the signature"},
		{"alg none", oauthtest.Unsigned(with(same)), `algorithm "none"`},
		{"HS256 keyed with the public key", oauthtest.HMACSigned("rsa-1", publicPEM, with(same)), `algorithm "HS256"`},
		{"HS256 keyed with the DER key", oauthtest.HMACSigned("rsa-1", publicDER, with(same)), `algorithm "HS256"`},
		{"missing typ", iss.Sign(rsaKey, with(same), map[string]any{"typ": nil}), "typ"},
		{"an ID token's typ", iss.Sign(rsaKey, with(same), map[string]any{"typ": "JWT"}), "typ"},
		{"not a JWT", "opaque-token", "not a JWT"},
		{"tampered payload", tamper(iss.Sign(rsaKey, with(same), nil)), "signature"},
	}
	for _, claim := range []string{"iss", "exp", "aud", "sub", "client_id", "iat", "jti"} {
		tests = append(tests, struct {
			name  string
			token string
			want  string
		}{"missing " + claim, iss.Sign(rsaKey, with(func(c map[string]any) { delete(c, claim) }), nil), claim})
	}
	c := &clock{now: time.Now()}
	p := newProvider(t, iss, c, oauth.Claims{DefaultTenant: "default"})
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			id, err := p.Verify(context.Background(), tt.token)
			if tt.want == "" {
				if err != nil {
					t.Fatalf("Verify: %v", err)
				}
				if id.Principal != "alice" || id.Tenant != "default" || !slices.Equal(id.Groups, []string{"finance", "ops"}) ||
					!slices.Equal(id.Scopes, []string{"tools:call", "approvals"}) {
					t.Errorf("identity = %+v", id)
				}
				return
			}
			if err == nil || !errors.Is(err, oauth.ErrInvalidToken) || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Verify = %v, want an invalid token error saying %q", err, tt.want)
			}
		})
	}
}

func tamper(token string) string {
	parts := strings.Split(token, ".")
	parts[1] = parts[1][:len(parts[1])-2] + "xx"
	return strings.Join(parts, ".")
}

// TestKeyRotation: a token under a new key id fetches the keys again and
// passes; a key taken out of the set no longer verifies; made-up key ids
// fetch at most once per refresh interval.
func TestKeyRotation(t *testing.T) {
	iss := oauthtest.Start(t)
	c := &clock{now: time.Now()}
	p := newProvider(t, iss, c, oauth.Claims{})
	old := iss.Keys()[0]
	verify := func(key *oauthtest.Key) error {
		_, err := p.Verify(context.Background(), iss.Sign(key, iss.AccessClaims(audience, "alice"), nil))
		return err
	}
	if err := verify(old); err != nil {
		t.Fatalf("before the rotation: %v", err)
	}
	if n := iss.JWKSFetches(); n != 1 {
		t.Fatalf("JWKS fetched %d times for the first token, want 1", n)
	}
	next := iss.NewRSAKey("rsa-2")
	iss.Publish(next)
	c.now = c.now.Add(oauth.DefaultRefreshInterval)
	if err := verify(next); err != nil {
		t.Fatalf("a token of the new key: %v", err)
	}
	if err := verify(old); err == nil {
		t.Fatal("a token of the rotated-out key was accepted")
	}
	fetches := iss.JWKSFetches()
	for i := range 20 {
		if err := verify(iss.NewECKey("made-up-" + string(rune('a'+i)))); err == nil {
			t.Fatal("a token of an unpublished key was accepted")
		}
	}
	if n := iss.JWKSFetches(); n != fetches {
		t.Errorf("unknown key ids within the refresh interval fetched the JWKS %d more times, want none", n-fetches)
	}
	c.now = c.now.Add(oauth.DefaultRefreshInterval)
	_ = verify(iss.NewECKey("made-up-later"))
	if n := iss.JWKSFetches(); n != fetches+1 {
		t.Errorf("after the interval: %d fetches, want %d", n, fetches+1)
	}
}

func TestClaimMapping(t *testing.T) {
	iss := oauthtest.Start(t)
	tests := []struct {
		name   string
		names  oauth.Claims
		claims map[string]any
		want   oauth.Identity
		err    string
	}{
		{"defaults", oauth.Claims{DefaultTenant: "default"}, map[string]any{"groups": "a b"},
			oauth.Identity{Principal: "user-1", Tenant: "default", Groups: []string{"a", "b"}}, ""},
		{"named claims", oauth.Claims{Principal: "email", Tenant: "org", Groups: "roles"},
			map[string]any{"email": "ann@example.com", "org": "acme", "roles": []any{"approvers"}, "scp": []any{"x", "y"}},
			oauth.Identity{Principal: "ann@example.com", Tenant: "acme", Groups: []string{"approvers"}, Scopes: []string{"x", "y"}}, ""},
		{"tenant claim missing", oauth.Claims{Tenant: "org"}, map[string]any{}, oauth.Identity{}, "claim org (the tenant)"},
		{"principal claim missing", oauth.Claims{Principal: "email"}, map[string]any{}, oauth.Identity{}, "claim email (the principal)"},
		{"principal not a string", oauth.Claims{Principal: "email"}, map[string]any{"email": 7}, oauth.Identity{}, "claim email (the principal)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := newProvider(t, iss, &clock{now: time.Now()}, tt.names)
			claims := iss.AccessClaims(audience, "user-1")
			maps.Copy(claims, tt.claims)
			id, err := p.Verify(context.Background(), iss.Sign(nil, claims, nil))
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("Verify = %v, want %q", err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if id.Principal != tt.want.Principal || id.Tenant != tt.want.Tenant || !slices.Equal(id.Groups, tt.want.Groups) ||
				!slices.Equal(id.Scopes, tt.want.Scopes) {
				t.Errorf("identity = %+v, want %+v", id, tt.want)
			}
		})
	}
}

// TestConfiguredJWKSURL: with jwks_url given, discovery is never asked.
func TestConfiguredJWKSURL(t *testing.T) {
	iss := oauthtest.Start(t)
	p, err := oauth.New(oauth.Config{Issuer: iss.URL, Audience: audience, JWKSURL: iss.URL + "/jwks"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Verify(context.Background(), iss.Sign(nil, iss.AccessClaims(audience, "a"), nil)); err != nil {
		t.Fatal(err)
	}
	p, err = oauth.New(oauth.Config{Issuer: iss.URL, Audience: audience, JWKSURL: iss.URL + "/nowhere"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Verify(context.Background(), iss.Sign(nil, iss.AccessClaims(audience, "a"), nil)); err == nil ||
		!strings.Contains(err.Error(), "404") {
		t.Errorf("keys from a wrong URL: %v", err)
	}
}

// TestSignIn: the code redeems only with the verifier of its challenge,
// and the ID token only with the nonce of its flow; then the ID token's
// claims name the approver.
func TestSignIn(t *testing.T) {
	iss := oauthtest.Start(t)
	const redirect = "https://gateway.example/console/oidc/callback"
	iss.Register(oauthtest.Client{ID: "console", Secret: "s", RedirectURI: redirect})
	iss.SignInAs(map[string]any{"sub": "u-1", "email": "ann@example.com", "groups": []any{"finance"}}, audience)
	p := newProvider(t, iss, &clock{now: time.Now()}, oauth.Claims{Principal: "email", DefaultTenant: "default"})
	s := p.SignIn("console", "s", redirect, "groups", "email")
	noRedirects := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	code := func(verifier string) string {
		t.Helper()
		u, err := s.AuthURL(context.Background(), "state-1", "nonce-1", verifier)
		if err != nil {
			t.Fatal(err)
		}
		q, _ := url.Parse(u)
		if q.Query().Get("code_challenge_method") != "S256" || q.Query().Get("nonce") != "nonce-1" || q.Query().Get("scope") != "openid profile email groups" {
			t.Fatalf("authorization URL %s", u)
		}
		res, err := noRedirects.Get(u)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		back, _ := url.Parse(res.Header.Get("Location"))
		if back.Query().Get("state") != "state-1" {
			t.Fatalf("sent back to %s", back)
		}
		return back.Query().Get("code")
	}
	verifier := strings.Repeat("v", 43)
	if _, err := s.Exchange(context.Background(), code(verifier), strings.Repeat("w", 43), "nonce-1"); err == nil {
		t.Error("a code redeemed with another verifier")
	}
	if _, err := s.Exchange(context.Background(), code(verifier), verifier, "nonce-2"); err == nil || !strings.Contains(err.Error(), "nonce") {
		t.Errorf("an ID token of another flow's nonce: %v", err)
	}
	id, err := s.Exchange(context.Background(), code(verifier), verifier, "nonce-1")
	if err != nil {
		t.Fatal(err)
	}
	if id.Principal != "ann@example.com" || id.Tenant != "default" || !slices.Equal(id.Groups, []string{"finance"}) {
		t.Errorf("identity = %+v", id)
	}
	// An ID token for several clients signs in only the one it names as
	// its authorized party.
	for _, tt := range []struct {
		name   string
		claims map[string]any
		ok     bool
	}{
		{"one audience, no azp", map[string]any{"aud": "console"}, true},
		{"one audience, azp this client", map[string]any{"aud": "console", "azp": "console"}, true},
		{"one audience, azp another client", map[string]any{"aud": "console", "azp": "other"}, false},
		{"several audiences, no azp", map[string]any{"aud": []any{"other", "console"}}, false},
		{"several audiences, azp another client", map[string]any{"aud": []any{"other", "console"}, "azp": "other"}, false},
		{"several audiences, azp this client", map[string]any{"aud": []any{"other", "console"}, "azp": "console"}, true},
		{"several audiences, azp not a string", map[string]any{"aud": []any{"other", "console"}, "azp": []any{"console"}}, false},
		{"several audiences, azp differs in case", map[string]any{"aud": []any{"other", "console"}, "azp": "Console"}, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			iss.OverrideIDClaims(tt.claims)
			defer iss.OverrideIDClaims(nil)
			_, err := s.Exchange(context.Background(), code(verifier), verifier, "nonce-1")
			if (err == nil) != tt.ok {
				t.Errorf("signed in: %t (%v), want %t", err == nil, err, tt.ok)
			}
		})
	}
}

// TestJWTProfile: with the jwt profile, the plain JWT access tokens many
// identity providers issue pass (typ JWT or none, no client_id, iat or
// jti), and everything that makes a token unsafe is refused as before.
func TestJWTProfile(t *testing.T) {
	iss := oauthtest.Start(t)
	rsaKey := iss.Keys()[0]
	plain := func(change func(map[string]any)) map[string]any {
		c := iss.AccessClaims(audience, "alice")
		delete(c, "client_id")
		delete(c, "jti")
		delete(c, "iat")
		change(c)
		return c
	}
	same := func(map[string]any) {}
	p, err := oauth.New(oauth.Config{Issuer: iss.URL, Audience: audience, Profile: oauth.ProfileJWT})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name  string
		token string
		want  string // in the error; empty when valid
	}{
		{"typ JWT without client_id, iat or jti", iss.Sign(rsaKey, plain(same), map[string]any{"typ": "JWT"}), ""},
		{"no typ", iss.Sign(rsaKey, plain(same), map[string]any{"typ": nil}), ""},
		{"typ at+jwt", iss.Sign(rsaKey, plain(same), nil), ""},
		{"another type", iss.Sign(rsaKey, plain(same), map[string]any{"typ": "logout+jwt"}), "typ"},
		{"an ID token: the audience is the client", iss.Sign(rsaKey, plain(func(c map[string]any) { c["aud"] = "interlock-console" }), map[string]any{"typ": "JWT"}), "audience"},
		{"missing sub", iss.Sign(rsaKey, plain(func(c map[string]any) { delete(c, "sub") }), nil), "sub"},
		{"missing exp", iss.Sign(rsaKey, plain(func(c map[string]any) { delete(c, "exp") }), nil), "exp"},
		{"expired", iss.Sign(rsaKey, plain(func(c map[string]any) { c["exp"] = time.Now().Add(-time.Minute).Unix() }), nil), "expired"},
		{"alg none", oauthtest.Unsigned(plain(same)), `algorithm "none"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			id, err := p.Verify(context.Background(), tt.token)
			if tt.want == "" {
				if err != nil || id.Principal != "alice" {
					t.Fatalf("Verify = %+v, %v", id, err)
				}
				return
			}
			if err == nil || !errors.Is(err, oauth.ErrInvalidToken) || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Verify = %v, want an invalid token error saying %q", err, tt.want)
			}
		})
	}
	if _, err := oauth.New(oauth.Config{Issuer: iss.URL, Audience: audience, Profile: "lenient"}); err == nil {
		t.Error("an unknown profile was accepted")
	}
}
