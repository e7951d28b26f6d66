// Package console is the approvers' web console: the pages where the
// people a rule names see the calls that wait for their approval (what the
// call will change, who made it, who else may decide, how long it waits),
// approve or deny them with a reason, and read back what was decided.
//
// The pages are rendered on the server with html/template from embedded
// templates and a small stylesheet; everything works without JavaScript.
// A few lines of script listen to server-sent events and refresh the parts
// of a page that changed, so a new approval or a decision appears without
// a reload.
//
// Approvers sign in with the same API keys that authenticate /mcp, or
// with the gateway's OAuth issuer (see [IdentityProvider]), and get a
// server-side session behind an HttpOnly, SameSite=Strict cookie. A
// gateway without either hands its operator a one-time sign-in link
// instead. Every form carries the session's CSRF token, and cross-origin
// POSTs are refused as well.
//
// Sessions, passkeys and one-time links live in the store the gateways
// share ([Options.State]), and a change is announced through it
// ([Options.Signal]), so replicas behind a balancer without affinity
// answer any request of an approver alike. Without the store the console
// signs no one in.
package console

import (
	"context"
	"embed"
	"fmt"
	"html/template"
	"io/fs"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/interlock-mcp/interlock"
	"github.com/interlock-mcp/interlock/audit"
	"github.com/interlock-mcp/interlock/consolestate"
	"github.com/interlock-mcp/interlock/seal"
)

// Path is where the console is served.
const Path = "/console/"

// ApprovalsPath is where one approval's page is, followed by its id: the
// base of the approval_url the gate hands agents.
const ApprovalsPath = "/console/approvals"

//go:embed templates/*.html
var templateFS embed.FS

//go:embed static
var staticFS embed.FS

// History reads the audit log back for the history page.
type History interface {
	audit.Reader
	// Head returns the sequence number and hash of the last record.
	Head(ctx context.Context) (int64, string, error)
}

// Options configure a [Console].
type Options struct {
	// Approvals keeps the approvals and grants the console shows and
	// decides, and records what approvers do; one in memory when nil.
	Approvals *interlock.ApprovalService
	// Authenticate returns who holds an API key, and the credential a
	// session made with it stands on. Nil when the gateway has no keys:
	// then only one-time links sign anyone in.
	Authenticate func(ctx context.Context, key string) (interlock.Identity, Credential, error)
	// Recheck returns who the credential of a session of who names now, or
	// an error
	// when it names nobody any more (a key removed or replaced). The
	// console asks on every request of a session and on [Console.Recheck];
	// a session whose credential fails, or names another identity (another
	// tenant, other groups), ends at once. Nil: sessions end only when
	// they idle out, sign out, or their credential's lifetime ends.
	Recheck func(ctx context.Context, who interlock.Identity, cred Credential) (interlock.Identity, error)
	// Refused records a refused sign-in (why names the credential, never
	// its value); the gateway folds repeated refusals from one source into
	// one record. Nil: each is an auth_refused record of its own.
	Refused func(ctx context.Context, r *http.Request, why string)
	// SignIn, when set, offers approvers to sign in with an identity
	// provider; the provider must send them back to CallbackPath.
	SignIn IdentityProvider
	// History is the audit log the history page reads; none when nil.
	History History
	// Logger receives what went wrong behind a page; slog.Default() when
	// nil.
	Logger *slog.Logger
	// SessionIdle ends a session after this long without a request; 30
	// minutes when zero.
	SessionIdle time.Duration
	// Poll is how often the approval store is read for changes while a
	// page listens for them; one second when zero.
	Poll time.Duration
	// State keeps the console's sessions, passkeys and one-time links:
	// the store every replica shares, so any of them answers any request.
	// Nil keeps them in this process's memory.
	State consolestate.Store
	// Signal carries the word that approvals changed between the
	// replicas, so a page open on one learns at once of a decision made
	// on another. Nil: State's, if it is a Signal too, else this
	// process's own (other replicas' decisions then show at the next
	// Poll).
	Signal consolestate.Signal
	// Sealer boxes the sign-ins with the identity provider under way into
	// the browser's cookie. Every replica must have the same keys, or a
	// sign-in started on one is refused when the provider sends the
	// browser back to another. A sealer of a random key of this process
	// when nil.
	Sealer *seal.Sealer
	// Instance is the id the gateway announces itself and this console
	// under in the store; the console proves it at [InstancePath] to a
	// gateway on stdio about to send approvers there ([Prober]). Empty
	// proves nothing.
	Instance string
}

