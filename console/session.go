package console

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/base64"
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/go-webauthn/webauthn/webauthn"

	"github.com/interlock-mcp/interlock"
	"github.com/interlock-mcp/interlock/audit"
)

// Cookie names. The session cookie is scoped to the console; the login
// cookie only lives between the login form and its answer.
const (
	sessionCookie = "interlock_console"
	loginCookie   = "interlock_console_login"
)

// Credential is what a console session stands on: how its approver
// signed in, and what to ask the gateway again ([Options.Recheck]). A
// session lasts no longer than its credential: when a key is removed or
// changed, its tenant or groups change, or an identity provider's sign-in
// reaches its end, every session made from it ends at once.
type Credential struct {
	// Kind is how the approver signed in.
	Kind string
	// Ref names the credential to the gateway, such as an API key's
	// SHA-256; never the secret itself.
	Ref string
	// Expires, when set, ends the session whatever else holds: the end of
	// the identity provider's sign-in (its ID token's lifetime).
	Expires time.Time
}

// The kinds of credential a session stands on.
const (
	CredentialKey      = "key"
	CredentialProvider = "identity provider"
	CredentialLink     = "one-time link"
)

// session is one signed-in approver.
type session struct {
	who  interlock.Identity
	cred Credential
	csrf string
	// ended is closed when the session ends, so its event streams stop
	// at once.
	ended chan struct{}

	mu       sync.Mutex
	lastSeen time.Time
	flash    string
	// registration is the challenge of the passkey page last shown.
	registration *webauthn.SessionData
}

func (s *session) setRegistration(r *webauthn.SessionData) {
	s.mu.Lock()
	s.registration = r
	s.mu.Unlock()
}

// takeRegistration returns the registration challenge, once.
func (s *session) takeRegistration() *webauthn.SessionData {
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.registration
	s.registration = nil
	return r
}

// takeFlash returns the message left for the next page, once.
func (s *session) takeFlash() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	f := s.flash
	s.flash = ""
	return f
}

func (s *session) setFlash(msg string) {
	s.mu.Lock()
	s.flash = msg
	s.mu.Unlock()
}

// sessions are kept in memory: signing in again after a restart is cheap,
// and nothing a session holds must outlive the process.
type sessions struct {
	idle time.Duration

	mu   sync.Mutex
	byID map[string]*session
	once map[string]interlock.Identity
}

func newSessions(idle time.Duration) *sessions {
	return &sessions{idle: idle, byID: map[string]*session{}, once: map[string]interlock.Identity{}}
}

// randomToken returns 32 random bytes, URL-safe.
func randomToken() string {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		panic(err)
	}
	return base64.RawURLEncoding.EncodeToString(b)
}

// oneTime returns a token that signs who in once.
func (ss *sessions) oneTime(who interlock.Identity) string {
	t := randomToken()
	ss.mu.Lock()
	ss.once[t] = who
	ss.mu.Unlock()
	return t
}

// spend returns whom a one-time token signs in, and spends it.
func (ss *sessions) spend(token string) (interlock.Identity, bool) {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	who, ok := ss.once[token]
	delete(ss.once, token)
	return who, ok
}

// start opens a session for who, standing on cred, and returns its id.
func (ss *sessions) start(who interlock.Identity, cred Credential) (string, *session) {
	id := randomToken()
	s := &session{who: who, cred: cred, csrf: randomToken(), lastSeen: time.Now(), ended: make(chan struct{})}
	ss.mu.Lock()
	defer ss.mu.Unlock()
	now := time.Now()
	for old, o := range ss.byID {
		if o.idleSince(now) > ss.idle {
			ss.endLocked(old)
		}
	}
	ss.byID[id] = s
	return id, s
}

// each returns every live session, by id.
func (ss *sessions) each() map[string]*session {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	return maps.Clone(ss.byID)
}

func (s *session) idleSince(now time.Time) time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	return now.Sub(s.lastSeen)
}

// get returns the live session id names. touch counts the request as the
// approver's activity; a page refreshing itself does not.
func (ss *sessions) get(id string, touch bool) *session {
	ss.mu.Lock()
	s, ok := ss.byID[id]
	ss.mu.Unlock()
	if !ok {
		return nil
	}
	now := time.Now()
	if s.idleSince(now) > ss.idle {
		ss.end(id)
		return nil
	}
	if touch {
		s.mu.Lock()
		s.lastSeen = now
		s.mu.Unlock()
	}
	return s
}

func (ss *sessions) end(id string) {
	ss.mu.Lock()
	ss.endLocked(id)
	ss.mu.Unlock()
}

func (ss *sessions) endLocked(id string) {
	if s, ok := ss.byID[id]; ok {
		close(s.ended)
		delete(ss.byID, id)
	}
}

// live reports whether the session s is still signed in.
func (ss *sessions) live(s *session) bool {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	for _, o := range ss.byID {
		if o == s {
			return s.idleSince(time.Now()) <= ss.idle
		}
	}
	return false
}

