package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

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

	var ok, invalid atomic.Int64
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range 1000 {
		wg.Go(func() {
			<-start
			base := a
			if i%2 == 1 {
				base = b
			}
			switch status, body := call(base, "refund_invoice", redeem); {
			case status == http.StatusOK:
				ok.Add(1)
			case status == http.StatusForbidden && body["code"] == "CONSENT_TOKEN_INVALID":
				invalid.Add(1)
			default:
				t.Errorf("redeem: %d %v", status, body)
			}
		})
	}
	close(start)
	wg.Wait()
	if ok.Load() != 1 || invalid.Load() != 999 {
		t.Errorf("%d redemptions ran and %d were CONSENT_TOKEN_INVALID; want 1 and 999", ok.Load(), invalid.Load())
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
	var ran, waiting atomic.Int64
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range 200 {
		wg.Go(func() {
			<-start
			base := a
			if i%2 == 1 {
				base = b
			}
			switch status, body := restPost(t, base+"/v1/tools/refund_invoice/call", "agent-key", refund); {
			case status == http.StatusOK:
				ran.Add(1)
			case status == http.StatusAccepted || body["code"] == "CONSENT_TOKEN_INVALID":
				waiting.Add(1)
			default:
				t.Errorf("re-call: %d %v", status, body)
			}
		})
	}
	close(start)
	wg.Wait()
	if ran.Load() != 1 {
		t.Errorf("the approved refund ran %d times (and %d calls were told to wait)", ran.Load(), waiting.Load())
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

	var ran, limited atomic.Int64
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range 200 {
		wg.Go(func() {
			<-start
			base, key := a, "agent-1-key"
			if i%2 == 1 {
				base = b
			}
			if i%4 >= 2 {
				key = "agent-2-key"
			}
			status, body := restPost(t, base+"/v1/tools/send_reminder/call", key, remind)
			wait, _ := body["retry_after_ms"].(float64)
			switch {
			case status == http.StatusOK:
				ran.Add(1)
			case status == http.StatusTooManyRequests && body["code"] == "RATE_LIMITED" && wait > 0:
				limited.Add(1)
			default:
				t.Errorf("reminder: %d %v", status, body)
			}
		})
	}
	close(start)
	wg.Wait()
	if ran.Load() != 37 || limited.Load() != 163 {
		t.Errorf("%d reminders ran and %d were RATE_LIMITED; want 37 and 163", ran.Load(), limited.Load())
	}
}
