package main

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// consoleBalancer is a round-robin load balancer without affinity of
// any kind, in front of the console of several gateways: each request
// goes to the next gateway in turn. One bias makes the test's point:
// a form is sent to a gateway that holds none of the open event
// streams, when there is one, so the live update a decision causes
// always crosses from one gateway to another. It records where each
// request went.
type consoleBalancer struct {
	backends []*httputil.ReverseProxy

	mu      sync.Mutex
	next    int
	streams []int
	served  []balanced
}

// balanced is one request the balancer sent on.
type balanced struct {
	method, path string
	gateway      int
	// signedIn is set when the request carried a console session.
	signedIn bool
	// streamsElsewhere counts the event streams open on other gateways
	// when it was sent.
	streamsElsewhere int
}

func newConsoleBalancer(t *testing.T, bases []string) (*consoleBalancer, *httptest.Server) {
	t.Helper()
	b := &consoleBalancer{streams: make([]int, len(bases))}
	for _, base := range bases {
		u, err := url.Parse(base)
		if err != nil {
			t.Fatal(err)
		}
		// The Host header passes as the browser sent it, as a load
		// balancer's does: the console's passkeys are made for that host.
		b.backends = append(b.backends, httputil.NewSingleHostReverseProxy(u))
	}
	srv := httptest.NewServer(b)
	t.Cleanup(srv.Close)
	return b, srv
}

func (b *consoleBalancer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	b.mu.Lock()
	i := b.next % len(b.backends)
	b.next++
	if r.Method == http.MethodPost && b.streams[i] > 0 {
		for k := 1; k < len(b.backends); k++ {
			if j := (i + k) % len(b.backends); b.streams[j] == 0 {
				i = j
				break
			}
		}
	}
	elsewhere := 0
	for j, n := range b.streams {
		if j != i {
			elsewhere += n
		}
	}
	_, err := r.Cookie("interlock_console")
	b.served = append(b.served, balanced{method: r.Method, path: r.URL.Path, gateway: i, signedIn: err == nil, streamsElsewhere: elsewhere})
	stream := r.URL.Path == "/console/events"
	if stream {
		b.streams[i]++
	}
	b.mu.Unlock()
	if stream {
		defer func() {
			b.mu.Lock()
			b.streams[i]--
			b.mu.Unlock()
		}()
	}
	b.backends[i].ServeHTTP(w, r)
}

// TestConsoleAcrossReplicasInBrowser runs three `interlock serve`
// gateways sharing their store (PostgreSQL, Redis, or the state file of
// one data directory) behind consoleBalancer, and walks
// approvers through the console in Chromium (console/e2e/replicas.mjs):
// sign in, the pending list, an approval's page, the decision, the live
// update, and a passkey registered through one gateway and used through
// another. Every request lands on another gateway than the last.
func TestConsoleAcrossReplicasInBrowser(t *testing.T) {
	tests := []struct {
		name string
		// store is the config's store and audit sections.
		store func(t *testing.T) string
		// oneDataDirectory runs the gateways on one data directory,
		// whose state file is then their store.
		oneDataDirectory bool
	}{
		{"redis and postgres", func(t *testing.T) string {
			pg := pgSchema(t)
			return fmt.Sprintf("store:\n  redis: redis://127.0.0.1:6379/0\n  prefix: \"interlock-test:console:%d:\"\n  postgres: %q\naudit:\n  postgres: %q\n",
				time.Now().UnixNano(), pg, pg)
		}, false},
		{"redis", func(*testing.T) string { return redisStore("console") }, false},
		{"the state file of one data directory", func(*testing.T) string { return "" }, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			config := keyedDemoConfig(t, dir, tt.store(t), `
  - name: large-refunds
    match: {tools: [refund_invoice]}
    mode: approval
    approvers: [bob]
  - name: reminders-signed
    match: {tools: [send_reminder]}
    mode: approval
    approvers: [bob]
    require_passkey: true
`)
			env := []string{"MCP_DRY_RUN=false", "INTERLOCK_SECRET=" + strings.Repeat("c", 40)}
			var bases []string
			shared := t.TempDir()
			for range 3 {
				// Each gateway its own data directory, as on three machines,
				// unless they share one; the first seeds the demo's database
				// before the others open it.
				data := shared
				if !tt.oneDataDirectory {
					data = t.TempDir()
				}
				bases = append(bases, strings.TrimSuffix(servedHTTPWith(t, env, "--config", config, "--data", data), "/mcp"))
			}
			lb, srv := newConsoleBalancer(t, bases)
			runNodeFile(t, "console/e2e", "replicas.mjs", "BALANCER="+srv.URL, "AGENT_KEY=agent-key", "BOB_KEY=bob-key",
				"SCREENSHOTS="+t.TempDir())

			lb.mu.Lock()
			defer lb.mu.Unlock()
			signedIn := map[int]int{}
			decisions := 0
			for _, s := range lb.served {
				if s.signedIn && strings.HasPrefix(s.path, "/console/") && !strings.HasPrefix(s.path, "/console/static/") {
					signedIn[s.gateway]++
				}
				if s.method == http.MethodPost && strings.HasSuffix(s.path, "/decide") {
					decisions++
					if s.streamsElsewhere == 0 {
						t.Errorf("the decision %s went to gateway %d with no page listening on another", s.path, s.gateway)
					}
				}
				t.Logf("%-4s %-45s gateway %d", s.method, s.path, s.gateway)
			}
			if len(signedIn) != len(bases) {
				t.Errorf("signed-in requests were served by %d of the %d gateways: %v", len(signedIn), len(bases), signedIn)
			}
			if decisions < 2 {
				t.Errorf("%d decisions went through the balancer, want the two of the walk", decisions)
			}
		})
	}
}

// runNodeFile runs one file of a node suite (one that needs what a Go
// test sets up, so `npm test` does not run it) against this binary.
func runNodeFile(t *testing.T, dir, file string, env ...string) {
	t.Helper()
	abs, err := filepath.Abs(filepath.Join("..", "..", dir))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(abs, "node_modules", "playwright-core")); err != nil {
		t.Fatalf("playwright-core is not installed: run `npm ci --prefix %s` first (%v)", dir, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "node", "--test", file)
	cmd.Dir = abs
	cmd.Env = append(append(os.Environ(), "INTERLOCK_BIN="+binary), env...)
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "# fail 0") {
		t.Fatalf("%s failed: %v\n%s", file, err, out)
	}
}
