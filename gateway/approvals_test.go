package gateway

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/interlock-mcp/interlock/config"
	"github.com/interlock-mcp/interlock/sqlite"
)

func get(t *testing.T, url, key string) (int, map[string]any) {
	t.Helper()
	status, b, _ := bearerRequest(t, http.MethodGet, url, key, "")
	var out map[string]any
	_ = json.Unmarshal(b, &out)
	return status, out
}

// TestApprovalsOverREST: a call waits; the caller cannot approve it, an
// approver can; the re-call runs once; a group member's denial ends the
// next one.
func TestApprovalsOverREST(t *testing.T) {
	f := testConfig(t, fmt.Sprintf(`
auth:
  keys:
    - {sha256: %s, principal: alice, tenant: acme, groups: [finance]}
    - {sha256: %s, principal: bob, tenant: acme}
    - {sha256: %s, principal: carol, tenant: acme, groups: [finance]}
    - {sha256: %s, principal: mallory, tenant: acme}
rules:
  - name: wipes-need-approval
    match: {tools: [wipe]}
    mode: approval
    approvers: [bob, "group:finance"]
    summary: "Wipe {{.args.target}}."
`, HashKey("alice-key"), HashKey("bob-key"), HashKey("carol-key"), HashKey("mallory-key")), "fx")
	gw := start(t, f, "false")
	srv := httptest.NewServer(gw.Handler(false))
	defer srv.Close()
	call := func() (int, map[string]any) {
		return post(t, srv.URL+"/v1/tools/wipe/call", "alice-key", `{"arguments":{"target":"all"}}`)
	}
	decide := func(id, verb, key string) (int, map[string]any) {
		return post(t, srv.URL+"/v1/approvals/"+id+"/"+verb, key, `{"reason":"checked"}`)
	}

	status, body := call()
	id, _ := body["approval_id"].(string)
	if status != http.StatusAccepted || body["code"] != "APPROVAL_PENDING" || id == "" || body["summary"] != "Wipe all." {
		t.Fatalf("first call: %d %v", status, body)
	}
	if _, list := get(t, srv.URL+"/v1/approvals", "alice-key"); len(list["approvals"].([]any)) != 0 {
		t.Errorf("the caller is offered their own call: %v", list)
	}
	if _, list := get(t, srv.URL+"/v1/approvals", "bob-key"); len(list["approvals"].([]any)) != 1 {
		t.Errorf("bob's list: %v", list)
	}
	// Deciding one's own call, or one the rule does not name you for, is
	// 403 PERMISSION_DENIED.
	for _, key := range []string{"alice-key", "mallory-key"} {
		if status, body := decide(id, "approve", key); body["code"] != "PERMISSION_DENIED" || status != http.StatusForbidden {
			t.Errorf("%s approves: %d %v", key, status, body)
		}
	}
	if status, _ := get(t, srv.URL+"/v1/approvals/"+id, "mallory-key"); status != http.StatusNotFound {
		t.Errorf("mallory reads the approval: %d", status)
	}
	if status, body := decide(id, "approve", "bob-key"); status != http.StatusOK || body["state"] != "approved" {
		t.Fatalf("bob approves: %d %v", status, body)
	}
	if status, body := call(); status != http.StatusOK {
		t.Fatalf("re-call after approval: %d %v", status, body)
	}
	status, body = call()
	next, _ := body["approval_id"].(string)
	if status != http.StatusAccepted || next == id {
		t.Fatalf("a second run needs a new approval: %d %v", status, body)
	}
	if status, body := decide(next, "deny", "carol-key"); status != http.StatusOK || body["state"] != "denied" {
		t.Fatalf("carol denies: %d %v", status, body)
	}
	if status, body := call(); status != http.StatusForbidden || body["code"] != "DECLINED" {
		t.Errorf("after the denial: %d %v", status, body)
	}
	if status, body := decide(next, "approve", "bob-key"); status != http.StatusBadRequest {
		t.Errorf("approving a denied approval: %d %v", status, body)
	}
}

// TestGrantsOverREST: an approver grants a scope from one approval; calls
// inside it run at once until it is revoked.
func TestGrantsOverREST(t *testing.T) {
	f := aliceAndBob(t, `
  - name: wipes-need-approval
    match: {tools: [wipe]}
    mode: approval
    approvers: [bob]
`)
	gw := start(t, f, "false")
	srv := httptest.NewServer(gw.Handler(false))
	defer srv.Close()
	call := func(target string) (int, map[string]any) {
		return post(t, srv.URL+"/v1/tools/wipe/call", "alice-key", fmt.Sprintf(`{"arguments":{"target":%q}}`, target))
	}
	_, body := call("cache")
	id, _ := body["approval_id"].(string)
	if status, body := post(t, srv.URL+"/v1/approvals/"+id+"/grant", "bob-key", `{"when":"args.target == 'cache'","ttl":"1h","uses":3}`); status != http.StatusOK {
		t.Fatalf("grant: %d %v", status, body)
	}
	for i := range 2 {
		if status, body := call("cache"); status != http.StatusOK {
			t.Fatalf("call %d under the grant: %d %v", i, status, body)
		}
	}
	if status, _ := call("all"); status != http.StatusAccepted {
		t.Errorf("a call outside the condition: %d", status)
	}
	_, list := get(t, srv.URL+"/v1/grants", "bob-key")
	grants, _ := list["grants"].([]any)
	if len(grants) != 1 || grants[0].(map[string]any)["used"] != 2.0 {
		t.Fatalf("grants: %v", list)
	}
	gid := grants[0].(map[string]any)["id"].(string)
	if _, list := get(t, srv.URL+"/v1/grants", "alice-key"); len(list["grants"].([]any)) != 1 {
		t.Errorf("the caller does not see the grant that covers her calls: %v", list)
	}
	if status, body := post(t, srv.URL+"/v1/grants/"+gid+"/revoke", "bob-key", ``); status != http.StatusOK || body["revoked"] != true {
		t.Fatalf("revoke: %d %v", status, body)
	}
	if status, _ := call("cache"); status != http.StatusAccepted {
		t.Errorf("after revocation: %d", status)
	}
	for _, bad := range []string{`{"ttl":"48h","uses":1}`, `{"ttl":"1h","uses":0}`, `{"ttl":"1h","uses":1,"when":"args.x >"}`, `{"ttl":"soon"}`} {
		_, body := call("other")
		pid, _ := body["approval_id"].(string)
		if status, body := post(t, srv.URL+"/v1/approvals/"+pid+"/grant", "bob-key", bad); status != http.StatusBadRequest {
			t.Errorf("%s: %d %v", bad, status, body)
		}
	}
}