// Console serves the approvers' pages.
type Console struct {
	approvals *interlock.ApprovalService
	authn     func(context.Context, string) (interlock.Identity, Credential, error)
	recheck   func(context.Context, interlock.Identity, Credential) (interlock.Identity, error)
	refused   func(context.Context, *http.Request, string)
	history   History
	log       *slog.Logger
	pages     map[string]*template.Template

	state    consolestate.Store
	idle     time.Duration
	endings  endings
	changes  *watcher
	passkeys *passkeys

	// signInWith is the identity provider approvers may sign in with;
	// nil when there is none.
	signInWith IdentityProvider
	// flows boxes the sign-ins under way into the browser's cookie, so
	// the console keeps no more than a one-time mark of a sign-in that
	// has not come back.
	flows *seal.Sealer
	// instance is the id the console was announced under.
	instance string
}

// New returns a console. Its watcher of approvals runs until [Console.Close].
func New(opts Options) *Console {
	log := opts.Logger
	if log == nil {
		log = slog.Default()
	}
	idle := opts.SessionIdle
	if idle <= 0 {
		idle = 30 * time.Minute
	}
	poll := opts.Poll
	if poll <= 0 {
		poll = time.Second
	}
	state, signal := opts.State, opts.Signal
	if state == nil {
		state = consolestate.NewMemory()
	}
	if signal == nil {
		if s, ok := state.(consolestate.Signal); ok {
			signal = s
		} else {
			signal = consolestate.NewMemory()
		}
	}
	if opts.Approvals == nil {
		opts.Approvals = interlock.NewApprovalService(interlock.ApprovalOptions{Logger: log})
	}
	c := &Console{approvals: opts.Approvals, authn: opts.Authenticate, recheck: opts.Recheck, refused: opts.Refused, signInWith: opts.SignIn, history: opts.History,
		log: log, pages: parsePages(), state: state, idle: idle, passkeys: &passkeys{state: state}, flows: opts.Sealer,
		instance: opts.Instance}
	if c.flows == nil {
		// A sign-in must then come back to the process that started it,
		// which a restart or another replica refuses with "Sign in again".
		c.flows, _ = seal.New(seal.RandomKey())
	}
	c.changes = newWatcher(opts.Approvals.Store(), opts.Approvals.Grants(), signal, poll, log)
	return c
}

// parsePages pairs each page template with the layout around it.
func parsePages() map[string]*template.Template {
	layout := template.Must(template.New("layout.html").Funcs(funcs).ParseFS(templateFS, "templates/layout.html"))
	names, err := fs.Glob(templateFS, "templates/*.html")
	if err != nil {
		panic(err)
	}
	pages := map[string]*template.Template{}
	for _, name := range names {
		if name == "templates/layout.html" {
			continue
		}
		page := strings.TrimSuffix(strings.TrimPrefix(name, "templates/"), ".html")
		pages[page] = template.Must(template.Must(layout.Clone()).ParseFS(templateFS, name))
	}
	return pages
}

// refuse records a refused sign-in from r.
func (c *Console) refuse(r *http.Request, why string) {
	if c.refused != nil {
		c.refused(r.Context(), r, "console sign-in with "+why)
		return
	}
	c.approvals.RecordEvent(r.Context(), &audit.Record{Event: "auth_refused",
		Detail: fmt.Sprintf("console sign-in from %s with %s", r.RemoteAddr, why)})
}

// Passkeys is the verifier of passkey-signed decisions over the
// credentials approvers registered in the console's state: made before
// the approval service ([interlock.ApprovalOptions.Passkeys]) and the
// console, from the same store.
func Passkeys(state consolestate.Store) interlock.PasskeyVerifier { return &passkeys{state: state} }

// Notify tells the console that the approvals changed (a new one, a
// decision), so listening pages, on this replica and through the signal
// on every other, learn it now rather than at the next poll.
func (c *Console) Notify() { c.changes.changed() }

// Close ends every event stream and stops watching the approvals, so a
// server shutting down does not wait for open pages.
func (c *Console) Close() { c.changes.close() }

// OneTimeLogin returns a token that signs who in once, within a day, for
// a link such as /console/login?once=TOKEN, on any replica sharing the
// console's store. The session it starts stands on a credential of kind
// [CredentialLink].
func (c *Console) OneTimeLogin(ctx context.Context, who interlock.Identity) (string, error) {
	token := randomToken()
	if err := c.state.AddLink(ctx, consolestate.Key(token), who, time.Now().Add(oneTimeTTL)); err != nil {
		return "", fmt.Errorf("keeping a one-time console link: %w", err)
	}
	return token, nil
}

