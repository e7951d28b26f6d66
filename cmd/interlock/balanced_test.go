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
	rr := &roundRobin{}
	for _, b := range bases {
		u, err := url.Parse(b)
		if err != nil {
			t.Fatal(err)
		}
		rr.backends = append(rr.backends, httputil.NewSingleHostReverseProxy(u))
	}
	srv := httptest.NewServer(rr)
	t.Cleanup(srv.Close)
	return srv
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
		cs, err := mcp.NewClient(&mcp.Implementation{Name: "no-forms"}, nil).Connect(context.Background(),
			&mcp.StreamableClientTransport{Endpoint: lb.URL + "/mcp", HTTPClient: &http.Client{Transport: withKey("agent-key")}}, nil)
		if err != nil {
			t.Fatal(err)
		}
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
	rc, out, errOut := runBinary(t, "audit", "verify", "--config", config)
	if rc != 0 || !strings.HasPrefix(out, "ok: ") {
		t.Errorf("audit verify: exit %d %s%s", rc, out, errOut)
	}
}
