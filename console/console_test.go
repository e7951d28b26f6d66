package console

import (
	"bufio"
	"context"
	"errors"
	"io"
	"iter"
	"log/slog"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/interlock-mcp/interlock"
	"github.com/interlock-mcp/interlock/approval"
	"github.com/interlock-mcp/interlock/audit"
	"github.com/interlock-mcp/interlock/policy"
)

var quiet = slog.New(slog.DiscardHandler)

// The approvers' keys of the test console.
var keys = map[string]interlock.Identity{
	"key-alice":   {Principal: "alice", Tenant: "acme", Groups: []string{"finance"}},
	"key-bob":     {Principal: "bob", Tenant: "acme", Groups: []string{"finance"}},
	"key-mallory": {Principal: "mallory", Tenant: "acme"},
}

type rig struct {
	srv     *httptest.Server
	url     string
	store   *approval.Memory
	console *Console
}

func newRig(t *testing.T, tls bool, history History) *rig {
	t.Helper()
	store := approval.NewMemory()
	approvals := interlock.NewApprovalService(interlock.ApprovalOptions{Store: store, CompileCondition: policy.CompileCondition, Logger: quiet})
	c := New(Options{Approvals: approvals, Logger: quiet, Poll: 20 * time.Millisecond, History: history,
		Authenticate: func(_ context.Context, key string) (interlock.Identity, Credential, error) {
			if who, ok := keys[key]; ok {
				return who, Credential{Kind: CredentialKey, Ref: key}, nil
			}
			return interlock.Identity{}, Credential{}, errors.New("unknown key")
		}})
	srv := httptest.NewUnstartedServer(c.Handler())
	if tls {
		srv.StartTLS()
	} else {
		srv.Start()
	}
	t.Cleanup(func() { c.Close(); srv.Close() })
	return &rig{srv: srv, url: srv.URL, store: store, console: c}
}

// request waits for alice's refund, which finance may approve.
func (r *rig) request(t *testing.T, id string, approvers ...string) *approval.Approval {
	t.Helper()
	return r.requestQuorum(t, id, 1, approvers...)
}

// requestQuorum waits for alice's refund, which quorum of approvers must
// approve.
func (r *rig) requestQuorum(t *testing.T, id string, quorum int, approvers ...string) *approval.Approval {
	t.Helper()
	return r.keep(t, refund(id, quorum, approvers...))
}

// refund is alice's pending refund.
func refund(id string, quorum int, approvers ...string) *approval.Approval {
	if len(approvers) == 0 {
		approvers = []string{"group:finance"}
	}
	now := time.Now()
	return &approval.Approval{ID: id, Key: "key-of-" + id, Tenant: "acme", Principal: "alice",
		Tool: "refund_invoice", Rule: "large-refunds", RuleDigest: "digest-of-large-refunds", Args: map[string]any{"invoice_id": "inv_1005", "amount": 2000},
		Summary: "Refund $2,000.00 on inv_1005.", Approvers: approvers, Quorum: quorum, CreatedAt: now, ExpiresAt: now.Add(time.Hour)}
}