// handlerFunc is a console handler for a signed-in approver.
type handlerFunc func(w http.ResponseWriter, r *http.Request, s *session)

// refreshHeader marks the requests a page's script makes to refresh itself.
const refreshHeader = "X-Console-Refresh"

// signedIn passes requests of a live session on to h; a page without one
// is sent to sign in and come back, a POST without the session's CSRF
// token is refused.
func (c *Console) signedIn(h handlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		var s *session
		if ck, err := r.Cookie(sessionCookie); err == nil {
			s = c.sessions.get(ck.Value, r.Header.Get(refreshHeader) == "" && r.URL.Path != "/console/events")
			if s != nil && !c.stands(r.Context(), ck.Value, s) {
				s = nil
			}
		}
		if s == nil {
			if r.Method != http.MethodGet || r.URL.Path == "/console/events" {
				c.render(w, r, http.StatusUnauthorized, "message", page{Title: "Signed out",
					Message: "Your session has ended. Sign in again to continue."})
				return
			}
			http.Redirect(w, r, "/console/login?next="+url.QueryEscape(r.URL.RequestURI()), http.StatusSeeOther)
			return
		}
		if r.Method == http.MethodPost {
			r.Body = http.MaxBytesReader(w, r.Body, 64<<10)
			if err := r.ParseForm(); err != nil || !sameToken(r.PostFormValue("csrf"), s.csrf) {
				c.render(w, r, http.StatusForbidden, "message", c.pageFor(s, "Refused", "",
					page{Message: "The form had expired or did not come from this console. Reload the page and try again."}))
				return
			}
		}
		h(w, r, s)
	}
}

func sameToken(got, want string) bool {
	return got != "" && subtle.ConstantTimeCompare([]byte(got), []byte(want)) == 1
}

// setCookie sets a console cookie: HttpOnly, SameSite=Strict, and Secure
// when the request came over TLS. maxAge 0 makes a session cookie, -1
// removes it.
func setCookie(w http.ResponseWriter, r *http.Request, name, path, value string, maxAge int) {
	http.SetCookie(w, &http.Cookie{Name: name, Value: value, Path: path, MaxAge: maxAge, HttpOnly: true,
		Secure: r.TLS != nil, SameSite: http.SameSiteStrictMode})
}

// loginData is what the login page shows.
type loginData struct {
	Next    string
	HasKeys bool
	// HasProvider offers the sign-in with the identity provider.
	HasProvider bool
	// Token is the login form's own CSRF token, also in its cookie.
	Token string
}

// loginPage shows the sign-in form, or spends a one-time link.
func (c *Console) loginPage(w http.ResponseWriter, r *http.Request) {
	if once := r.URL.Query().Get("once"); once != "" {
		who, ok := c.sessions.spend(once)
		if !ok && c.links != nil {
			var err error
			if who, ok, err = c.links(r.Context(), once); err != nil {
				c.log.ErrorContext(r.Context(), "console sign-in link", "error", err)
				c.render(w, r, http.StatusServiceUnavailable, "message", page{Title: "Unavailable",
					Message: "The console cannot check this sign-in link right now. Try again in a moment."})
				return
			}
		}
		if !ok {
			c.render(w, r, http.StatusForbidden, "message", page{Title: "Link already used",
				Message: "This sign-in link was already used, has expired or is not valid: each link signs in once. " +
					"Run interlock console link for a new one, or sign in with an API key."})
			return
		}
		c.signIn(w, r, who, Credential{Kind: CredentialLink}, "/console/")
		return
	}
	c.showLogin(w, r, http.StatusOK, "")
}

func (c *Console) showLogin(w http.ResponseWriter, r *http.Request, status int, problem string) {
	token := randomToken()
	setCookie(w, r, loginCookie, "/console/login", token, 600)
	c.render(w, r, status, "login", page{Title: "Sign in", Error: problem,
		Data: loginData{Next: safeNext(r.FormValue("next")), HasKeys: c.authn != nil, HasProvider: c.signInWith != nil, Token: token}})
}

// login exchanges an approver's API key for a session.
func (c *Console) login(w http.ResponseWriter, r *http.Request) {
	r.Body = http.MaxBytesReader(w, r.Body, 16<<10)
	if err := r.ParseForm(); err != nil {
		c.showLogin(w, r, http.StatusBadRequest, "The form could not be read. Try again.")
		return
	}
	ck, err := r.Cookie(loginCookie)
	if err != nil || !sameToken(r.PostFormValue("csrf"), ck.Value) {
		c.showLogin(w, r, http.StatusForbidden, "The sign-in form had expired. Try again.")
		return
	}
	if c.authn == nil {
		c.showLogin(w, r, http.StatusUnauthorized, "This gateway has no API keys: open the one-time link interlock serve printed, or make a new one with interlock console link.")
		return
	}
	key := strings.TrimSpace(r.PostFormValue("key"))
	who, cred, err := c.authn(r.Context(), key)
	if key == "" || err != nil {
		c.refuse(r, "an unknown API key")
		c.showLogin(w, r, http.StatusUnauthorized, "That is not an API key of this gateway.")
		return
	}
	setCookie(w, r, loginCookie, "/console/login", "", -1)
	c.signIn(w, r, who, cred, safeNext(r.PostFormValue("next")))
}