// TestPasskeyApprovalsOverREST: an approval whose rule requires a passkey
// is neither approved, denied nor granted over REST.
func TestPasskeyApprovalsOverREST(t *testing.T) {
	f := aliceAndBob(t, `
  - name: wipes-need-a-passkey
    match: {tools: [wipe]}
    mode: approval
    approvers: [bob]
    require_passkey: true
`)
	gw := start(t, f, "false")
	srv := httptest.NewServer(gw.Handler(false))
	defer srv.Close()
	call := func() (int, map[string]any) {
		return post(t, srv.URL+"/v1/tools/wipe/call", "alice-key", `{"arguments":{"target":"all"}}`)
	}
	_, body := call()
	id, _ := body["approval_id"].(string)
	if id == "" {
		t.Fatalf("first call: %v", body)
	}
	tests := []struct {
		verb, body, wantMessage string
	}{
		{"approve", `{"reason":"checked"}`, "signed with your passkey in the console"},
		{"deny", ``, "signed with your passkey in the console"},
		{"grant", `{"ttl":"1h","uses":3}`, "no standing scope may be granted"},
	}
	for _, tt := range tests {
		t.Run(tt.verb, func(t *testing.T) {
			status, body := post(t, srv.URL+"/v1/approvals/"+id+"/"+tt.verb, "bob-key", tt.body)
			msg, _ := body["message"].(string)
			if status != http.StatusForbidden || body["code"] != "PERMISSION_DENIED" || !strings.Contains(msg, tt.wantMessage) {
				t.Errorf("%s: %d %v", tt.verb, status, body)
			}
		})
	}
	if status, body := call(); status != http.StatusAccepted || body["approval_id"] != id {
		t.Errorf("the re-call after the refusals: %d %v", status, body)
	}
}

// aliceAndBob is a config with keys for alice and bob, and rules.
func aliceAndBob(t *testing.T, rules string) *config.File {
	t.Helper()
	return testConfig(t, fmt.Sprintf(`
auth:
  keys:
    - {sha256: %s, principal: alice}
    - {sha256: %s, principal: bob}
rules:
`, HashKey("alice-key"), HashKey("bob-key"))+strings.TrimPrefix(rules, "\n"), "fx")
}

// TestPendingLimitPerCaller: two tenants' principals of one name, each
// asking at once for approvals of new arguments on a SQLite store, each get
// the rule's max_pending of their own, then RATE_LIMITED (429) without a
// new approval; a call already waiting still answers its approval.
func TestPendingLimitPerCaller(t *testing.T) {
	approvals, err := sqlite.OpenApprovals(t.Context(), filepath.Join(t.TempDir(), "state.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { approvals.Close() })
	// The task tests' alice of acme and alice of tenant other, whose wipes
	// bob approves, at most three waiting at once.
	f := testConfig(t, strings.Replace(taskRules, "approvers: [bob]\n", "approvers: [bob]\n    max_pending: 3\n", 1), "fx")
	gw := newGateway(t, f, Options{Logger: quiet, Getenv: testEnv("false"), Approvals: approvals})
	t.Cleanup(func() { gw.Close() })
	if err := gw.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(gw.Handler(false))
	t.Cleanup(srv.Close)
	wipe := func(key string, n int) (int, map[string]any) {
		return post(t, srv.URL+"/v1/tools/wipe/call", key, fmt.Sprintf(`{"arguments":{"target":"t%d"}}`, n))
	}
	var wg sync.WaitGroup
	for _, key := range []string{"alice-key", "other-alice-key"} {
		wg.Go(func() {
			for n := range 3 {
				if status, body := wipe(key, n); status != http.StatusAccepted || body["code"] != "APPROVAL_PENDING" {
					t.Errorf("%s, approval %d: %d %v", key, n+1, status, body)
				}
			}
			if status, body := wipe(key, 3); status != http.StatusTooManyRequests || body["code"] != "RATE_LIMITED" {
				t.Errorf("%s, one past the limit: %d %v", key, status, body)
			}
			if status, body := wipe(key, 0); status != http.StatusAccepted || body["code"] != "APPROVAL_PENDING" {
				t.Errorf("%s, a call already waiting: %d %v", key, status, body)
			}
		})
	}
	wg.Wait()
	if pending, err := approvals.List(t.Context()); err != nil || len(pending) != 6 {
		t.Errorf("%d approvals stored (%v), want 3 for each tenant", len(pending), err)
	}
}