// keep stores a pending approval.
func (r *rig) keep(t *testing.T, a *approval.Approval) *approval.Approval {
	t.Helper()
	a, err := r.store.Request(context.Background(), a)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// browser is a client with a cookie jar that does not follow redirects,
// so a test sees where it is sent.
type browser struct {
	t      *testing.T
	client *http.Client
	base   string
}

func (r *rig) browser(t *testing.T) *browser {
	jar, _ := cookiejar.New(nil)
	client := &http.Client{Jar: jar, Transport: r.srv.Client().Transport,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	return &browser{t: t, client: client, base: r.url}
}

// signedIn returns a browser signed in with key.
func (r *rig) signedIn(t *testing.T, key string) *browser {
	t.Helper()
	b := r.browser(t)
	b.login(key, "")
	return b
}

func (b *browser) do(method, path string, form url.Values, header http.Header) (*http.Response, string) {
	b.t.Helper()
	var body io.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	}
	req, err := http.NewRequest(method, b.base+path, body)
	if err != nil {
		b.t.Fatal(err)
	}
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	for k, v := range header {
		req.Header[k] = v
	}
	res, err := b.client.Do(req)
	if err != nil {
		b.t.Fatal(err)
	}
	defer res.Body.Close()
	text, _ := io.ReadAll(res.Body)
	return res, string(text)
}

func (b *browser) get(path string) (*http.Response, string) {
	return b.do(http.MethodGet, path, nil, nil)
}

func (b *browser) post(path string, form url.Values) (*http.Response, string) {
	return b.do(http.MethodPost, path, form, nil)
}

var csrfField = regexp.MustCompile(`name="csrf" value="([^"]+)"`)

// csrf returns the token of the first form on the page at path.
func (b *browser) csrf(path string) string {
	b.t.Helper()
	_, page := b.get(path)
	m := csrfField.FindStringSubmatch(page)
	if m == nil {
		b.t.Fatalf("no CSRF token on %s:\n%s", path, page)
	}
	return m[1]
}

// login signs in with key and returns the response to the form.
func (b *browser) login(key, next string) *http.Response {
	b.t.Helper()
	res, _ := b.post("/console/login", url.Values{"csrf": {b.csrf("/console/login")}, "key": {key}, "next": {next}})
	return res
}

func cookieNamed(res *http.Response, name string) *http.Cookie {
	for _, c := range res.Cookies() {
		if c.Name == name {
			return c
		}
	}
	return nil
}

func TestLogin(t *testing.T) {
	tests := []struct {
		name, key, next string
		status          int
		location        string
		session         bool
	}{
		{"an approver's key", "key-bob", "/console/approvals/apr_1", http.StatusSeeOther, "/console/approvals/apr_1", true},
		{"no page to return to", "key-bob", "", http.StatusSeeOther, "/console/", true},
		{"a page elsewhere", "key-bob", "//evil.example/console/", http.StatusSeeOther, "/console/", true},
		{"an unknown key", "key-eve", "", http.StatusUnauthorized, "", false},
		{"no key", "", "", http.StatusUnauthorized, "", false},
	}
	r := newRig(t, false, nil)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res := r.browser(t).login(tt.key, tt.next)
			if res.StatusCode != tt.status || res.Header.Get("Location") != tt.location {
				t.Errorf("status %d, location %q; want %d, %q", res.StatusCode, res.Header.Get("Location"), tt.status, tt.location)
			}
			if got := cookieNamed(res, sessionCookie) != nil; got != tt.session {
				t.Errorf("session cookie set: %t, want %t", got, tt.session)
			}
		})
	}
	t.Run("without the login form's token", func(t *testing.T) {
		b := r.browser(t)
		res, _ := b.post("/console/login", url.Values{"key": {"key-bob"}})
		if res.StatusCode != http.StatusForbidden || cookieNamed(res, sessionCookie) != nil {
			t.Errorf("status %d, session cookie %v", res.StatusCode, cookieNamed(res, sessionCookie))
		}
	})
	t.Run("a page without a session sends the browser to sign in", func(t *testing.T) {
		res, _ := r.browser(t).get("/console/approvals/apr_1")
		if res.StatusCode != http.StatusSeeOther || res.Header.Get("Location") != "/console/login?next=%2Fconsole%2Fapprovals%2Fapr_1" {
			t.Errorf("status %d, location %q", res.StatusCode, res.Header.Get("Location"))
		}
	})
	t.Run("signing out ends the session", func(t *testing.T) {
		b := r.browser(t)
		b.login("key-bob", "")
		res, _ := b.post("/console/logout", url.Values{"csrf": {b.csrf("/console/")}})
		if res.StatusCode != http.StatusSeeOther {
			t.Fatalf("logout: status %d", res.StatusCode)
		}
		if res, _ := b.get("/console/"); res.StatusCode != http.StatusSeeOther {
			t.Errorf("after logout: status %d, want a redirect to sign in", res.StatusCode)
		}
	})
}

