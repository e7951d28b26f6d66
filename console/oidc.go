package console

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/interlock-mcp/interlock"
)

// IdentityProvider signs approvers in with an OpenID provider: the
// authorization code flow with PKCE, state and nonce. The console makes
// the state, nonce and verifier, keeps them until the provider sends the
// browser back, and binds them to the browser with a cookie.
type IdentityProvider interface {
	// AuthURL is where to send the browser to sign in.
	AuthURL(ctx context.Context, state, nonce, verifier string) (string, error)
	// Exchange redeems the code the provider sent back and returns whom
	// its ID token names.
	Exchange(ctx context.Context, code, verifier, nonce string) (interlock.Identity, error)
}

// Paths of the sign-in with the identity provider. The provider sends
// the browser back to CallbackPath.
const (
	oidcStartPath = "/console/oidc/start"
	CallbackPath  = "/console/oidc/callback"
	oidcCookie    = "interlock_console_oidc"
)

// oidcFlow is a sign-in waiting for the provider's answer.
type oidcFlow struct {
	nonce, verifier, next string
	expires               time.Time
}

// oidcFlows are the sign-ins under way, by state. They are few and short:
// a browser that never comes back leaves one for ten minutes, and there
// are at most maxFlows, so requests to start sign-ins cannot fill memory.
type oidcFlows struct {
	mu    sync.Mutex
	byKey map[string]oidcFlow
}

const (
	flowTTL  = 10 * time.Minute
	maxFlows = 10_000
)

func (fs *oidcFlows) put(state string, f oidcFlow) bool {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	if len(fs.byKey) >= maxFlows {
		now := time.Now()
		for k, old := range fs.byKey {
			if now.After(old.expires) {
				delete(fs.byKey, k)
			}
		}
		if len(fs.byKey) >= maxFlows {
			return false
		}
	}
	fs.byKey[state] = f
	return true
}

// take returns the flow of state, once.
func (fs *oidcFlows) take(state string) (oidcFlow, bool) {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	f, ok := fs.byKey[state]
	delete(fs.byKey, state)
	return f, ok && time.Now().Before(f.expires)
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
	state, nonce, verifier := randomToken(), randomToken(), randomToken()
	target, err := c.signInWith.AuthURL(r.Context(), state, nonce, verifier)
	if err != nil {
		c.log.ErrorContext(r.Context(), "console sign-in with the identity provider", "error", err)
		c.showLogin(w, r, http.StatusServiceUnavailable, "The identity provider cannot be reached right now. Try again in a moment.")
		return
	}
	if !c.flows.put(state, oidcFlow{nonce: nonce, verifier: verifier, next: safeNext(r.URL.Query().Get("next")),
		expires: time.Now().Add(flowTTL)}) {
		c.showLogin(w, r, http.StatusServiceUnavailable, "Too many sign-ins are under way. Try again in a few minutes.")
		return
	}
	setFlowCookie(w, r, state, int(flowTTL/time.Second))
	http.Redirect(w, r, target, http.StatusSeeOther)
}

// oidcCallback finishes a sign-in: the state must be the one this
// browser started with, the code must redeem, and the ID token must
// verify with the flow's nonce.
func (c *Console) oidcCallback(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	state := q.Get("state")
	ck, err := r.Cookie(oidcCookie)
	setFlowCookie(w, r, "", -1)
	refuse := func(why, message string) {
		c.gate.RecordEvent(r.Context(), &interlock.AuditRecord{Event: "auth_refused",
			Detail: fmt.Sprintf("console sign-in from %s with %s", r.RemoteAddr, why)})
		c.showLogin(w, r, http.StatusUnauthorized, message)
	}
	if err != nil || !sameToken(state, ck.Value) {
		refuse("a state this browser did not start", "This sign-in was not started in this browser, or took too long. Sign in again.")
		return
	}
	flow, ok := c.flows.take(state)
	if !ok {
		refuse("an unknown or expired state", "This sign-in was already used or took too long. Sign in again.")
		return
	}
	if e := q.Get("error"); e != "" {
		refuse("the identity provider's refusal", "The identity provider did not sign you in. Sign in again, or ask its administrator for access.")
		return
	}
	who, err := c.signInWith.Exchange(r.Context(), q.Get("code"), flow.verifier, flow.nonce)
	if err != nil {
		c.log.WarnContext(r.Context(), "console sign-in with the identity provider", "error", err)
		refuse("an answer of the identity provider that did not verify", "The identity provider's answer could not be verified. Sign in again.")
		return
	}
	c.startSession(w, r, who, "the identity provider")
	// A page of the console's own sends the browser on: the redirect
	// chain began on the provider's site, and the browser would not send
	// the Strict session cookie on a redirect within it.
	c.render(w, r, http.StatusOK, "message", page{Title: "Signed in", Refresh: flow.next,
		Message: fmt.Sprintf("Signed in as %s. Taking you to the console…", who.Principal)})
}
