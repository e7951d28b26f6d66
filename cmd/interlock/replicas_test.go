// Replicas: several `interlock serve` processes that share one store, each
// call answered exactly once whichever gateway serves it: two gateways side
// by side, gateways behind a load balancer without affinity, and the
// console across them in a browser.

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/interlock-mcp/interlock"
	"github.com/interlock-mcp/interlock/gateway"
)

// twoGateways starts two `interlock serve` processes that front one demo
// database and share Redis (under a prefix of their own) and
// INTERLOCK_SECRET, with the configuration sections in extra; it returns
// their base URLs.
func twoGateways(t *testing.T, extra string) (a, b string) {
	t.Helper()
	dir := t.TempDir()
	config := filepath.Join(dir, "interlock.yaml")
	prefix := fmt.Sprintf("interlock-test:%s:%d:", t.Name(), time.Now().UnixNano())
	err := os.WriteFile(config, []byte(fmt.Sprintf(`
upstreams:
  - name: demo
    command: [%q, demo, --db, %q]
store:
  redis: redis://127.0.0.1:6379/0
  prefix: %q
`, binary, filepath.Join(dir, "demo.db"), prefix)+extra), 0o600)
	if err != nil {
		t.Fatal(err)
	}
	env := []string{"MCP_DRY_RUN=false", "INTERLOCK_SECRET=" + strings.Repeat("r", 40)}
	a = strings.TrimSuffix(servedHTTPWith(t, env, "--config", config), "/mcp")
	b = strings.TrimSuffix(servedHTTPWith(t, env, "--config", config), "/mcp")
	return a, b
}

// atOnce sends n calls at once, the i-th to gateway a when i is even and
// to b when it is odd, and counts those that ran (200 OK) and those that
// refused says were refused; any other answer fails the test, named what.
func atOnce(t *testing.T, what string, n int, a, b string, call func(i int, base string) (int, map[string]any), refused func(status int, body map[string]any) bool) (ran, refusals int64) {
	var ranN, refusedN atomic.Int64
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range n {
		wg.Go(func() {
			<-start
			base := a
			if i%2 == 1 {
				base = b
			}
			switch status, body := call(i, base); {
			case status == http.StatusOK:
				ranN.Add(1)
			case refused(status, body):
				refusedN.Add(1)
			default:
				t.Errorf("%s: %d %v", what, status, body)
			}
		})
	}
	close(start)
	wg.Wait()
	return ranN.Load(), refusedN.Load()
}

// TestTokenExactlyOnceAcrossGateways runs two `interlock serve` processes
// that share Redis, INTERLOCK_SECRET and the demo database, takes a confirm
// token from one, and redeems it 1,000 times at once on both: the refund
// must happen exactly once.
func TestTokenExactlyOnceAcrossGateways(t *testing.T) {
	a, b := twoGateways(t, `
rules:
  - name: refunds
    match: {tools: [refund_invoice]}
    mode: token
    summary: "Refund ${{.args.amount}} on {{.args.invoice_id}}."
`)

	client := &http.Client{Transport: &http.Transport{MaxConnsPerHost: 32, MaxIdleConnsPerHost: 32}, Timeout: 60 * time.Second}
	call := func(base, tool, body string) (int, map[string]any) {
		resp, err := client.Post(base+"/v1/tools/"+tool+"/call", "application/json", strings.NewReader(body))
		if err != nil {
			t.Error(err)
			return 0, nil
		}
		defer resp.Body.Close()
		var out map[string]any
		json.NewDecoder(resp.Body).Decode(&out)
		return resp.StatusCode, out
	}

	status, body := call(a, "refund_invoice", `{"arguments":{"invoice_id":"inv_1003","amount":1}}`)
	if status != http.StatusPreconditionRequired {
		t.Fatalf("describe: %d %v", status, body)
	}
	redeem := fmt.Sprintf(`{"arguments":{"invoice_id":"inv_1003","amount":1},"confirm_token":%q}`, body["confirm_token"])

	ok, invalid := atOnce(t, "redeem", 1000, a, b, func(_ int, base string) (int, map[string]any) {
		return call(base, "refund_invoice", redeem)
	}, func(status int, body map[string]any) bool {
		return status == http.StatusForbidden && body["code"] == "CONSENT_TOKEN_INVALID"
	})
	if ok != 1 || invalid != 999 {
		t.Errorf("%d redemptions ran and %d were CONSENT_TOKEN_INVALID; want 1 and 999", ok, invalid)
	}

	// The demo database agrees: one dollar was refunded, once.
	status, body = call(b, "list_invoices", `{"arguments":{"customer_id":"acct_9931"}}`)
	if status != http.StatusOK {
		t.Fatalf("list_invoices: %d %v", status, body)
	}
	invoices := body["structuredContent"].(map[string]any)["invoices"].([]any)
	for _, inv := range invoices {
		if m := inv.(map[string]any); m["id"] == "inv_1003" && m["refunded"] != 1.0 {
			t.Errorf("inv_1003 refunded %v, want 1", m["refunded"])
		}
	}
}