func TestCookieFlags(t *testing.T) {
	for _, tls := range []bool{false, true} {
		t.Run(map[bool]string{false: "http", true: "https"}[tls], func(t *testing.T) {
			res := newRig(t, tls, nil).browser(t).login("key-bob", "")
			c := cookieNamed(res, sessionCookie)
			if c == nil {
				t.Fatal("no session cookie")
			}
			if !c.HttpOnly || c.SameSite != http.SameSiteStrictMode || c.Secure != tls || c.Path != "/console/" || len(c.Value) < 40 {
				t.Errorf("cookie %+v: want HttpOnly, SameSite=Strict, Secure=%t, Path=/console/, a long random value", c, tls)
			}
		})
	}
}

func TestDecideNeedsTheSessionsToken(t *testing.T) {
	tests := []struct {
		name    string
		token   func(real string) string
		header  http.Header
		status  int
		decided bool
	}{
		{"no token", func(string) string { return "" }, nil, http.StatusForbidden, false},
		{"another token", func(string) string { return "forged" }, nil, http.StatusForbidden, false},
		{"the token, from another site", func(s string) string { return s }, http.Header{"Sec-Fetch-Site": {"cross-site"}}, http.StatusForbidden, false},
		{"the token", func(s string) string { return s }, nil, http.StatusSeeOther, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := newRig(t, false, nil)
			r.request(t, "apr_1")
			b := r.browser(t)
			b.login("key-bob", "")
			form := url.Values{"csrf": {tt.token(b.csrf("/console/approvals/apr_1"))}, "decision": {"approve"}}
			res, _ := b.do(http.MethodPost, "/console/approvals/apr_1/decide", form, tt.header)
			if res.StatusCode != tt.status {
				t.Errorf("status %d, want %d", res.StatusCode, tt.status)
			}
			a, _ := r.store.Get(context.Background(), "apr_1")
			if decided := len(a.Approvals) > 0; decided != tt.decided {
				t.Errorf("decided: %t, want %t", decided, tt.decided)
			}
		})
	}
}

func TestDecide(t *testing.T) {
	tests := []struct {
		name, key, decision string
		status              int
		says                string
		state               string
	}{
		{"an approver approves", "key-bob", "approve", http.StatusSeeOther, "", approval.Approved},
		{"an approver denies", "key-bob", "deny", http.StatusSeeOther, "", approval.Denied},
		{"the caller cannot approve their own call", "key-alice", "approve", http.StatusForbidden,
			"You cannot approve or deny your own call.", approval.Pending},
		{"the caller cannot deny it either", "key-alice", "deny", http.StatusForbidden,
			"You cannot approve or deny your own call.", approval.Pending},
		{"someone the rule does not name", "key-mallory", "approve", http.StatusNotFound, "no such approval", approval.Pending},
		{"neither approve nor deny", "key-bob", "maybe", http.StatusBadRequest, "Choose Approve or Deny.", approval.Pending},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := newRig(t, false, nil)
			r.request(t, "apr_1")
			b := r.browser(t)
			b.login(tt.key, "")
			res, page := b.post("/console/approvals/apr_1/decide",
				url.Values{"csrf": {b.csrf("/console/")}, "decision": {tt.decision}, "reason": {"checked the invoice"}})
			if res.StatusCode != tt.status || !strings.Contains(page, tt.says) {
				t.Errorf("status %d, want %d saying %q:\n%s", res.StatusCode, tt.status, tt.says, page)
			}
			a, _ := r.store.Get(context.Background(), "apr_1")
			if got := a.State(time.Now()); got != tt.state {
				t.Errorf("state %s, want %s", got, tt.state)
			}
		})
	}
	t.Run("the caller's page offers no decision", func(t *testing.T) {
		r := newRig(t, false, nil)
		r.request(t, "apr_1")
		b := r.browser(t)
		b.login("key-alice", "")
		_, page := b.get("/console/approvals/apr_1")
		if strings.Contains(page, `value="approve"`) || !strings.Contains(page, "You made this call") {
			t.Errorf("the caller's page:\n%s", page)
		}
	})
}

