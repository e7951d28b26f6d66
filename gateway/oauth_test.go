package gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/interlock-mcp/interlock"
	"github.com/interlock-mcp/interlock/oauth/oauthtest"
	"github.com/interlock-mcp/interlock/sqlite"
)

// oauthGateway is a gateway whose callers authenticate with access tokens
// of a test issuer or with bob's API key; rules follow auth. It serves on
// an address known before the gateway is made, since the audience of its
// tokens is its public URL.
type oauthGateway struct {
	gw    *Gateway
	srv   *httptest.Server
	iss   *oauthtest.Issuer
	audit *sqlite.Audit
}

func startOAuthGateway(t *testing.T, oauthYAML, rules string) *oauthGateway {
	t.Helper()
	iss := oauthtest.Start(t)
	srv := httptest.NewUnstartedServer(nil)
	public := "http://" + srv.Listener.Addr().String()
	f := testConfig(t, fmt.Sprintf(`
auth:
  keys:
    - {sha256: %s, principal: bob, tenant: acme}
  oauth:
    issuer: %s
%s
rules:
%s`, HashKey("bob-key"), iss.URL, oauthYAML, rules), "fx")
	gw, audit := startAudited(t, f, Options{PublicURL: public})
	srv.Config.Handler = gw.Handler(false)
	srv.Start()
	t.Cleanup(srv.Close)
	return &oauthGateway{gw: gw, srv: srv, iss: iss, audit: audit}
}

// token is an access token for the gateway naming alice of acme, in the
// finance group, with the scopes given.
func (o *oauthGateway) token(scope string) string {
	c := o.iss.AccessClaims(o.srv.URL+MCPPath, "user-1")
	c["email"], c["org"], c["roles"], c["scope"] = "alice@example.com", "acme", []any{"finance"}, scope
	return o.iss.Sign(nil, c, nil)
}

