package gateway

import (
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"regexp"
	"strings"
	"testing"

	"github.com/interlock-mcp/interlock/console"
	"github.com/interlock-mcp/interlock/oauth/oauthtest"
)

// browser is an HTTP client with a cookie jar, as a browser keeps cookies.
type browser struct {
	t *testing.T
	c *http.Client
}

func newBrowser(t *testing.T) *browser {
	jar, _ := cookiejar.New(nil)
	return &browser{t: t, c: &http.Client{Jar: jar}}
}

// get follows redirects and returns the status, the final URL and the
// page.
func (b *browser) get(raw string) (int, string, string) {
	b.t.Helper()
	res, err := b.c.Get(raw)
	if err != nil {
		b.t.Fatal(err)
	}
	defer res.Body.Close()
	page, _ := io.ReadAll(res.Body)
	return res.StatusCode, res.Request.URL.String(), string(page)
}

func (b *browser) post(raw string, form url.Values) (int, string) {
	b.t.Helper()
	res, err := b.c.PostForm(raw, form)
	if err != nil {
		b.t.Fatal(err)
	}
	defer res.Body.Close()
	page, _ := io.ReadAll(res.Body)
	return res.StatusCode, string(page)
}

// startSignInGateway starts an OAuth gateway with the rules given whose
// console signs approvers in with the issuer, where carol of acme, in the
// finance group, is the one who signs in.
func startSignInGateway(t *testing.T, rules string) *oauthGateway {
	t.Helper()
	o := startOAuthGateway(t, oauthClaims+`
    console: {client_id: interlock-console, client_secret: console-secret}`, rules)
	o.iss.Register(oauthtest.Client{ID: "interlock-console", Secret: "console-secret", RedirectURI: o.srv.URL + console.CallbackPath})
	o.iss.SignInAs(map[string]any{"sub": "u-7", "email": "carol@example.com", "org": "acme", "roles": []any{"finance"}}, o.srv.URL+MCPPath)
	return o
}

// startSignIn makes b stop where the issuer sends it back, starts a
// sign-in with it on o, and returns the callback the issuer sent it to:
// b then holds the sign-in cookie, and the callback is not yet sent.
func startSignIn(t *testing.T, o *oauthGateway, b *browser) string {
	t.Helper()
	b.c.CheckRedirect = func(req *http.Request, _ []*http.Request) error {
		if strings.HasPrefix(req.URL.String(), o.srv.URL+console.CallbackPath) {
			return http.ErrUseLastResponse
		}
		return nil
	}
	res, err := b.c.Get(o.srv.URL + "/console/oidc/start")
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	callback := res.Header.Get("Location")
	if !strings.HasPrefix(callback, o.srv.URL+console.CallbackPath+"?") {
		t.Fatalf("the issuer sent the browser to %q", callback)
	}
	return callback
}

var csrfRE = regexp.MustCompile(`name="csrf" value="([^"]+)"`)