func TestOneTimeLinkSignsInOnce(t *testing.T) {
	r := newRig(t, false, nil)
	token, err := r.console.OneTimeLogin(context.Background(), interlock.Identity{Principal: "operator", Tenant: "local"})
	if err != nil {
		t.Fatal(err)
	}
	link := "/console/login?once=" + token
	tests := []struct {
		name    string
		status  int
		session bool
	}{
		{"first use", http.StatusSeeOther, true},
		{"second use", http.StatusForbidden, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := r.browser(t)
			res, _ := b.get(link)
			if res.StatusCode != tt.status || (cookieNamed(res, sessionCookie) != nil) != tt.session {
				t.Fatalf("status %d, session cookie %v", res.StatusCode, cookieNamed(res, sessionCookie))
			}
			if !tt.session {
				return
			}
			if _, page := b.get("/console/"); !strings.Contains(page, "Signed in as <strong>operator</strong>") {
				t.Errorf("not signed in as operator:\n%s", page)
			}
		})
	}
	t.Run("a made-up token", func(t *testing.T) {
		if res, _ := r.browser(t).get("/console/login?once=made-up"); res.StatusCode != http.StatusForbidden {
			t.Errorf("status %d", res.StatusCode)
		}
	})
}

// TestSessionIdleExpiry: a session lives for its idle time after the
// approver's last request, which a page refreshing itself does not
// count, and not a nanosecond more.
func TestSessionIdleExpiry(t *testing.T) {
	tests := []struct {
		name string
		// touches are the requests after the start, each after the
		// wait given, and whether the approver made it.
		touches []time.Duration
		refresh bool
		// after is how long after the last touch the session is read.
		after time.Duration
		live  bool
	}{
		{"fresh", nil, false, 0, true},
		{"at its idle time", nil, false, time.Minute, true},
		{"a nanosecond past it", nil, false, time.Minute + time.Nanosecond, false},
		{"a request starts it again", []time.Duration{50 * time.Second}, false, time.Minute, true},
		{"a refresh does not", []time.Duration{50 * time.Second}, true, time.Minute, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				c := New(Options{Logger: quiet, SessionIdle: time.Minute})
				defer c.Close()
				ctx := context.Background()
				id, err := c.openSession(ctx, interlock.Identity{Principal: "bob"}, Credential{Kind: CredentialKey})
				if err != nil {
					t.Fatal(err)
				}
				for _, d := range tt.touches {
					time.Sleep(d)
					if s, err := c.session(ctx, id, !tt.refresh); s == nil || err != nil {
						t.Fatalf("ended before its time: %v", err)
					}
				}
				time.Sleep(tt.after)
				s, err := c.session(ctx, id, false)
				if err != nil {
					t.Fatal(err)
				}
				if (s != nil) != tt.live {
					t.Errorf("live: %v, want %v", s != nil, tt.live)
				}
			})
		})
	}
}