// request sends method to path with the credential, and returns the
// status, the WWW-Authenticate header and the body.
func (o *oauthGateway) request(t *testing.T, method, path, credential, body string) (int, string, string) {
	t.Helper()
	req, _ := http.NewRequest(method, o.srv.URL+path, strings.NewReader(body))
	if credential != "" {
		req.Header.Set("Authorization", "Bearer "+credential)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, res.Header.Get("WWW-Authenticate"), string(b)
}

const oauthClaims = `    claims: {principal: email, tenant: org, groups: roles}
    scopes: [mcp]`

// TestOAuthCallers: an MCP client with an access token calls through the
// gate as the principal and tenant its claims name; an approver signed in
// by token decides as a member of the group its claims list; API keys
// still work beside tokens.
func TestOAuthCallers(t *testing.T) {
	o := startOAuthGateway(t, oauthClaims, `
  - name: alice-of-acme-may-not-echo
    match: {tools: [echo]}
    when: "principal == 'alice@example.com' && tenant == 'acme'"
    mode: deny
  - name: wipes-need-finance
    match: {tools: [wipe]}
    mode: approval
    approvers: ["group:finance"]
`)
	alice, err := connectKey(o.srv.URL+MCPPath, o.token("mcp other"))
	if err != nil {
		t.Fatalf("connecting with an access token: %v", err)
	}
	defer alice.Close()
	if b := body(t, call(t, alice, "echo", map[string]any{})); b.Code != interlock.CodeToolNotAllowed {
		t.Errorf("alice@example.com of acme calls echo: %s, want TOOL_NOT_ALLOWED", b.Code)
	}
	bob, err := connectKey(o.srv.URL+MCPPath, "bob-key")
	if err != nil {
		t.Fatalf("connecting with an API key beside OAuth: %v", err)
	}
	defer bob.Close()
	if res := call(t, bob, "echo", map[string]any{}); res.IsError {
		t.Errorf("bob calls echo: %+v", res)
	}
	b := body(t, call(t, bob, "wipe", map[string]any{"target": "all"}))
	if b.Code != interlock.CodeApprovalPending || b.ApprovalID == "" {
		t.Fatalf("bob's wipe: %+v", b)
	}
	status, _, out := o.request(t, "POST", "/v1/approvals/"+b.ApprovalID+"/approve", o.token("mcp"), `{"reason":"ok"}`)
	if status != http.StatusOK || !strings.Contains(out, `"approved"`) {
		t.Fatalf("alice, of group finance by her token, approves: %d %s", status, out)
	}
	if res := call(t, bob, "wipe", map[string]any{"target": "all"}); res.IsError {
		t.Errorf("bob's wipe after alice's approval: %+v", res)
	}

	var seen []string
	approvedByAlice := false
	for r, err := range o.audit.Records(context.Background(), 1) {
		if err != nil {
			t.Fatal(err)
		}
		if r.Tool == "echo" {
			seen = append(seen, r.Tenant+"/"+r.Principal+"/"+r.Decision)
		}
		if r.Tool == "wipe" && r.Principal == "bob" && slices.Contains(r.Approvers, "alice@example.com") {
			approvedByAlice = true
		}
	}
	if !slices.Contains(seen, "acme/alice@example.com/denied") || !slices.Contains(seen, "acme/bob/allowed") {
		t.Errorf("echo records: %v", seen)
	}
	if !approvedByAlice {
		t.Error("no record of bob's wipe names alice@example.com as its approver")
	}
}

// TestOAuthRefusals: what a caller without a good credential is told, in
// WWW-Authenticate, and what the audit keeps of it.
func TestOAuthRefusals(t *testing.T) {
	o := startOAuthGateway(t, oauthClaims, "  - {name: r, match: {tools: [wipe]}, mode: deny}\n")
	metadata := fmt.Sprintf(`resource_metadata="%s/.well-known/oauth-protected-resource/mcp"`, o.srv.URL)
	expired := o.iss.AccessClaims(o.srv.URL+MCPPath, "user-1")
	expired["email"], expired["scope"], expired["exp"] = "alice@example.com", "mcp", 1
	otherAudience := o.iss.AccessClaims("https://elsewhere.example/mcp", "user-1")
	otherAudience["email"], otherAudience["scope"] = "alice@example.com", "mcp"
	init := `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`
	tests := []struct {
		name, path, credential string
		status                 int
		challenge              []string
		absent                 string
	}{
		{"no credential", MCPPath, "", http.StatusUnauthorized, []string{metadata, `scope="mcp"`}, "error="},
		{"unknown API key", MCPPath, "wrong-key", http.StatusUnauthorized, []string{metadata, `error="invalid_token"`}, ""},
		{"expired token", MCPPath, o.iss.Sign(nil, expired, nil), http.StatusUnauthorized, []string{metadata, `error="invalid_token"`}, ""},
		{"token for another resource", MCPPath, o.iss.Sign(nil, otherAudience, nil), http.StatusUnauthorized, []string{`error="invalid_token"`}, ""},
		{"token without the scope", MCPPath, o.token("other"), http.StatusForbidden, []string{metadata, `error="insufficient_scope"`, `scope="mcp"`}, ""},
		{"REST without credential", "/v1/tools", "", http.StatusUnauthorized, []string{metadata}, ""},
		{"good token", MCPPath, o.token("mcp"), http.StatusOK, nil, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			method, body := "POST", init
			if strings.HasPrefix(tt.path, "/v1/") {
				method, body = "GET", ""
			}
			status, challenge, out := o.request(t, method, tt.path, tt.credential, body)
			if status != tt.status {
				t.Fatalf("status %d (%s), want %d", status, out, tt.status)
			}
			for _, want := range tt.challenge {
				if !strings.HasPrefix(challenge, "Bearer ") || !strings.Contains(challenge, want) {
					t.Errorf("WWW-Authenticate %q lacks %s", challenge, want)
				}
			}
			if tt.absent != "" && strings.Contains(challenge, tt.absent) {
				t.Errorf("WWW-Authenticate %q has %s", challenge, tt.absent)
			}
			if tt.credential != "" && strings.Contains(out, tt.credential) {
				t.Errorf("the answer repeats the credential: %s", out)
			}
		})
	}
	refused := authRefusals(t, o)
	joined := strings.Join(refused, "\n")
	if len(refused) != 6 || !strings.Contains(joined, "an invalid access token") || !strings.Contains(joined, "without the required scopes") ||
		!strings.Contains(joined, "an unknown API key") || strings.Contains(joined, "wrong-key") || strings.Contains(joined, "eyJ") {
		t.Errorf("auth_refused records:\n%s", joined)
	}
}