// Handler serves the console under [Path].
func (c *Console) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /console/{$}", c.signedIn(c.pending))
	mux.HandleFunc("GET /console/approvals/{id}", c.signedIn(c.approval))
	mux.HandleFunc("POST /console/approvals/{id}/decide", c.signedIn(c.decide))
	mux.HandleFunc("POST /console/approvals/{id}/grant", c.signedIn(c.grantScope))
	mux.HandleFunc("GET /console/grants", c.signedIn(c.grantsPage))
	mux.HandleFunc("POST /console/grants/{id}/revoke", c.signedIn(c.revokeGrant))
	mux.HandleFunc("GET /console/passkey", c.signedIn(c.passkeyPage))
	mux.HandleFunc("POST /console/passkey", c.signedIn(c.registerPasskey))
	mux.HandleFunc("GET /console/history", c.signedIn(c.historyPage))
	mux.HandleFunc("GET /console/events", c.signedIn(c.events))
	mux.HandleFunc("GET /console/login", c.loginPage)
	mux.HandleFunc("POST /console/login", c.login)
	mux.HandleFunc("POST /console/logout", c.signedIn(c.logout))
	mux.HandleFunc("GET "+InstancePath, c.answerInstance)
	if c.signInWith != nil {
		mux.HandleFunc("GET "+oidcStartPath, c.oidcStart)
		mux.HandleFunc("GET "+CallbackPath, c.oidcCallback)
	}
	static, _ := fs.Sub(staticFS, "static")
	mux.Handle("GET /console/static/", http.StripPrefix("/console/static/", http.FileServerFS(static)))
	mux.HandleFunc("/console/", func(w http.ResponseWriter, r *http.Request) {
		c.render(w, r, http.StatusNotFound, "message", page{Title: "Not found", Message: "There is no such page in the console."})
	})
	cop := http.NewCrossOriginProtection()
	cop.SetDenyHandler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c.render(w, r, http.StatusForbidden, "message", page{Title: "Refused",
			Message: "The console refuses forms sent from other sites. Open the console itself and try again."})
	}))
	return securityHeaders(cop.Handler(mux))
}

// securityHeaders forbids framing (an approve button must not be
// clickjacked), scripts and styles from elsewhere, referrers (a one-time
// link must not leak) and caching of pages that show approvals.
func securityHeaders(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hd := w.Header()
		hd.Set("Content-Security-Policy", "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "+
			"connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
		hd.Set("X-Frame-Options", "DENY")
		hd.Set("X-Content-Type-Options", "nosniff")
		hd.Set("Referrer-Policy", "no-referrer")
		if !strings.HasPrefix(r.URL.Path, "/console/static/") {
			hd.Set("Cache-Control", "no-store")
		}
		h.ServeHTTP(w, r)
	})
}

// page is what every template receives.
type page struct {
	Title   string
	Who     *interlock.Identity
	CSRF    string
	Nav     string
	Flash   string
	Error   string
	Message string
	// Refresh, when set, is a console page the browser moves on to at
	// once.
	Refresh string
	Data    any
	// session is whose flash the page shows.
	session *session
}

// render writes a page. A template that fails is the console's fault: the
// browser gets a plain message, the log gets the error.
func (c *Console) render(w http.ResponseWriter, r *http.Request, status int, name string, p page) {
	// A page refreshing itself for a live update must not take the flash
	// meant for the page a form's answer leads to.
	if p.session != nil && p.Flash == "" && r.Header.Get(refreshHeader) == "" {
		p.Flash = c.takeFlash(r.Context(), p.session)
	}
	var buf strings.Builder
	if err := c.pages[name].ExecuteTemplate(&buf, "layout.html", p); err != nil {
		c.log.ErrorContext(r.Context(), "console page", "page", name, "error", err)
		http.Error(w, "The console could not show this page.", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	_, _ = w.Write([]byte(buf.String()))
}

// fail answers a request that failed behind the page: the browser gets
// what it can do, never the error's text.
func (c *Console) fail(w http.ResponseWriter, r *http.Request, s *session, err error) {
	c.log.ErrorContext(r.Context(), "console", "path", r.URL.Path, "error", err)
	c.render(w, r, http.StatusServiceUnavailable, "message", c.pageFor(s, "Unavailable", "",
		page{Message: "The console cannot read the approvals or the audit log right now. Try again in a moment."}))
}

// pageFor fills what every signed-in page shows.
func (c *Console) pageFor(s *session, title, nav string, p page) page {
	p.Title, p.Nav = title, nav
	if s != nil {
		who := s.who
		p.Who, p.CSRF, p.session = &who, s.csrf, s
	}
	return p
}

// recent yields the audit records of the last n, newest first.
func recent(ctx context.Context, h History, n int64) ([]*audit.Record, int64, error) {
	head, _, err := h.Head(ctx)
	if err != nil {
		return nil, 0, fmt.Errorf("reading the audit log's head: %w", err)
	}
	var out []*audit.Record
	for rec, err := range h.Records(ctx, max(head-n+1, 1)) {
		if err != nil {
			return nil, 0, fmt.Errorf("reading the audit log: %w", err)
		}
		out = append(out, rec)
	}
	for i, j := 0, len(out)-1; i < j; i, j = i+1, j-1 {
		out[i], out[j] = out[j], out[i]
	}
	return out, head, nil
}
