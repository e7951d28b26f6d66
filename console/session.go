package console

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/interlock-mcp/interlock"
	"github.com/interlock-mcp/interlock/audit"
	"github.com/interlock-mcp/interlock/consolestate"
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
type Credential = consolestate.Credential

// The kinds of credential a session stands on.
const (
	CredentialKey      = "key"
	CredentialProvider = "identity provider"
	CredentialLink     = "one-time link"
)

// session is one signed-in approver, as read from the store for one
// request.
type session struct {
	// key is what the store keeps the session under: the hash of its id,
	// which only the browser's cookie holds.
	key  string
	who  interlock.Identity
	cred Credential
	csrf string
}

// randomToken returns 32 random bytes, URL-safe.
func randomToken() string {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		panic(err)
	}
	return base64.RawURLEncoding.EncodeToString(b)
}

// oneTimeTTL is how long a link of [Console.OneTimeLogin] signs in: a day
// for the one interlock serve prints; interlock console link makes a new
// one when it is lost or spent.
const oneTimeTTL = 24 * time.Hour

// openSession starts a session for who, standing on cred, and returns its
// id, which only the browser keeps.
func (c *Console) openSession(ctx context.Context, who interlock.Identity, cred Credential) (string, error) {
	id := randomToken()
	now := time.Now()
	err := c.state.StartSession(ctx, consolestate.Key(id), consolestate.Session{Who: who, Credential: cred, CSRF: randomToken(),
		Created: now, LastSeen: now}, c.idle)
	if err != nil {
		return "", fmt.Errorf("starting a console session: %w", err)
	}
	return id, nil
}

// session returns the live session id names; nil, and no error, when
// there is none or it idled out. touch counts the request as the
// approver's activity; a page refreshing itself does not.
func (c *Console) session(ctx context.Context, id string, touch bool) (*session, error) {
	key := consolestate.Key(id)
	got, err := c.state.Session(ctx, key, time.Now(), c.idle, touch)
	if errors.Is(err, consolestate.ErrNoSession) {
		c.endings.end(key)
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading a console session: %w", err)
	}
	return &session{key: key, who: got.Who, cred: got.Credential, csrf: got.CSRF}, nil
}

// endSession ends the session kept under key, on every replica, and the
// event streams it has open on this one.
func (c *Console) endSession(ctx context.Context, key string) error {
	c.endings.end(key)
	if err := c.state.EndSession(ctx, key); err != nil {
		return fmt.Errorf("ending a console session: %w", err)
	}
	return nil
}

// setFlash leaves msg for the session's next page. A flash that cannot be
// kept is only logged: the decision it reports is made.
func (c *Console) setFlash(ctx context.Context, s *session, msg string) {
	if err := c.state.Put(ctx, s.key, consolestate.Flash, []byte(msg)); err != nil {
		c.log.WarnContext(ctx, "console: keeping a flash message", "error", err)
	}
}

// takeFlash returns the message left for the session's next page, once.
func (c *Console) takeFlash(ctx context.Context, s *session) string {
	v, err := c.state.Take(ctx, s.key, consolestate.Flash)
	if err != nil {
		c.log.WarnContext(ctx, "console: reading a flash message", "error", err)
	}
	return string(v)
}

// endings are the event streams open on this replica, by session key, so
// that a session ended here stops them at once; one ended on another
// replica stops them at their next event or heartbeat.
type endings struct {
	mu sync.Mutex
	m  map[string]*ending
}

// ending is what the streams of one session wait on.
type ending struct {
	ch chan struct{}
	// streams counts the streams waiting; the entry goes with the last.
	streams int
}

// of returns a channel closed when the session under key ends here, and
// the function a stream calls when it stops waiting on it.
func (e *endings) of(key string) (<-chan struct{}, func()) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.m == nil {
		e.m = map[string]*ending{}
	}
	en, ok := e.m[key]
	if !ok {
		en = &ending{ch: make(chan struct{})}
		e.m[key] = en
	}
	en.streams++
	return en.ch, func() {
		e.mu.Lock()
		defer e.mu.Unlock()
		if en.streams--; en.streams == 0 && e.m[key] == en {
			delete(e.m, key)
		}
	}
}