// signIn starts a session for who and sends the browser on to next.
func (c *Console) signIn(w http.ResponseWriter, r *http.Request, who interlock.Identity, cred Credential, next string) {
	c.startSession(w, r, who, cred)
	http.Redirect(w, r, next, http.StatusSeeOther)
}

// startSession starts a session for who, sets its cookie and records the
// sign-in.
func (c *Console) startSession(w http.ResponseWriter, r *http.Request, who interlock.Identity, cred Credential) {
	id, _ := c.sessions.start(who, cred)
	setCookie(w, r, sessionCookie, "/console/", id, 0)
	c.gate.RecordEvent(r.Context(), &audit.Record{Event: "console_login", Tenant: who.Tenant, Principal: who.Principal,
		Detail: fmt.Sprintf("signed in to the console from %s with %s", r.RemoteAddr, articled(cred.Kind))})
}

// articled names a kind of credential in a sentence of the audit log.
func articled(kind string) string {
	switch kind {
	case CredentialKey:
		return "an API key"
	case CredentialProvider:
		return "the identity provider"
	}
	return "a " + kind
}

// stands reports whether the session id still stands on its credential,
// and ends it (with an audit record) when it does not.
func (c *Console) stands(ctx context.Context, id string, s *session) bool {
	why := c.fallen(ctx, s)
	if why == "" {
		return true
	}
	c.sessions.end(id)
	c.gate.RecordEvent(ctx, &audit.Record{Event: "console_session_ended", Tenant: s.who.Tenant, Principal: s.who.Principal,
		Detail: fmt.Sprintf("the console session made with %s ended: %s", articled(s.cred.Kind), why)})
	return false
}

// fallen says why the session's credential no longer holds it up, or ""
// when it does.
func (c *Console) fallen(ctx context.Context, s *session) string {
	if !s.cred.Expires.IsZero() && !time.Now().Before(s.cred.Expires) {
		return "its sign-in's lifetime ended"
	}
	if c.recheck == nil {
		return ""
	}
	now, err := c.recheck(ctx, s.who, s.cred)
	switch {
	case err != nil:
		return "its credential is gone"
	case !now.Is(s.who):
		return "its credential names another identity now"
	case !sameGroups(now.Groups, s.who.Groups):
		return "its credential names other groups now"
	}
	return ""
}

func sameGroups(a, b []string) bool {
	return slices.Equal(slices.Sorted(slices.Values(a)), slices.Sorted(slices.Values(b)))
}

// SignedIn reports whether r carries the cookie of a live session, without
// counting it as the approver's activity.
func (c *Console) SignedIn(r *http.Request) bool {
	ck, err := r.Cookie(sessionCookie)
	return err == nil && c.sessions.get(ck.Value, false) != nil
}

// ForgetPasskeys drops the passkeys of every approver gone says has no
// credential left (a key removed on reload), with an audit record of
// each: a passkey signs decisions only for an approver who may still sign
// in. It returns how many approvers' passkeys it dropped.
func (c *Console) ForgetPasskeys(ctx context.Context, gone func(interlock.Identity) bool) int {
	forgotten := c.passkeys.forget(gone)
	for _, who := range forgotten {
		c.gate.RecordEvent(ctx, &audit.Record{Event: "passkeys_removed", Tenant: who.Tenant, Principal: who.Principal,
			Detail: "the approver's passkeys were removed: no credential names them any more"})
	}
	return len(forgotten)
}

// Recheck ends every session whose credential no longer holds it up, with
// an audit record of each, so that a reload that removes or changes a key
// ends the sessions made with it before anyone uses them again. It returns
// how many ended.
func (c *Console) Recheck(ctx context.Context) int {
	n := 0
	for id, s := range c.sessions.each() {
		if !c.stands(ctx, id, s) {
			n++
		}
	}
	return n
}

func (c *Console) logout(w http.ResponseWriter, r *http.Request, _ *session) {
	if ck, err := r.Cookie(sessionCookie); err == nil {
		c.sessions.end(ck.Value)
	}
	setCookie(w, r, sessionCookie, "/console/", "", -1)
	http.Redirect(w, r, "/console/login", http.StatusSeeOther)
}

// safeNext keeps a page to return to only when it is one of the
// console's own, so a link cannot send a fresh session elsewhere.
func safeNext(next string) string {
	if !strings.HasPrefix(next, "/console/") || strings.HasPrefix(next, "/console/login") || strings.ContainsAny(next, "\\\r\n") {
		return "/console/"
	}
	return next
}