func TestPagesEscapeWhatApprovalsCarry(t *testing.T) {
	r := newRig(t, false, nil)
	now := time.Now()
	_, _ = r.store.Request(context.Background(), &approval.Approval{ID: "apr_x", Key: "x", Tenant: "acme", Principal: "alice",
		Tool: "refund_invoice", Args: map[string]any{"note": `<img src=x onerror=alert(1)>`}, Summary: "<script>alert(1)</script>",
		Approvers: []string{"group:finance"}, Quorum: 1, CreatedAt: now, ExpiresAt: now.Add(time.Hour)})
	b := r.browser(t)
	b.login("key-bob", "")
	for _, path := range []string{"/console/", "/console/approvals/apr_x"} {
		t.Run(path, func(t *testing.T) {
			_, page := b.get(path)
			if strings.Contains(page, "<script>alert") || strings.Contains(page, "<img src=x") || !strings.Contains(page, "&lt;script&gt;") {
				t.Errorf("unescaped approval text:\n%s", page)
			}
		})
	}
}

// events opens the event stream of b's session.
func (b *browser) events(ctx context.Context) *bufio.Reader {
	b.t.Helper()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, b.base+"/console/events", nil)
	res, err := b.client.Do(req)
	if err != nil {
		b.t.Fatal(err)
	}
	b.t.Cleanup(func() { res.Body.Close() })
	if res.StatusCode != http.StatusOK || res.Header.Get("Content-Type") != "text/event-stream" {
		b.t.Fatalf("events: status %d, type %q", res.StatusCode, res.Header.Get("Content-Type"))
	}
	return bufio.NewReader(res.Body)
}

// nextEvent returns the data of the next change event.
func nextEvent(t *testing.T, rd *bufio.Reader) string {
	t.Helper()
	for {
		line, err := rd.ReadString('\n')
		if err != nil {
			t.Fatalf("reading events: %v", err)
		}
		if data, ok := strings.CutPrefix(strings.TrimRight(line, "\n"), "data: "); ok {
			return data
		}
	}
}

func TestEventsTellWhatChanged(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	r := newRig(t, false, nil)
	bob, mallory := r.browser(t), r.browser(t)
	bob.login("key-bob", "")
	mallory.login("key-mallory", "")
	bobs, mallorys := bob.events(ctx), mallory.events(ctx)
	// The first read of the store is what the streams start from.
	time.Sleep(100 * time.Millisecond)

	steps := []struct {
		name string
		do   func()
		rd   *bufio.Reader
		want string
	}{
		{"a new approval", func() { r.request(t, "apr_1"); r.console.Notify() }, bobs,
			"New approval waiting: refund_invoice, called by alice."},
		{"a decision", func() {
			if _, err := r.console.approvals.Decide(ctx, "apr_1", keys["key-bob"], approval.Approve, ""); err != nil {
				t.Fatal(err)
			}
		}, bobs, "refund_invoice is approved by bob; it runs when alice calls it again."},
		// Mallory may not see apr_1: the first event on her stream is of
		// the approval that names her.
		{"only what the approver may see", func() { r.request(t, "apr_2", "mallory"); r.console.Notify() }, mallorys,
			"New approval waiting: refund_invoice, called by alice."},
	}
	for _, s := range steps {
		t.Run(s.name, func(t *testing.T) {
			s.do()
			if got := nextEvent(t, s.rd); got != s.want {
				t.Errorf("event %q, want %q", got, s.want)
			}
		})
	}
	t.Run("without a session", func(t *testing.T) {
		if res, _ := r.browser(t).get("/console/events"); res.StatusCode != http.StatusUnauthorized {
			t.Errorf("status %d", res.StatusCode)
		}
	})
}

// memoryHistory is an audit log in a slice.
type memoryHistory []*audit.Record

func (h memoryHistory) Head(context.Context) (int64, string, error) { return int64(len(h)), "", nil }

func (h memoryHistory) Records(_ context.Context, from int64) iter.Seq2[*audit.Record, error] {
	return func(yield func(*audit.Record, error) bool) {
		for _, rec := range h[from-1:] {
			if !yield(rec, nil) {
				return
			}
		}
	}
}