func (e *endings) end(key string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if en, ok := e.m[key]; ok {
		close(en.ch)
		delete(e.m, key)
	}
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
			s, err = c.session(r.Context(), ck.Value, r.Header.Get(refreshHeader) == "" && r.URL.Path != "/console/events")
			if err != nil {
				// Fail closed: without the store no one is signed in.
				c.unavailable(w, r, err)
				return
			}
			if s != nil && !c.stands(r.Context(), s) {
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
		who, ok, err := c.state.SpendLink(r.Context(), consolestate.Key(once), time.Now())
		if ok && c.recheck != nil {
			// A link made while the gateway took links (interlock console
			// link, or a replica without authentication) signs nobody in
			// on one whose approvers sign in with a credential: spent
			// here, it is spent for good.
			if _, refused := c.recheck(r.Context(), who, Credential{Kind: CredentialLink}); refused != nil {
				ok = false
			}
		}
		if err != nil {
			c.log.ErrorContext(r.Context(), "console sign-in link", "error", err)
			c.render(w, r, http.StatusServiceUnavailable, "message", page{Title: "Unavailable",
				Message: "The console cannot check this sign-in link right now. Try again in a moment."})
			return
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
	if c.startSession(w, r, who, cred) {
		http.Redirect(w, r, next, http.StatusSeeOther)
	}
}

// startSession starts a session for who, sets its cookie and records the
// sign-in. When the store cannot keep it, the browser is told so, and
// false is returned.
func (c *Console) startSession(w http.ResponseWriter, r *http.Request, who interlock.Identity, cred Credential) bool {
	id, err := c.openSession(r.Context(), who, cred)
	if err != nil {
		c.unavailable(w, r, err)
		return false
	}
	setCookie(w, r, sessionCookie, "/console/", id, 0)
	c.approvals.RecordEvent(r.Context(), &audit.Record{Event: "console_login", Tenant: who.Tenant, Principal: who.Principal,
		Detail: fmt.Sprintf("signed in to the console from %s with %s", r.RemoteAddr, articled(cred.Kind))})
	return true
}

// unavailable answers a request the console cannot serve because its
// store of sessions failed: no page of a signed-in approver, and no
// error text, reaches the browser.
func (c *Console) unavailable(w http.ResponseWriter, r *http.Request, err error) {
	c.log.ErrorContext(r.Context(), "console state", "path", r.URL.Path, "error", err)
	c.render(w, r, http.StatusServiceUnavailable, "message", page{Title: "Unavailable",
		Message: "The console cannot reach its sessions right now, so it signs no one in. Try again in a moment."})
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

// stands reports whether the session still stands on its credential,
// and ends it (with an audit record) when it does not.
func (c *Console) stands(ctx context.Context, s *session) bool {
	why := c.fallen(ctx, s)
	if why == "" {
		return true
	}
	if err := c.endSession(ctx, s.key); err != nil {
		// The session is refused here all the same, and again on the
		// next request, where its credential falls again.
		c.log.ErrorContext(ctx, "console", "error", err)
	}
	c.approvals.RecordEvent(ctx, &audit.Record{Event: "console_session_ended", Tenant: s.who.Tenant, Principal: s.who.Principal,
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
	if err != nil {
		return false
	}
	s, err := c.session(r.Context(), ck.Value, false)
	return err == nil && s != nil
}

// ForgetPasskeys drops the passkeys of every approver gone says has no
// credential left (a key removed on reload), with an audit record of
// each: a passkey signs decisions only for an approver who may still sign
// in. It returns how many approvers' passkeys it dropped.
func (c *Console) ForgetPasskeys(ctx context.Context, gone func(interlock.Identity) bool) int {
	forgotten, err := c.passkeys.forget(ctx, gone)
	if err != nil {
		c.log.ErrorContext(ctx, "console: forgetting passkeys", "error", err)
	}
	for _, who := range forgotten {
		c.approvals.RecordEvent(ctx, &audit.Record{Event: "passkeys_removed", Tenant: who.Tenant, Principal: who.Principal,
			Detail: "the approver's passkeys were removed: no credential names them any more"})
	}
	return len(forgotten)
}

// Recheck ends every session whose credential no longer holds it up, with
// an audit record of each, so that a reload that removes or changes a key
// ends the sessions made with it before anyone uses them again. It returns
// how many ended.
func (c *Console) Recheck(ctx context.Context) int {
	all, err := c.state.Sessions(ctx)
	if err != nil {
		// Each session is checked again at its next request.
		c.log.ErrorContext(ctx, "console: checking sessions again", "error", err)
		return 0
	}
	n := 0
	for key, got := range all {
		if !c.stands(ctx, &session{key: key, who: got.Who, cred: got.Credential, csrf: got.CSRF}) {
			n++
		}
	}
	return n
}

func (c *Console) logout(w http.ResponseWriter, r *http.Request, s *session) {
	if err := c.endSession(r.Context(), s.key); err != nil {
		c.unavailable(w, r, err)
		return
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
