package main

import (
	"io"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/interlock-mcp/interlock/internal/testdb"
)

// TestConsoleWhileItsStoreIsAway: a gateway whose store is Redis. While
// Redis is away, a signed-in approver's console page is a clear error,
// never a signed-in view, and no sign-in succeeds; once Redis is back,
// the session made before is there again, without a restart of the
// gateway.
func TestConsoleWhileItsStoreIsAway(t *testing.T) {
	rs := testdb.OwnRedis(t)
	dir := t.TempDir()
	config := keyedDemoConfig(t, dir, "store:\n  redis: "+rs.URL(), "")
	base := strings.TrimSuffix(servedHTTPWith(t, []string{"INTERLOCK_SECRET=" + strings.Repeat("d", 40)}, "--config", config), "/mcp")
	bob := &approverClient{t: t, client: newConsoleBrowser(), base: base}
	do, signIn := bob.do, func() int { return bob.signIn("bob-key") }
	if status := signIn(); status != http.StatusSeeOther {
		t.Fatalf("signing in: %d", status)
	}
	if status, page := do(http.MethodGet, "/console/", nil); status != http.StatusOK || !strings.Contains(page, "Signed in as <strong>bob</strong>") {
		t.Fatalf("the pending list: %d\n%s", status, page)
	}

	rs.Kill()
	for _, path := range []string{"/console/", "/console/events"} {
		status, page := do(http.MethodGet, path, nil)
		if status != http.StatusServiceUnavailable || strings.Contains(page, "Signed in as") || strings.Contains(page, "redis") ||
			!strings.Contains(page, "The console cannot reach its sessions right now") {
			t.Errorf("%s while Redis is away: %d\n%s", path, status, page)
		}
	}
	if status := signIn(); status != http.StatusServiceUnavailable {
		t.Errorf("a sign-in while Redis is away: %d", status)
	}

	rs.Start()
	var status int
	var page string
	deadline := time.Now().Add(15 * time.Second)
	for {
		if status, page = do(http.MethodGet, "/console/", nil); status == http.StatusOK || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if status != http.StatusOK || !strings.Contains(page, "Signed in as <strong>bob</strong>") {
		t.Errorf("once Redis is back, the session made before: %d\n%s", status, page)
	}
}

// approverClient is an approver's browser without a browser: a cookie
// jar, following no redirects, against the console at base.
type approverClient struct {
	t      *testing.T
	client *http.Client
	base   string
}

func (a *approverClient) do(method, path string, form url.Values) (int, string) {
	a.t.Helper()
	var body io.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	}
	req, _ := http.NewRequest(method, a.base+path, body)
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	res, err := a.client.Do(req)
	if err != nil {
		a.t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, string(b)
}

var csrfField = regexp.MustCompile(`name="csrf" value="([^"]+)"`)

// csrf returns the CSRF token of the first form of the page at path.
func (a *approverClient) csrf(path string) string {
	a.t.Helper()
	_, page := a.do(http.MethodGet, path, nil)
	m := csrfField.FindStringSubmatch(page)
	if m == nil {
		a.t.Fatalf("no form on %s:\n%s", path, page)
	}
	return m[1]
}

// signIn signs in with key on the console's form and returns the
// answer's status.
func (a *approverClient) signIn(key string) int {
	a.t.Helper()
	status, _ := a.do(http.MethodPost, "/console/login", url.Values{"csrf": {a.csrf("/console/login")}, "key": {key}})
	return status
}

// TestConsoleSessionOutlivesItsGateway: an approver signs in on one
// gateway, which is then killed (-9); on another gateway sharing the
// store the session stands, and a form of a page the dead gateway served
// is taken.
func TestConsoleSessionOutlivesItsGateway(t *testing.T) {
	tests := []struct {
		name  string
		store func(t *testing.T) string
		// oneDataDirectory runs both gateways on one data directory.
		oneDataDirectory bool
	}{
		{"postgres", pgStore, false},
		{"redis", func(*testing.T) string { return redisStore("outlives") }, false},
		{"the state file of one data directory", func(*testing.T) string { return "" }, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			config := keyedDemoConfig(t, dir, tt.store(t), "")
			env := []string{"INTERLOCK_SECRET=" + strings.Repeat("e", 40)}
			dataA, dataB := t.TempDir(), t.TempDir()
			if tt.oneDataDirectory {
				dataB = dataA
			}
			doomed := command("", "serve", "--listen", "127.0.0.1:0", "--data", dataA, "--config", config)
			doomed.Env = append(doomed.Env, env...)
			mcpA, exited := launch(t, doomed)
			baseB := strings.TrimSuffix(servedHTTPWith(t, env, "--config", config, "--data", dataB), "/mcp")

			bob := &approverClient{t: t, client: newConsoleBrowser(), base: strings.TrimSuffix(mcpA, "/mcp")}
			if status := bob.signIn("bob-key"); status != http.StatusSeeOther {
				t.Fatalf("signing in on the first gateway: %d", status)
			}
			csrf := bob.csrf("/console/")
			_ = doomed.Process.Kill()
			<-exited

			bob.base = baseB
			if status, page := bob.do(http.MethodGet, "/console/", nil); status != http.StatusOK || !strings.Contains(page, "Signed in as <strong>bob</strong>") {
				t.Fatalf("the session on the other gateway: %d\n%s", status, page)
			}
			if status, _ := bob.do(http.MethodPost, "/console/logout", url.Values{"csrf": {csrf}}); status != http.StatusSeeOther {
				t.Errorf("the dead gateway's form on the other: %d", status)
			}
			if status, _ := bob.do(http.MethodGet, "/console/", nil); status != http.StatusSeeOther {
				t.Errorf("after signing out: %d, want a redirect to sign in", status)
			}
		})
	}
}
