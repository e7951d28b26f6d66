package oauth_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/interlock-mcp/interlock/oauth"
	"github.com/interlock-mcp/interlock/oauth/oauthtest"
)

// The gateway's client at the test issuer; the secret has characters that
// must be form-encoded in the Basic credentials.
const (
	introspectionClient = "interlock-gateway"
	introspectionSecret = "s3cr=t&:%"
)

// introspecting returns a provider that introspects every token at the
// issuer's discovered endpoint, unless in says otherwise.
func introspecting(t *testing.T, iss *oauthtest.Issuer, c *clock, in oauth.Introspection) *oauth.Provider {
	t.Helper()
	iss.Register(oauthtest.Client{ID: introspectionClient, Secret: introspectionSecret})
	if in.ClientID == "" {
		in.ClientID, in.ClientSecret = introspectionClient, introspectionSecret
	}
	p, err := oauth.New(oauth.Config{Issuer: iss.URL, Audience: audience, Now: c.Now, Introspection: &in})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// refusedAsInvalid fails the test unless err refuses a token as invalid.
func refusedAsInvalid(t *testing.T, err error, what string) {
	t.Helper()
	if !errors.Is(err, oauth.ErrInvalidToken) || errors.Is(err, oauth.ErrIntrospectionFailed) {
		t.Errorf("%s: %v, want an invalid token", what, err)
	}
}

// refusedUnconfirmed fails the test unless err refuses a token the
// endpoint did not confirm, and not as an invalid one.
func refusedUnconfirmed(t *testing.T, err error, what string) {
	t.Helper()
	if !errors.Is(err, oauth.ErrIntrospectionFailed) || errors.Is(err, oauth.ErrInvalidToken) {
		t.Errorf("%s: %v, want a refusal for want of the endpoint's answer", what, err)
	}
}

// TestIntrospection: an active token passes and its answer is kept; a
// revoked one is refused; a token revoked after its answer was kept passes
// until the cache time is over, and not after.
func TestIntrospection(t *testing.T) {
	iss := oauthtest.Start(t)
	c := &clock{now: time.Now()}
	p := introspecting(t, iss, c, oauth.Introspection{})
	verify := func(token string) error {
		_, err := p.Verify(context.Background(), token)
		return err
	}
	good := iss.Sign(nil, iss.AccessClaims(audience, "alice"), nil)
	if err := verify(good); err != nil {
		t.Fatalf("an active token: %v", err)
	}
	if err := verify(good); err != nil || iss.Introspections() != 1 {
		t.Fatalf("the same token again: %v, %d introspections, want 1", err, iss.Introspections())
	}

	revoked := iss.Sign(nil, iss.AccessClaims(audience, "alice"), nil)
	iss.Revoke(revoked)
	err := verify(revoked)
	refusedAsInvalid(t, err, "a revoked token")
	if err == nil || !strings.Contains(err.Error(), "not active") {
		t.Errorf("a revoked token: %v, want it called not active", err)
	}

	iss.Revoke(good)
	c.now = c.now.Add(oauth.DefaultIntrospectionCache - time.Second)
	if err := verify(good); err != nil {
		t.Errorf("revoked while its answer is kept: %v, want it accepted until the cache time is over", err)
	}
	c.now = c.now.Add(time.Second)
	refusedAsInvalid(t, verify(good), "revoked, once the cache time is over")
	asked := iss.Introspections()
	refusedAsInvalid(t, verify(good), "revoked, again")
	if n := iss.Introspections(); n != asked {
		t.Errorf("the inactive answer was not kept: %d more introspections", n-asked)
	}
}

// TestIntrospectionCacheTime: the configured cache time holds, but never
// beyond the token's expiry.
func TestIntrospectionCacheTime(t *testing.T) {
	iss := oauthtest.Start(t)
	c := &clock{now: time.Now()}
	p := introspecting(t, iss, c, oauth.Introspection{Cache: 5 * time.Second})
	verify := func(token string) error {
		_, err := p.Verify(context.Background(), token)
		return err
	}
	token := iss.Sign(nil, iss.AccessClaims(audience, "alice"), nil)
	if err := verify(token); err != nil {
		t.Fatal(err)
	}
	iss.Revoke(token)
	c.now = c.now.Add(4 * time.Second)
	if err := verify(token); err != nil {
		t.Errorf("within the 5s cache: %v", err)
	}
	c.now = c.now.Add(time.Second)
	refusedAsInvalid(t, verify(token), "after the 5s cache")

	// A token that expires in 2s (and is honoured for the 30s leeway
	// after) has its answer kept for 2s, not 5.
	c.now = time.Now()
	p = introspecting(t, iss, c, oauth.Introspection{Cache: 5 * time.Second})
	claims := iss.AccessClaims(audience, "alice")
	claims["exp"] = c.now.Add(2 * time.Second).Unix()
	short := iss.Sign(nil, claims, nil)
	if err := verify(short); err != nil {
		t.Fatal(err)
	}
	iss.Revoke(short)
	c.now = c.now.Add(3 * time.Second)
	refusedAsInvalid(t, verify(short), "revoked, past its expiry but within the leeway")
}

// TestIntrospectionUnavailable: when the endpoint cannot be reached or
// gives no usable answer, the token is refused, not as invalid; a kept
// answer still holds for its time; nothing is kept of a failure.
func TestIntrospectionUnavailable(t *testing.T) {
	iss := oauthtest.Start(t)
	c := &clock{now: time.Now()}
	p := introspecting(t, iss, c, oauth.Introspection{})
	verify := func(p *oauth.Provider, token string) error {
		_, err := p.Verify(context.Background(), token)
		return err
	}
	kept := iss.Sign(nil, iss.AccessClaims(audience, "alice"), nil)
	if err := verify(p, kept); err != nil {
		t.Fatal(err)
	}
	iss.FailIntrospection(http.StatusServiceUnavailable)
	fresh := iss.Sign(nil, iss.AccessClaims(audience, "alice"), nil)
	err := verify(p, fresh)
	refusedUnconfirmed(t, err, "the endpoint answers 503")
	if err == nil || strings.Contains(err.Error(), fresh) || !strings.Contains(err.Error(), "503") {
		t.Errorf("the error %v should say 503 and never hold the token", err)
	}
	if err := verify(p, kept); err != nil {
		t.Errorf("a token whose answer is kept, while the endpoint is down: %v", err)
	}
	c.now = c.now.Add(oauth.DefaultIntrospectionCache)
	refusedUnconfirmed(t, verify(p, kept), "once its answer's time is over, while the endpoint is down")
	iss.FailIntrospection(0)
	if err := verify(p, fresh); err != nil {
		t.Errorf("the endpoint is back: %v", err)
	}

	gone := httptest.NewServer(http.NotFoundHandler())
	gone.Close()
	unreachable := introspecting(t, iss, c, oauth.Introspection{URL: gone.URL + "/introspect"})
	refusedUnconfirmed(t, verify(unreachable, fresh), "an endpoint nobody listens at")

	wrongSecret := introspecting(t, iss, c, oauth.Introspection{ClientID: introspectionClient, ClientSecret: "wrong"})
	refusedUnconfirmed(t, verify(wrongSecret, fresh), "a wrong client secret")

	for _, answer := range []string{`{}`, `{"active": "true"}`, `{"active": 1}`, `active`} {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write([]byte(answer))
		}))
		odd := introspecting(t, iss, c, oauth.Introspection{URL: srv.URL})
		refusedUnconfirmed(t, verify(odd, fresh), "the answer "+answer)
		srv.Close()
	}
}

