package gateway

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/interlock-mcp/interlock"
)

func post(t *testing.T, url, key, body string) (int, map[string]any) {
	t.Helper()
	status, b, header := bearerRequest(t, http.MethodPost, url, key, body)
	var out map[string]any
	if header.Get("Content-Type") == "application/json" {
		if err := json.Unmarshal(b, &out); err != nil {
			t.Fatalf("body %s: %v", b, err)
		}
	}
	return status, out
}

// bearerRequest makes a request with key as its bearer credential, when
// there is one, and a JSON body (a POST's always says it is JSON); it
// returns the answer's status, body and header.
func bearerRequest(t *testing.T, method, url, key, body string) (int, []byte, http.Header) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if body != "" || method == http.MethodPost {
		req.Header.Set("Content-Type", "application/json")
	}
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b, resp.Header
}

// toolList is the body of GET /v1/tools.
type toolList struct {
	Tools []struct {
		Name        string         `json:"name"`
		InputSchema map[string]any `json:"inputSchema"`
	} `json:"tools"`
}

// getTools lists the tools at GET /v1/tools with an API key.
func getTools(t *testing.T, url, key string) toolList {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, url+"/v1/tools", nil)
	req.Header.Set("Authorization", "Bearer "+key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var list toolList
	if err := json.NewDecoder(resp.Body).Decode(&list); err != nil {
		t.Fatal(err)
	}
	return list
}

func TestREST(t *testing.T) {
	f := testConfig(t, fmt.Sprintf(`
auth:
  keys:
    - {sha256: %s, principal: ops, tenant: acme}
rules:
  - name: wipes-need-a-token
    match: {tools: [wipe]}
    mode: token
    summary: "Wipe {{.args.target}}."
`, HashKey("ops-key")), "fx")
	gw := start(t, f, "false")
	srv := httptest.NewServer(gw.Handler(false))
	defer srv.Close()
	url := func(tool string) string { return srv.URL + "/v1/tools/" + tool + "/call" }

	status, body := post(t, url("wipe"), "", `{"arguments":{"target":"all"}}`)
	if status != http.StatusUnauthorized {
		t.Fatalf("without a key: %d %v", status, body)
	}

	status, body = post(t, url("wipe"), "ops-key", `{"arguments":{"target":"all"}}`)
	if status != http.StatusPreconditionRequired || body["code"] != "CONFIRMATION_REQUIRED" || body["summary"] != "Wipe all." || body["confirm_required"] != true {
		t.Fatalf("describe: %d %v", status, body)
	}
	token := body["confirm_token"].(string)

	redeem := fmt.Sprintf(`{"arguments":{"target":"all"},"confirm_token":%q}`, token)
	status, body = post(t, url("wipe"), "ops-key", redeem)
	if status != http.StatusOK || body["content"].([]any)[0].(map[string]any)["text"] != "wiped" {
		t.Fatalf("redeem: %d %v", status, body)
	}
	status, body = post(t, url("wipe"), "ops-key", redeem)
	if status != http.StatusForbidden || body["code"] != "CONSENT_TOKEN_INVALID" {
		t.Fatalf("second redeem: %d %v", status, body)
	}

	tests := []struct {
		name       string
		tool, body string
		wantStatus int
		wantCode   interlock.Code
	}{
		{"read-only tool runs", "echo", `{"arguments":{"x":1}}`, http.StatusOK, ""},
		{"unknown tool", "nope", `{"arguments":{}}`, http.StatusNotFound, interlock.CodeNotFound},
		{"body is not JSON", "echo", `{"arguments":`, http.StatusBadRequest, interlock.CodeValidationFailed},
		{"unknown body field", "echo", `{"args":{}}`, http.StatusBadRequest, interlock.CodeValidationFailed},
		{"arguments not an object", "echo", `{"arguments":[1]}`, http.StatusBadRequest, interlock.CodeValidationFailed},
		{"schema violation", "wipe", `{"arguments":{}}`, http.StatusBadRequest, interlock.CodeValidationFailed},
		{"an argument in another case", "wipe", `{"arguments":{"target":"scratch","Target":"all"}}`, http.StatusBadRequest, interlock.CodeValidationFailed},
		{"forged token", "wipe", `{"arguments":{"target":"all"},"confirm_token":"ilt1_AAAA"}`, http.StatusForbidden, interlock.CodeConsentTokenInvalid},
		{"body too large", "echo", `{"arguments":{"x":"` + strings.Repeat("x", 2<<20) + `"}}`, http.StatusBadRequest, interlock.CodeValidationFailed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			status, body := post(t, url(tt.tool), "ops-key", tt.body)
			if status != tt.wantStatus {
				t.Errorf("status %d, want %d (%v)", status, tt.wantStatus, body)
			}
			if tt.wantCode != "" && body["code"] != string(tt.wantCode) {
				t.Errorf("code %v, want %s", body["code"], tt.wantCode)
			}
			if tt.wantCode != "" && (body["recovery_hint"] == nil || body["recovery_hint"] == "") {
				t.Errorf("no recovery hint: %v", body)
			}
		})
	}

	list := getTools(t, srv.URL, "ops-key")
	if len(list.Tools) != fixtureTools || list.Tools[fixtureTools-1].Name != "wipe" {
		t.Fatalf("GET /v1/tools = %+v", list)
	}
	if props := list.Tools[fixtureTools-1].InputSchema["properties"].(map[string]any); props[interlock.MetaConfirmToken] == nil {
		t.Errorf("wipe does not advertise __confirm_token: %v", props)
	}
}