// TestApprovalExactlyOnceAcrossGateways: a refund waits for approval on
// one gateway, is approved on the other, and its re-call, sent 200 times
// at once to both, runs once.
func TestApprovalExactlyOnceAcrossGateways(t *testing.T) {
	a, b := twoGateways(t, fmt.Sprintf(`
auth:
  keys:
    - {sha256: %s, principal: agent}
    - {sha256: %s, principal: bob}
rules:
  - name: refunds
    match: {tools: [refund_invoice]}
    mode: approval
    approvers: [bob]
`, gateway.HashKey("agent-key"), gateway.HashKey("bob-key")))
	const refund = `{"arguments":{"invoice_id":"inv_1003","amount":1}}`

	status, body := restPost(t, a+"/v1/tools/refund_invoice/call", "agent-key", refund)
	id, _ := body["approval_id"].(string)
	if status != http.StatusAccepted || id == "" {
		t.Fatalf("first call: %d %v", status, body)
	}
	if status, body := restPost(t, b+"/v1/approvals/"+id+"/approve", "bob-key", `{}`); status != http.StatusOK {
		t.Fatalf("approve on the other gateway: %d %v", status, body)
	}
	ran, waiting := atOnce(t, "re-call", 200, a, b, func(_ int, base string) (int, map[string]any) {
		return restPost(t, base+"/v1/tools/refund_invoice/call", "agent-key", refund)
	}, func(status int, body map[string]any) bool {
		return status == http.StatusAccepted || body["code"] == "CONSENT_TOKEN_INVALID"
	})
	if ran != 1 {
		t.Errorf("the approved refund ran %d times (and %d calls were told to wait)", ran, waiting)
	}
}

// TestBudgetExactAcrossGateways runs two `interlock serve` processes that
// share Redis, and sends 200 confirmed reminders at once, from two agents
// of one tenant, half to each: a per-tenant budget of 37 lets exactly 37
// run, and refuses every other with RATE_LIMITED and retry_after_ms.
func TestBudgetExactAcrossGateways(t *testing.T) {
	a, b := twoGateways(t, fmt.Sprintf(`
auth:
  keys:
    - {sha256: %s, principal: agent-1, tenant: acme}
    - {sha256: %s, principal: agent-2, tenant: acme}
rules:
  - name: reminders
    match: {tools: [send_reminder]}
    mode: flag
budgets:
  - {name: reminders-per-tenant, per: tenant, limit: 37, window: 1h, rules: [reminders]}
`, gateway.HashKey("agent-1-key"), gateway.HashKey("agent-2-key")))
	const remind = `{"arguments":{"customer_id":"acct_9931"},"confirm":true}`

	ran, limited := atOnce(t, "reminder", 200, a, b, func(i int, base string) (int, map[string]any) {
		key := "agent-1-key"
		if i%4 >= 2 {
			key = "agent-2-key"
		}
		return restPost(t, base+"/v1/tools/send_reminder/call", key, remind)
	}, func(status int, body map[string]any) bool {
		wait, _ := body["retry_after_ms"].(float64)
		return status == http.StatusTooManyRequests && body["code"] == "RATE_LIMITED" && wait > 0
	})
	if ran != 37 || limited != 163 {
		t.Errorf("%d reminders ran and %d were RATE_LIMITED; want 37 and 163", ran, limited)
	}
}

// roundRobin is a load balancer at its simplest: each request goes to the
// next backend in turn, with no regard for sessions. It records which
// backend served each tool call.
type roundRobin struct {
	backends []*httputil.ReverseProxy
	next     atomic.Uint64

	mu sync.Mutex
	// calls lists, for each tools/call over MCP or REST call, the index of
	// the backend that served it.
	calls []int
}

func newRoundRobin(t *testing.T, bases ...string) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(&roundRobin{backends: reverseProxies(t, bases)})
	t.Cleanup(srv.Close)
	return srv
}