// TestConsoleSignInWithTheIssuer: an approver signs in to the console
// through the issuer (authorization code with PKCE), lands on the page she
// asked for, and approves a call as a member of the group her ID token
// lists; a callback whose state this browser did not start, or that was
// already used, signs nobody in.
func TestConsoleSignInWithTheIssuer(t *testing.T) {
	o := startSignInGateway(t, `
  - name: wipes-need-finance
    match: {tools: [wipe]}
    mode: approval
    approvers: ["group:finance"]
`)

	status, pending := post(t, o.srv.URL+"/v1/tools/wipe/call", "bob-key", `{"arguments":{"target":"all"}}`)
	id, _ := pending["approval_id"].(string)
	if status != http.StatusAccepted || id == "" {
		t.Fatalf("bob's wipe: %d %v", status, pending)
	}

	b := newBrowser(t)
	_, _, login := b.get(o.srv.URL + "/console/login")
	if !strings.Contains(login, "Sign in with your identity provider") {
		t.Fatalf("the login page offers no sign-in with the issuer:\n%s", login)
	}
	status, callback, page := b.get(o.srv.URL + "/console/oidc/start?next=" + url.QueryEscape("/console/approvals/"+id))
	if status != http.StatusOK || !strings.HasPrefix(callback, o.srv.URL+console.CallbackPath+"?") ||
		!strings.Contains(page, `content="0; url=/console/approvals/`+id+`"`) || !strings.Contains(page, "carol@example.com") {
		t.Fatalf("after the issuer: %d at %s\n%s", status, callback, page)
	}
	_, _, approval := b.get(o.srv.URL + "/console/approvals/" + id)
	m := csrfRE.FindStringSubmatch(approval)
	if m == nil || !strings.Contains(approval, "carol@example.com") {
		t.Fatalf("the approval's page for carol:\n%s", approval)
	}
	status, _ = b.post(o.srv.URL+"/console/approvals/"+id+"/decide", url.Values{"csrf": {m[1]}, "decision": {"approve"}, "reason": {"checked"}})
	if status != http.StatusOK {
		t.Fatalf("carol approves: %d", status)
	}
	if status, out := post(t, o.srv.URL+"/v1/tools/wipe/call", "bob-key", `{"arguments":{"target":"all"}}`); status != http.StatusOK {
		t.Errorf("bob's wipe after carol's approval: %d %v", status, out)
	}

	t.Run("the same callback again", func(t *testing.T) {
		status, _, page := b.get(callback)
		if status != http.StatusUnauthorized || !strings.Contains(page, "Sign in again") {
			t.Errorf("replayed callback: %d\n%s", status, page)
		}
	})
	t.Run("a state this browser did not start", func(t *testing.T) {
		victim := newBrowser(t)
		// The attacker starts a sign-in and stops at the callback; the
		// victim's browser is sent there.
		attacker := newBrowser(t)
		forged := startSignIn(t, o, attacker)
		status, _, page := victim.get(forged)
		if status != http.StatusUnauthorized || !strings.Contains(page, "not started in this browser") {
			t.Errorf("forged callback: %d\n%s", status, page)
		}
		status, _, page = attacker.get(strings.Replace(forged, "state=", "state=x", 1))
		if status != http.StatusUnauthorized {
			t.Errorf("a changed state: %d\n%s", status, page)
		}
		if _, at, page := victim.get(o.srv.URL + "/console/"); !strings.Contains(at, "/console/login") || strings.Contains(page, "Signed in as") {
			t.Errorf("the victim is signed in: at %s", at)
		}
	})
}

// TestConsoleSignInCookieIsSpent: with an issuer that redeems a code as
// often as it is presented, the sealed sign-in cookie sent back with the
// same callback signs in once: the first callback opens a session, the
// replay of both is refused and opens none.
func TestConsoleSignInCookieIsSpent(t *testing.T) {
	o := startSignInGateway(t, "")
	o.iss.RedeemCodesAgain()

	b := newBrowser(t)
	callback := startSignIn(t, o, b)
	at, err := url.Parse(callback)
	if err != nil {
		t.Fatal(err)
	}
	var flow *http.Cookie
	for _, ck := range b.c.Jar.Cookies(at) {
		if ck.Name == "interlock_console_oidc" {
			flow = ck
		}
	}
	if flow == nil {
		t.Fatal("the browser holds no sign-in cookie")
	}
	// back sends the callback with the sign-in cookie, as a browser (or
	// whoever copied both) would, and returns the status, the page and
	// the console session cookie set, if any.
	back := func() (int, string, string) {
		t.Helper()
		req, err := http.NewRequest(http.MethodGet, callback, nil)
		if err != nil {
			t.Fatal(err)
		}
		req.AddCookie(flow)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		page, _ := io.ReadAll(res.Body)
		session := ""
		for _, ck := range res.Cookies() {
			if ck.Name == "interlock_console" && ck.MaxAge >= 0 {
				session = ck.Value
			}
		}
		return res.StatusCode, string(page), session
	}
	status, page, session := back()
	if status != http.StatusOK || session == "" || !strings.Contains(page, "Signed in as carol@example.com") {
		t.Fatalf("the first callback: %d, session %q\n%s", status, session, page)
	}
	status, page, session = back()
	if status != http.StatusUnauthorized || session != "" || !strings.Contains(page, "already used") {
		t.Errorf("the callback replayed with the same cookie: %d, session %q\n%s", status, session, page)
	}
}
