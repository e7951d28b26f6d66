package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/interlock-mcp/interlock/gateway"
)

// TestApprovalsCommand: a reminder waits for approval; `interlock approvals`
// lists it for the approver, who approves it; the agent's re-call runs.
func TestApprovalsCommand(t *testing.T) {
	data := t.TempDir()
	cfg := strings.Replace(string(builtinConfig), "rules:", fmt.Sprintf(`auth:
  keys:
    - {sha256: %s, principal: agent}
    - {sha256: %s, principal: bob}
    - {sha256: %s, principal: bob, tenant: other}
rules:
  - name: reminders-need-approval
    match: {tools: [send_reminder]}
    mode: approval
    approvers: [bob]
  - name: refunds-need-a-passkey
    match: {tools: [refund_invoice]}
    mode: approval
    approvers: [bob]
    require_passkey: true`, gateway.HashKey("agent-key"), gateway.HashKey("bob-key"), gateway.HashKey("other-bob-key")), 1)
	cfg = strings.Replace(cfg, "command: [interlock, demo]", fmt.Sprintf("command: [interlock, demo, --db, %s]", filepath.Join(data, "demo.db")), 1)
	config := filepath.Join(data, "config.yaml")
	if err := os.WriteFile(config, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	url := strings.TrimSuffix(servedHTTPWith(t, []string{"MCP_DRY_RUN=false"}, "--config", config, "--data", data), "/mcp")
	callREST := func() (int, map[string]any) {
		return restPost(t, url+"/v1/tools/send_reminder/call", "agent-key", `{"arguments":{"customer_id":"acct_9931"}}`)
	}
	status, body := callREST()
	id, _ := body["approval_id"].(string)
	if status != 202 || id == "" {
		t.Fatalf("first call: %d %v", status, body)
	}
	cli := func(key string, args ...string) (int, string, string) {
		t.Helper()
		t.Setenv("INTERLOCK_KEY", key)
		return runCLI(t, append([]string{"approvals"}, append(args, "--url", url)...)...)
	}
	if code, out, _ := cli("bob-key", "list"); code != 0 || !strings.Contains(out, id) || !strings.Contains(out, "send_reminder") {
		t.Fatalf("list: %d %q", code, out)
	}
	if code, _, errText := cli("agent-key", "approve", id); code != 1 || !strings.Contains(errText, "PERMISSION_DENIED") {
		t.Errorf("the caller approves: %d %q", code, errText)
	}
	// bob of another tenant is another person: the approval is not his to
	// list or decide.
	if code, out, _ := cli("other-bob-key", "list"); code != 0 || strings.Contains(out, id) {
		t.Errorf("list by bob of tenant other: %d %q", code, out)
	}
	for _, verb := range []string{"approve", "deny"} {
		if code, _, errText := cli("other-bob-key", verb, id); code != 1 || !strings.Contains(errText, "PERMISSION_DENIED") {
			t.Errorf("%s by bob of tenant other: %d %q", verb, code, errText)
		}
	}
	if code, out, errText := cli("bob-key", "approve", id, "--reason", "customer asked"); code != 0 || out != id+": approved\n" {
		t.Fatalf("approve: %d %q %q", code, out, errText)
	}
	if status, body := callREST(); status != 200 {
		t.Errorf("re-call: %d %v", status, body)
	}
	status, body = restPost(t, url+"/v1/tools/refund_invoice/call", "agent-key", `{"arguments":{"invoice_id":"inv_1005","amount":50}}`)
	signedID, _ := body["approval_id"].(string)
	if status != 202 || signedID == "" {
		t.Fatalf("a call whose rule requires a passkey: %d %v", status, body)
	}
	for _, verb := range []string{"approve", "deny"} {
		t.Run("passkey required: "+verb, func(t *testing.T) {
			if code, _, errText := cli("bob-key", verb, signedID); code != 1 || !strings.Contains(errText, "PERMISSION_DENIED") || !strings.Contains(errText, "passkey in the console") {
				t.Errorf("%s: %d %q", verb, code, errText)
			}
		})
	}
	if code, _, errText := cli("", "list"); code != 1 || !strings.Contains(errText, "INTERLOCK_KEY") {
		t.Errorf("without a key: %d %q", code, errText)
	}
}

func restPost(t *testing.T, url, key, body string) (int, map[string]any) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out map[string]any
	_ = json.NewDecoder(resp.Body).Decode(&out)
	return resp.StatusCode, out
}

// TestApproversAreNotified: a new pending approval reaches the configured
// webhook with its link.
func TestApproversAreNotified(t *testing.T) {
	hook, got := webhookReceiver(t)
	data := t.TempDir()
	cfg := strings.Replace(string(builtinConfig), "rules:", fmt.Sprintf(`auth:
  keys:
    - {sha256: %s, principal: agent}
notify:
  - url: %s/hook
rules:
  - name: reminders-need-approval
    match: {tools: [send_reminder]}
    mode: approval
    approvers: [bob]`, gateway.HashKey("agent-key"), hook.URL), 1)
	config := filepath.Join(data, "config.yaml")
	if err := os.WriteFile(config, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	url := strings.TrimSuffix(servedHTTPWith(t, []string{"MCP_DRY_RUN=false"}, "--config", config, "--data", data), "/mcp")
	_, body := restPost(t, url+"/v1/tools/send_reminder/call", "agent-key", `{"arguments":{"customer_id":"acct_9931"}}`)
	select {
	case m := <-got:
		if m["approval_id"] != body["approval_id"] || m["approval_url"] != url+"/console/approvals/"+body["approval_id"].(string) || m["tool"] != "send_reminder" {
			t.Errorf("notification %v for %v", m, body)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no notification")
	}
}