func TestHistory(t *testing.T) {
	at := time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)
	log := memoryHistory{
		{Seq: 1, Time: at, Event: "call", Tenant: "acme", Principal: "alice", Tool: "refund_invoice", Mode: "approval", Decision: "asked", Outcome: "APPROVAL_PENDING"},
		{Seq: 2, Time: at, Event: "approval_decided", Tenant: "acme", Principal: "bob", Tool: "refund_invoice", Decision: "confirmed",
			Detail: "apr_1: approved the call of alice"},
		{Seq: 3, Time: at, Event: "call", Tenant: "acme", Principal: "alice", Tool: "refund_invoice", Mode: "approval", Decision: "confirmed",
			ConfirmedBy: "approval", Approvers: []string{"bob"}, Outcome: "ok"},
		{Seq: 6, Time: at, Event: "call", Tenant: "acme", Principal: "alice", Tool: "refund_invoice", Mode: "approval", Decision: "confirmed",
			ConfirmedBy: "approval", Approvers: []string{"bob"}, Outcome: "tool_error"},
		{Seq: 4, Time: at, Event: "approval_decided", Tenant: "globex", Principal: "zed", Tool: "delete_customer", Decision: "declined",
			Detail: "apr_9: denied the call of yan"},
		{Seq: 5, Time: at, Event: "call", Tenant: "acme", Principal: "alice", Tool: "send_reminder", Mode: "flag", Decision: "confirmed", Outcome: "ok"},
	}
	r := newRig(t, false, log)
	b := r.browser(t)
	b.login("key-bob", "")
	_, page := b.get("/console/history")
	tests := []struct {
		name  string
		text  string
		shown bool
	}{
		{"a decision", "approved the call of alice", true},
		{"an outcome in words", "<td>ran</td>", true},
		{"a failed tool's outcome in words", "ran; the tool answered with an error", true},
		{"no outcome as a code word", "tool_error", false},
		{"the call it decided", "ran, approved by bob", true},
		{"another tenant's decision", "denied the call of yan", false},
		{"a call confirmed otherwise", "send_reminder", false},
		{"a call still waiting", "APPROVAL_PENDING", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := strings.Contains(page, tt.text); got != tt.shown {
				t.Errorf("%q shown: %t, want %t:\n%s", tt.text, got, tt.shown, page)
			}
		})
	}
}

func TestRefreshLeavesTheFlash(t *testing.T) {
	r := newRig(t, false, nil)
	r.request(t, "apr_1")
	b := r.signedIn(t, "key-bob")
	b.post("/console/approvals/apr_1/decide", url.Values{"csrf": {b.csrf("/console/")}, "decision": {"approve"}})
	const flash = "You approved alice&#39;s call of refund_invoice."
	steps := []struct {
		name    string
		refresh bool
		shows   bool
	}{
		{"a live refresh does not show it", true, false},
		{"the next page shows it", false, true},
		{"once", false, false},
	}
	for _, s := range steps {
		t.Run(s.name, func(t *testing.T) {
			header := http.Header{}
			if s.refresh {
				header.Set(refreshHeader, "1")
			}
			if _, page := b.do(http.MethodGet, "/console/approvals/apr_1", nil, header); strings.Contains(page, flash) != s.shows {
				t.Errorf("shows the flash: %t, want %t:\n%s", !s.shows, s.shows, page)
			}
		})
	}
}

// TestArgRowsShowWhatWasSent: an approver reads nested values as compact
// JSON, written as sent: <script> in an array is not shown as
// \u003cscript\u003e (the page escapes it for HTML itself).
func TestArgRowsShowWhatWasSent(t *testing.T) {
	rows := argRows(map[string]any{
		"name":      "<script>",
		"deletions": []any{map[string]any{"entityName": "<b>Bob</b>", "observations": []any{"likes & coffee"}}},
	})
	want := []argRow{
		{"deletions", `[{"entityName":"<b>Bob</b>","observations":["likes & coffee"]}]`},
		{"name", "<script>"},
	}
	if !slices.Equal(rows, want) {
		t.Errorf("rows = %q, want %q", rows, want)
	}
}