// TestIntrospectionCacheBounded: past MaxEntries answers, the oldest is
// forgotten and its token asked about again.
func TestIntrospectionCacheBounded(t *testing.T) {
	iss := oauthtest.Start(t)
	c := &clock{now: time.Now()}
	p := introspecting(t, iss, c, oauth.Introspection{MaxEntries: 2})
	tokens := make([]string, 3)
	for i := range tokens {
		tokens[i] = iss.Sign(nil, iss.AccessClaims(audience, "alice"), nil)
	}
	asks := func(token string) int64 {
		t.Helper()
		before := iss.Introspections()
		if _, err := p.Verify(context.Background(), token); err != nil {
			t.Fatal(err)
		}
		return iss.Introspections() - before
	}
	for i, token := range tokens {
		if n := asks(token); n != 1 {
			t.Fatalf("token %d asked about %d times, want 1", i, n)
		}
	}
	for _, tt := range []struct {
		token int
		want  int64
	}{
		{2, 0}, {1, 0}, // kept
		{0, 1}, // the oldest, evicted by the third; its answer evicts token 1's
		{2, 0}, {0, 0},
		{1, 1},
	} {
		if n := asks(tokens[tt.token]); n != tt.want {
			t.Errorf("token %d asked about %d times, want %d", tt.token, n, tt.want)
		}
	}
}