func TestRESTUnderDryRunAndFlag(t *testing.T) {
	gw := start(t, testConfig(t, "", "fx"), "")
	srv := httptest.NewServer(gw.Handler(true))
	defer srv.Close()
	status, body := post(t, srv.URL+"/v1/tools/wipe/call", "", `{"arguments":{"target":"all"},"confirm":true}`)
	if status != http.StatusConflict || body["code"] != "DRY_RUN_PREVIEW" {
		t.Errorf("dry run: %d %v", status, body)
	}
	if preview, _ := body["preview"].(map[string]any); preview["target"] != "all" || preview["__confirm"] != nil {
		t.Errorf("preview = %v", body["preview"])
	}

	live := start(t, testConfig(t, "", "fx"), "false")
	srv2 := httptest.NewServer(live.Handler(true))
	defer srv2.Close()
	if status, body := post(t, srv2.URL+"/v1/tools/wipe/call", "", `{"arguments":{"target":"all"},"confirm":true}`); status != http.StatusOK {
		t.Errorf("flag with confirm: %d %v", status, body)
	}
	if status, body := post(t, srv2.URL+"/v1/tools/wipe/call", "", `{"arguments":{"target":"all"}}`); status != http.StatusConflict {
		t.Errorf("flag without confirm: %d %v", status, body)
	}
}

// TestRESTRefusesWebPages: a page in the user's browser must not reach a
// gateway on their machine.
func TestRESTRefusesWebPages(t *testing.T) {
	gw := start(t, testConfig(t, "", "fx"), "false")
	srv := httptest.NewServer(gw.Handler(false))
	defer srv.Close()
	tests := []struct {
		name       string
		header     map[string]string
		host       string
		wantStatus int
	}{
		{"plain JSON from a script", map[string]string{"Content-Type": "application/json"}, "", http.StatusOK},
		{"a form post (no preflight)", map[string]string{"Content-Type": "text/plain"}, "", http.StatusBadRequest},
		{"cross-site fetch", map[string]string{"Content-Type": "application/json", "Sec-Fetch-Site": "cross-site"}, "", http.StatusForbidden},
		{"cross-origin by Origin", map[string]string{"Content-Type": "application/json", "Origin": "https://evil.example"}, "", http.StatusForbidden},
		{"DNS rebinding", map[string]string{"Content-Type": "application/json"}, "evil.example:8740", http.StatusForbidden},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req, _ := http.NewRequest(http.MethodPost, srv.URL+"/v1/tools/echo/call", strings.NewReader(`{"arguments":{}}`))
			for k, v := range tt.header {
				req.Header.Set(k, v)
			}
			if tt.host != "" {
				req.Host = tt.host
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != tt.wantStatus {
				t.Errorf("status %d, want %d", resp.StatusCode, tt.wantStatus)
			}
		})
	}
}
