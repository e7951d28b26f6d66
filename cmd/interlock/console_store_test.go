package main

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/interlock-mcp/interlock/gateway"
)

// ownRedis is a Redis server of the test's own, which it may kill and
// start again (the shared one it must not), appending every write to its
// file before answering, as a store that must lose no session would.
type ownRedis struct {
	t    *testing.T
	port int
	dir  string
	cmd  *exec.Cmd
}

func startOwnRedis(t *testing.T) *ownRedis {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r := &ownRedis{t: t, port: l.Addr().(*net.TCPAddr).Port, dir: t.TempDir()}
	l.Close()
	r.start()
	t.Cleanup(r.kill)
	return r
}

func (r *ownRedis) start() {
	r.t.Helper()
	r.cmd = exec.Command("redis-server", "--port", strconv.Itoa(r.port), "--bind", "127.0.0.1", "--dir", r.dir,
		"--appendonly", "yes", "--appendfsync", "always", "--save", "")
	if err := r.cmd.Start(); err != nil {
		r.t.Fatalf("redis-server must be installed: %v", err)
	}
	waitFor(r.t, "redis-server", func() bool {
		c, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", r.port))
		if err == nil {
			c.Close()
		}
		return err == nil
	})
}

// kill ends the server as a crash would.
func (r *ownRedis) kill() {
	if r.cmd != nil {
		_ = r.cmd.Process.Kill()
		_ = r.cmd.Wait()
		r.cmd = nil
	}
}

// TestConsoleWhileItsStoreIsAway: a gateway whose store is Redis. While
// Redis is away, a signed-in approver's console page is a clear error,
// never a signed-in view, and no sign-in succeeds; once Redis is back,
// the session made before is there again, without a restart of the
// gateway.
func TestConsoleWhileItsStoreIsAway(t *testing.T) {
	rs := startOwnRedis(t)
	dir := t.TempDir()
	config := filepath.Join(dir, "interlock.yaml")
	err := os.WriteFile(config, fmt.Appendf(nil, `
upstreams:
  - name: demo
    command: [%q, demo, --db, %q]
store:
  redis: redis://127.0.0.1:%d/0
auth:
  keys:
    - {sha256: %s, principal: bob}
`, binary, filepath.Join(dir, "demo.db"), rs.port, gateway.HashKey("bob-key")), 0o600)
	if err != nil {
		t.Fatal(err)
	}
	base := strings.TrimSuffix(servedHTTPWith(t, []string{"INTERLOCK_SECRET=" + strings.Repeat("d", 40)}, "--config", config), "/mcp")
	jar, _ := cookiejar.New(nil)
	client := &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	do := func(method, path string, form url.Values) (int, string) {
		t.Helper()
		var body io.Reader
		if form != nil {
			body = strings.NewReader(form.Encode())
		}
		req, _ := http.NewRequest(method, base+path, body)
		if form != nil {
			req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		}
		res, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return res.StatusCode, string(b)
	}
	signIn := func() int {
		_, page := do(http.MethodGet, "/console/login", nil)
		m := regexp.MustCompile(`name="csrf" value="([^"]+)"`).FindStringSubmatch(page)
		if m == nil {
			t.Fatalf("no sign-in form:\n%s", page)
		}
		status, _ := do(http.MethodPost, "/console/login", url.Values{"csrf": {m[1]}, "key": {"bob-key"}})
		return status
	}
	if status := signIn(); status != http.StatusSeeOther {
		t.Fatalf("signing in: %d", status)
	}
	if status, page := do(http.MethodGet, "/console/", nil); status != http.StatusOK || !strings.Contains(page, "Signed in as <strong>bob</strong>") {
		t.Fatalf("the pending list: %d\n%s", status, page)
	}

	rs.kill()
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

	rs.start()
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