// reverseProxies returns a reverse proxy to each of bases. The Host header
// passes as the client sent it, as a load balancer's does: the console's
// passkeys are made for that host.
func reverseProxies(t *testing.T, bases []string) []*httputil.ReverseProxy {
	t.Helper()
	var proxies []*httputil.ReverseProxy
	for _, base := range bases {
		u, err := url.Parse(base)
		if err != nil {
			t.Fatal(err)
		}
		proxies = append(proxies, httputil.NewSingleHostReverseProxy(u))
	}
	return proxies
}

func (rr *roundRobin) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	i := int(rr.next.Add(1)-1) % len(rr.backends)
	body, _ := io.ReadAll(r.Body)
	r.Body = io.NopCloser(bytes.NewReader(body))
	var rpc struct{ Method string }
	_ = json.Unmarshal(body, &rpc)
	if rpc.Method == "tools/call" || strings.HasPrefix(r.URL.Path, "/v1/tools/") {
		rr.mu.Lock()
		rr.calls = append(rr.calls, i)
		rr.mu.Unlock()
	}
	rr.backends[i].ServeHTTP(w, r)
}

// withKey sends every request with the API key.
type withKey string

func (k withKey) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+string(k))
	return http.DefaultTransport.RoundTrip(r)
}

// TestReplicasBehindALoadBalancer runs two `interlock serve --stateless`
// replicas that share Redis (confirm tokens), PostgreSQL (approvals,
// grants and the audit chain), INTERLOCK_SECRET and the demo's database,
// behind a proxy that sends each request to the other replica, as a
// load balancer without sticky sessions does; every flow goes through it.
func TestReplicasBehindALoadBalancer(t *testing.T) {
	dir := t.TempDir()
	config := filepath.Join(dir, "interlock.yaml")
	pg := pgSchema(t)
	err := os.WriteFile(config, fmt.Appendf(nil, `
upstreams:
  - name: demo
    command: [%q, demo, --db, %q]
store:
  redis: redis://127.0.0.1:6379/0
  prefix: "interlock-test:balanced:%d:"
  postgres: %q
audit:
  postgres: %q
auth:
  keys:
    - {sha256: %s, principal: agent}
    - {sha256: %s, principal: bob}
rules:
  - name: large-refunds
    match: {tools: [refund_invoice]}
    when: "num(args.amount) > 1000"
    mode: approval
    approvers: [bob]
  - name: refunds
    match: {tools: [refund_invoice]}
    mode: token
  - name: deletions
    match: {tools: [delete_customer]}
    mode: elicit
    fallback: token
`, binary, filepath.Join(dir, "demo.db"), time.Now().UnixNano(), pg, pg, gateway.HashKey("agent-key"), gateway.HashKey("bob-key")), 0o600)
	if err != nil {
		t.Fatal(err)
	}
	env := []string{"MCP_DRY_RUN=false", "INTERLOCK_SECRET=" + strings.Repeat("b", 40)}
	var bases []string
	for range 2 {
		// Each replica its own data directory, as on two machines.
		mcpURL := servedHTTPWith(t, env, "--config", config, "--stateless", "--data", t.TempDir())
		bases = append(bases, strings.TrimSuffix(mcpURL, "/mcp"))
	}
	lb := newRoundRobin(t, bases...)
	rr := lb.Config.Handler.(*roundRobin)
	servedBy := func() int {
		rr.mu.Lock()
		defer rr.mu.Unlock()
		return rr.calls[len(rr.calls)-1]
	}
	refunded := func(invoice string) float64 {
		t.Helper()
		status, body := restPost(t, lb.URL+"/v1/tools/list_invoices/call", "agent-key", `{"arguments":{"customer_id":"acct_9931"}}`)
		if status != http.StatusOK {
			t.Fatalf("list_invoices: %d %v", status, body)
		}
		for _, inv := range body["structuredContent"].(map[string]any)["invoices"].([]any) {
			if m := inv.(map[string]any); m["id"] == invoice {
				amount, _ := m["refunded"].(float64)
				return amount
			}
		}
		t.Fatalf("no invoice %s", invoice)
		return 0
	}

	t.Run("a token from one replica redeems on the other, once", func(t *testing.T) {
		const refund = `{"arguments":{"invoice_id":"inv_1003","amount":2}}`
		before := refunded("inv_1003")
		status, body := restPost(t, lb.URL+"/v1/tools/refund_invoice/call", "agent-key", refund)
		if status != http.StatusPreconditionRequired {
			t.Fatalf("describe: %d %v", status, body)
		}
		described := servedBy()
		redeem := fmt.Sprintf(`{"arguments":{"invoice_id":"inv_1003","amount":2},"confirm_token":%q}`, body["confirm_token"])
		if status, body := restPost(t, lb.URL+"/v1/tools/refund_invoice/call", "agent-key", redeem); status != http.StatusOK {
			t.Fatalf("redeem: %d %v", status, body)
		}
		if servedBy() == described {
			t.Errorf("the proxy sent describe and redeem to replica %d both", described)
		}
		if status, body := restPost(t, lb.URL+"/v1/tools/refund_invoice/call", "agent-key", redeem); body["code"] != string(interlock.CodeConsentTokenInvalid) {
			t.Errorf("second redeem: %d %v, want CONSENT_TOKEN_INVALID", status, body)
		}
		if got := refunded("inv_1003") - before; got != 2 {
			t.Errorf("refunded %v, want 2: the refund ran once", got)
		}
	})

	t.Run("a client without elicitation gets a token and redeems it", func(t *testing.T) {
		cs := connectClient(t, "no-forms", &mcp.StreamableClientTransport{Endpoint: lb.URL + "/mcp", HTTPClient: &http.Client{Transport: withKey("agent-key")}})
		defer cs.Close()
		body := structured(t, callTool(t, cs, "delete_customer", map[string]any{"id": "acct_2048"}))
		token, _ := body["confirm_token"].(string)
		if body["code"] != string(interlock.CodeConfirmationRequired) || token == "" {
			t.Fatalf("delete_customer: %v", body)
		}
		described := servedBy()
		if res := callTool(t, cs, "delete_customer", map[string]any{"id": "acct_2048", interlock.MetaConfirmToken: token}); res.IsError {
			t.Fatalf("redeem: %v", structured(t, res))
		}
		redeemed := servedBy()
		if c := code(t, callTool(t, cs, "get_customer", map[string]any{"id": "acct_2048"})); c != interlock.CodeNotFound {
			t.Errorf("get_customer after the delete: %s", c)
		}
		t.Logf("described on replica %d, redeemed on replica %d", described, redeemed)
	})

	t.Run("an approval made through the proxy lets the re-call run once", func(t *testing.T) {
		const refund = `{"arguments":{"invoice_id":"inv_1001","amount":1100}}`
		before := refunded("inv_1001")
		status, body := restPost(t, lb.URL+"/v1/tools/refund_invoice/call", "agent-key", refund)
		id, _ := body["approval_id"].(string)
		if status != http.StatusAccepted || id == "" {
			t.Fatalf("first call: %d %v", status, body)
		}
		if status, body := restPost(t, lb.URL+"/v1/approvals/"+id+"/approve", "agent-key", `{}`); status != http.StatusForbidden {
			t.Errorf("the caller approving their own call: %d %v, want 403", status, body)
		}
		if status, body := restPost(t, lb.URL+"/v1/approvals/"+id+"/approve", "bob-key", `{}`); status != http.StatusOK {
			t.Fatalf("approve: %d %v", status, body)
		}
		var ran, refused atomic.Int64
		var wg sync.WaitGroup
		for range 20 {
			wg.Go(func() {
				switch status, body := restPost(t, lb.URL+"/v1/tools/refund_invoice/call", "agent-key", refund); {
				case status == http.StatusOK:
					ran.Add(1)
				case status == http.StatusAccepted || body["code"] == string(interlock.CodeConsentTokenInvalid):
					refused.Add(1)
				default:
					t.Errorf("re-call: %d %v", status, body)
				}
			})
		}
		wg.Wait()
		if ran.Load() != 1 {
			t.Errorf("the approved refund ran %d times (%d re-calls refused)", ran.Load(), refused.Load())
		}
		if got := refunded("inv_1001") - before; got != 1100 {
			t.Errorf("refunded %v, want 1100", got)
		}
	})

	rr.mu.Lock()
	served := map[int]int{}
	for _, i := range rr.calls {
		served[i]++
	}
	rr.mu.Unlock()
	if served[0] == 0 || served[1] == 0 {
		t.Errorf("tool calls per replica: %v, want both to serve", served)
	}
	// Both replicas wrote one audit chain, and it holds.
	rc, out, errOut := runCLI(t, "audit", "verify", "--config", config)
	if rc != 0 || !strings.HasPrefix(out, "ok: ") {
		t.Errorf("audit verify: exit %d %s%s", rc, out, errOut)
	}
}

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
	b := &consoleBalancer{backends: reverseProxies(t, bases), streams: make([]int, len(bases))}
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
