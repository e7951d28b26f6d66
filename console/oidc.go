package console

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"time"

	"github.com/interlock-mcp/interlock"
	"github.com/interlock-mcp/interlock/consolestate"
)

// IdentityProvider signs approvers in with an OpenID provider: the
// authorization code flow with PKCE, state and nonce. The console makes
// the state, nonce and verifier and seals them into a cookie of the
// browser that started the sign-in, until the provider sends it back.
type IdentityProvider interface {
	// AuthURL is where to send the browser to sign in.
	AuthURL(ctx context.Context, state, nonce, verifier string) (string, error)
	// Exchange redeems the code the provider sent back and returns whom
	// its ID token names, and when that sign-in ends (the ID token's
	// expiry): the console session made from it ends then too.
	Exchange(ctx context.Context, code, verifier, nonce string) (interlock.Identity, time.Time, error)
}

// Paths of the sign-in with the identity provider. The provider sends
// the browser back to CallbackPath.
const (
	oidcStartPath = "/console/oidc/start"
	CallbackPath  = "/console/oidc/callback"
	oidcCookie    = "interlock_console_oidc"
)

// oidcFlow is a sign-in waiting for the provider's answer. It lives in
// the cookie of the browser that started it, sealed with the console's
// key. The store keeps only a one-time mark of it, under ID, which the
// callback spends: a provider may redeem a code more than once, and the
// cookie sent back again with the same callback must not sign in again.
// Marks are not counted, so no number of requests to start sign-ins can
// crowd out a real one; each goes when its flow expires.
type oidcFlow struct {
	// ID names the flow's mark. Unlike the state and the nonce, which the
	// browser carries to the provider, it never leaves the sealed cookie:
	// nobody can present its mark as a one-time sign-in link.
	ID       string    `json:"i"`
	State    string    `json:"s"`
	Nonce    string    `json:"n"`
	Verifier string    `json:"v"`
	Next     string    `json:"x"`
	Expires  time.Time `json:"e"`
}

const flowTTL = 10 * time.Minute

// flowAAD binds a sealed flow to its purpose.
var flowAAD = []byte("interlock console sign-in v1")

// sealFlow returns f boxed for a cookie.
func (c *Console) sealFlow(f oidcFlow) string {
	plain, _ := json.Marshal(f) // strings and a time always encode
	return base64.RawURLEncoding.EncodeToString(c.flows.Box(plain, flowAAD))
}

// openFlow returns the flow a cookie holds, if a console with one of this
// console's keys boxed it and it has not expired.
func (c *Console) openFlow(v string) (oidcFlow, bool) {
	b, err := base64.RawURLEncoding.DecodeString(v)
	if err != nil {
		return oidcFlow{}, false
	}
	plain, err := c.flows.Unbox(b, flowAAD)
	if err != nil {
		return oidcFlow{}, false
	}
	var f oidcFlow
	if json.Unmarshal(plain, &f) != nil || !time.Now().Before(f.Expires) {
		return oidcFlow{}, false
	}
	return f, true
}

// setFlowCookie binds a sign-in to the browser that started it. Unlike
// the console's other cookies it is SameSite=Lax: the provider's redirect
// back is a navigation from another site, on which a Strict cookie would
// not be sent.
func setFlowCookie(w http.ResponseWriter, r *http.Request, value string, maxAge int) {
	http.SetCookie(w, &http.Cookie{Name: oidcCookie, Value: value, Path: "/console/oidc/", MaxAge: maxAge, HttpOnly: true,
		Secure: r.TLS != nil, SameSite: http.SameSiteLaxMode})
}

// oidcStart sends the browser to the identity provider.
func (c *Console) oidcStart(w http.ResponseWriter, r *http.Request) {
	f := oidcFlow{ID: randomToken(), State: randomToken(), Nonce: randomToken(), Verifier: randomToken(), Next: safeNext(r.URL.Query().Get("next")),
		Expires: time.Now().Add(flowTTL)}
	target, err := c.signInWith.AuthURL(r.Context(), f.State, f.Nonce, f.Verifier)
	if err != nil {
		c.log.ErrorContext(r.Context(), "console sign-in with the identity provider", "error", err)
		c.showLogin(w, r, http.StatusServiceUnavailable, "The identity provider cannot be reached right now. Try again in a moment.")
		return
	}
	// The mark is a one-time link that signs nobody in: the callback
	// spends it, and any replica sharing the store sees it spent.
	if err := c.state.AddLink(r.Context(), consolestate.Key(f.ID), interlock.Identity{}, f.Expires); err != nil {
		c.unavailable(w, r, err)
		return
	}
	setFlowCookie(w, r, c.sealFlow(f), int(flowTTL/time.Second))
	http.Redirect(w, r, target, http.StatusSeeOther)
}

// oidcCallback finishes a sign-in: the state must be the one this
// browser started with, the flow's mark must not be spent yet, the code
// must redeem, and the ID token must verify with the flow's nonce.
func (c *Console) oidcCallback(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	ck, err := r.Cookie(oidcCookie)
	setFlowCookie(w, r, "", -1)
	refuse := func(why, message string) {
		c.refuse(r, why)
		c.showLogin(w, r, http.StatusUnauthorized, message)
	}
	if err != nil {
		refuse("a state this browser did not start", "This sign-in was not started in this browser, or took too long. Sign in again.")
		return
	}
	flow, ok := c.openFlow(ck.Value)
	if !ok || !sameToken(q.Get("state"), flow.State) {
		refuse("a state this browser did not start", "This sign-in was not started in this browser, or took too long. Sign in again.")
		return
	}
	// Spent before the code is redeemed: of any number of callbacks
	// with this cookie, on any replica, one goes on.
	_, fresh, err := c.state.SpendLink(r.Context(), consolestate.Key(flow.ID), time.Now())
	if err != nil {
		c.unavailable(w, r, err)
		return
	}
	if !fresh {
		refuse("a sign-in already used", "This sign-in was already used: each sign-in with the identity provider signs in once. Sign in again.")
		return
	}
	if e := q.Get("error"); e != "" {
		refuse("the identity provider's refusal", "The identity provider did not sign you in. Sign in again, or ask its administrator for access.")
		return
	}
	who, ends, err := c.signInWith.Exchange(r.Context(), q.Get("code"), flow.Verifier, flow.Nonce)
	if err != nil {
		c.log.WarnContext(r.Context(), "console sign-in with the identity provider", "error", err)
		refuse("an answer of the identity provider that did not verify", "The identity provider's answer could not be verified. Sign in again.")
		return
	}
	c.startSession(w, r, who, Credential{Kind: CredentialProvider, Expires: ends})
	// A page of the console's own sends the browser on: the redirect
	// chain began on the provider's site, and the browser would not send
	// the Strict session cookie on a redirect within it.
	c.render(w, r, http.StatusOK, "message", page{Title: "Signed in", Refresh: flow.Next,
		Message: fmt.Sprintf("Signed in as %s. Taking you to the console…", who.Principal)})
}