// TestKeysOnlyChallenge: without OAuth a refusal names a realm and no
// metadata.
func TestKeysOnlyChallenge(t *testing.T) {
	gw := start(t, aliceAndBob(t, ""), "false")
	srv := httptest.NewServer(gw.Handler(false))
	defer srv.Close()
	for credential, want := range map[string]string{"": `Bearer realm="interlock"`, "nope": `Bearer realm="interlock", error="invalid_token"`} {
		req, _ := http.NewRequest("POST", srv.URL+MCPPath, strings.NewReader("{}"))
		if credential != "" {
			req.Header.Set("Authorization", "Bearer "+credential)
		}
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if got := res.Header.Get("WWW-Authenticate"); res.StatusCode != http.StatusUnauthorized || got != want {
			t.Errorf("credential %q: %d %q, want 401 %q", credential, res.StatusCode, got, want)
		}
	}
	if res, err := http.Get(srv.URL + MetadataPath); err != nil || res.StatusCode != http.StatusNotFound {
		t.Errorf("metadata without OAuth: %v %v", res.StatusCode, err)
	}
}

// TestProtectedResourceMetadata: the document at both well-known paths
// names the resource, its issuer, scopes and how to send a token.
func TestProtectedResourceMetadata(t *testing.T) {
	o := startOAuthGateway(t, oauthClaims, "  - {name: r, match: {tools: [wipe]}, mode: deny}\n")
	for _, path := range []string{MetadataPath, MetadataPath + MCPPath} {
		t.Run(path, func(t *testing.T) {
			status, _, out := o.request(t, "GET", path, "", "")
			var md struct {
				Resource             string   `json:"resource"`
				AuthorizationServers []string `json:"authorization_servers"`
				Scopes               []string `json:"scopes_supported"`
				Bearer               []string `json:"bearer_methods_supported"`
			}
			if err := json.Unmarshal([]byte(out), &md); err != nil || status != http.StatusOK {
				t.Fatalf("%d %s: %v", status, out, err)
			}
			if md.Resource != o.srv.URL+MCPPath || !slices.Equal(md.AuthorizationServers, []string{o.iss.URL}) ||
				!slices.Equal(md.Scopes, []string{"mcp"}) || !slices.Equal(md.Bearer, []string{"header"}) {
				t.Errorf("metadata = %+v", md)
			}
		})
	}
}

// TestHealthzWithAToken: a valid access token sees what is behind the
// gateway, as an API key does; a forged one does not.
func TestHealthzWithAToken(t *testing.T) {
	o := startOAuthGateway(t, oauthClaims, "  - {name: r, match: {tools: [wipe]}, mode: deny}\n")
	for credential, full := range map[string]bool{o.token("mcp"): true, "bob-key": true, oauthtest.Unsigned(map[string]any{"sub": "x"}): false, "": false} {
		_, _, out := o.request(t, "GET", "/healthz", credential, "")
		if got := strings.Contains(out, `"upstreams"`); got != full {
			t.Errorf("healthz with %.12q… shows the upstreams: %v (%s)", credential, got, out)
		}
	}
}

func TestCheckListenCountsOAuth(t *testing.T) {
	f := testConfig(t, "auth:\n  oauth: {issuer: 'https://login.example.com'}\n")
	if err := CheckListen("0.0.0.0:8740", f); err != nil {
		t.Errorf("CheckListen with OAuth: %v", err)
	}
}

// TestOAuthIntrospection: with introspection, a token the issuer revokes
// is refused on the MCP endpoint and the REST face once its answer's
// cache time is over, as an invalid token, and audited as such.
func TestOAuthIntrospection(t *testing.T) {
	const cache = time.Second
	o := startOAuthGateway(t, oauthClaims+"\n    introspection: {client_id: gw, client_secret: 's3=t', cache: 1s}",
		"  - {name: r, match: {tools: [wipe]}, mode: deny}\n")
	o.iss.Register(oauthtest.Client{ID: "gw", Secret: "s3=t"})
	init := `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`
	token := o.token("mcp")
	if status, _, out := o.request(t, "POST", MCPPath, token, init); status != http.StatusOK {
		t.Fatalf("an active token on /mcp: %d %s", status, out)
	}
	if status, _, out := o.request(t, "GET", "/v1/tools", token, ""); status != http.StatusOK {
		t.Fatalf("an active token on /v1/tools: %d %s", status, out)
	}
	if o.iss.Introspections() == 0 {
		t.Fatal("the issuer was never asked about the token")
	}

	o.iss.Revoke(token)
	revoked := time.Now()
	// The answer kept before the revocation may hold for the cache time;
	// the slack is for a slow machine.
	deadline := revoked.Add(cache + 3*time.Second)
	for {
		status, challenge, _ := o.request(t, "POST", MCPPath, token, init)
		if status == http.StatusUnauthorized {
			if !strings.Contains(challenge, `error="invalid_token"`) {
				t.Errorf("WWW-Authenticate %q lacks invalid_token", challenge)
			}
			break
		}
		if status != http.StatusOK || time.Now().After(deadline) {
			t.Fatalf("a revoked token on /mcp %s after its revocation: %d, want 401 within the %s cache", time.Since(revoked), status, cache)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if status, challenge, _ := o.request(t, "GET", "/v1/tools", token, ""); status != http.StatusUnauthorized ||
		!strings.Contains(challenge, `error="invalid_token"`) {
		t.Errorf("a revoked token on /v1/tools: %d %q, want 401 invalid_token", status, challenge)
	}
	if status, _, _ := o.request(t, "GET", "/v1/tools", o.token("mcp"), ""); status != http.StatusOK {
		t.Errorf("another, active token after the revocation: %d", status)
	}
	refused := authRefusals(t, o)
	if len(refused) != 2 || !strings.Contains(refused[0], "an invalid access token") || !strings.Contains(refused[1], "GET /v1/tools") {
		t.Errorf("auth_refused records: %q", refused)
	}
}

// TestOAuthIntrospectionUnavailable: when the introspection endpoint
// cannot be reached, a token that verifies is refused with 503 and
// Retry-After, not 401, so the client keeps it and tries again; the
// refusal is audited.
func TestOAuthIntrospectionUnavailable(t *testing.T) {
	gone := httptest.NewServer(http.NotFoundHandler())
	gone.Close()
	o := startOAuthGateway(t, oauthClaims+fmt.Sprintf("\n    introspection: {url: '%s/introspect', client_id: gw, client_secret: s}", gone.URL),
		"  - {name: r, match: {tools: [wipe]}, mode: deny}\n")
	req, _ := http.NewRequest("GET", o.srv.URL+"/v1/tools", nil)
	req.Header.Set("Authorization", "Bearer "+o.token("mcp"))
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusServiceUnavailable || res.Header.Get("Retry-After") == "" || res.Header.Get("WWW-Authenticate") != "" {
		t.Errorf("a token the issuer could not confirm: %d, Retry-After %q, WWW-Authenticate %q; want 503 with Retry-After and no challenge",
			res.StatusCode, res.Header.Get("Retry-After"), res.Header.Get("WWW-Authenticate"))
	}
	if status, _, _ := o.request(t, "GET", "/v1/tools", "bob-key", ""); status != http.StatusOK {
		t.Errorf("an API key while introspection is down: %d", status)
	}
	if refused := authRefusals(t, o); len(refused) != 1 || !strings.Contains(refused[0], "could not confirm") {
		t.Errorf("auth_refused records: %q", refused)
	}
}

// authRefusals returns the details of the gateway's auth_refused records,
// oldest first.
func authRefusals(t *testing.T, o *oauthGateway) []string {
	t.Helper()
	var refused []string
	for r, err := range o.audit.Records(context.Background(), 1) {
		if err != nil {
			t.Fatal(err)
		}
		if r.Event == "auth_refused" {
			refused = append(refused, r.Detail)
		}
	}
	return refused
}
