package gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/interlock-mcp/interlock"
)

// rawMCP posts body to the MCP endpoint as a client would, with the key
// and session given, and returns the status and the body.
func rawMCP(t *testing.T, url, key, session string, header http.Header, body string) (int, string) {
	t.Helper()
	h := http.Header{}
	if key != "" {
		h.Set("Authorization", "Bearer "+key)
	}
	for k, v := range header {
		h[k] = v
	}
	status, b, _, err := postMCP(url, session, h, body)
	if err != nil {
		t.Fatal(err)
	}
	return status, b
}

// onSession makes a go-sdk client speak the last protocol served with
// sessions; at its default, 2026-07-28, it would be served without one.
var onSession = &mcp.ClientSessionOptions{ProtocolVersion: pushProtocol}

// servedSession serves gw over HTTP and connects a client without a key; it
// returns the MCP URL and the client's session.
func servedSession(t *testing.T, gw *Gateway, stateless bool) (string, *mcp.ClientSession) {
	t.Helper()
	srv := httptest.NewServer(gw.Handler(stateless))
	t.Cleanup(srv.Close)
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "test"}, nil).Connect(context.Background(),
		&mcp.StreamableClientTransport{Endpoint: srv.URL + MCPPath}, onSession)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cs.Close() })
	return srv.URL + MCPPath, cs
}

// connectKey opens an MCP session over HTTP with an API key.
func connectKey(url, key string) (*mcp.ClientSession, error) {
	transport := &mcp.StreamableClientTransport{Endpoint: url, HTTPClient: &http.Client{Transport: bearer{key}}}
	return mcp.NewClient(&mcp.Implementation{Name: "test"}, nil).Connect(context.Background(), transport, onSession)
}

// TestSessionsBelongToTheFullIdentity: a session opened with one key cannot
// be used with a key of another tenant or principal, however the names are
// chosen, and the gate sees each caller's own identity.
func TestSessionsBelongToTheFullIdentity(t *testing.T) {
	keys := []struct{ key, principal, tenant string }{
		{"alice-acme", "alice", "acme"},
		{"alice-globex", "alice", "globex"},
		{"bob-acme", "bob", "acme"},
		{"colon-1", "a:b", "c"},
		{"colon-2", "b", "c:a"},
		{"quote-1", `x","y`, "t"},
		{"quote-2", "y", `t","x`},
	}
	var yaml strings.Builder
	yaml.WriteString("auth:\n  keys:\n")
	for _, k := range keys {
		fmt.Fprintf(&yaml, "    - {sha256: %s, principal: %q, tenant: %q}\n", HashKey(k.key), k.principal, k.tenant)
	}
	yaml.WriteString(`rules:
  - name: only-alice-in-acme-wipes
    match: {tools: [wipe]}
    when: "!(principal == 'alice' && tenant == 'acme')"
    mode: deny
`)
	gw := start(t, testConfig(t, yaml.String(), "fx"), "false")
	srv := httptest.NewServer(gw.Handler(false))
	defer srv.Close()
	url := srv.URL + MCPPath

	tests := []struct{ owner, intruder string }{
		{"alice-acme", "alice-globex"},
		{"alice-globex", "alice-acme"},
		{"alice-acme", "bob-acme"},
		{"colon-1", "colon-2"},
		{"quote-1", "quote-2"},
	}
	for _, tt := range tests {
		t.Run(tt.intruder+" on "+tt.owner, func(t *testing.T) {
			cs, err := connectKey(url, tt.owner)
			if err != nil {
				t.Fatal(err)
			}
			defer cs.Close()
			list := `{"jsonrpc":"2.0","id":7,"method":"tools/list","params":{}}`
			if status, body := rawMCP(t, url, tt.intruder, cs.ID(), nil, list); status != http.StatusForbidden {
				t.Errorf("intruder: %d %s", status, body)
			}
			if status, body := rawMCP(t, url, tt.owner, cs.ID(), nil, list); status != http.StatusOK || !strings.Contains(body, `"wipe"`) {
				t.Errorf("owner: %d %s", status, body)
			}
		})
	}
	t.Run("the gate sees tenant and principal", func(t *testing.T) {
		for _, k := range keys[:3] {
			cs, err := connectKey(url, k.key)
			if err != nil {
				t.Fatal(err)
			}
			res := call(t, cs, "wipe", map[string]any{"target": "x", "__confirm": true})
			cs.Close()
			if allowed := !res.IsError; allowed != (k.key == "alice-acme") {
				t.Errorf("%s: wipe allowed = %v", k.key, allowed)
			}
		}
	})
}

func TestSessionCapAndIdleTimeout(t *testing.T) {
	f := testConfig(t, fmt.Sprintf(`
http: {max_sessions_per_principal: 2}
auth:
  keys:
    - {sha256: %s, principal: ci, tenant: acme}
    - {sha256: %s, principal: ci, tenant: globex}
`, HashKey("ci-acme"), HashKey("ci-globex")), "fx")
	gw := start(t, f, "false")
	srv := httptest.NewServer(gw.Handler(false))
	defer srv.Close()
	url := srv.URL + MCPPath

	var open []*mcp.ClientSession
	defer func() {
		for _, cs := range open {
			cs.Close()
		}
	}()
	for range 2 {
		cs, err := connectKey(url, "ci-acme")
		if err != nil {
			t.Fatal(err)
		}
		open = append(open, cs)
	}
	init := `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"x","version":"1"}}}`
	status, body := rawMCP(t, url, "ci-acme", "", nil, init)
	if status != http.StatusTooManyRequests || !strings.Contains(body, "2 open MCP sessions") {
		t.Errorf("a third session: %d %s", status, body)
	}
	other, err := connectKey(url, "ci-globex")
	if err != nil {
		t.Fatalf("the same principal in another tenant has its own cap: %v", err)
	}
	other.Close()
	open[0].Close()
	open = open[1:]
	// The server lets go of a closed session shortly after the DELETE.
	eventually(t, "a closed session to free its place", func() bool {
		cs, err := connectKey(url, "ci-acme")
		if err == nil {
			open = append(open, cs)
		}
		return err == nil
	})

	t.Run("idle sessions expire", func(t *testing.T) {
		f := testConfig(t, "", "fx")
		f.HTTP.SessionIdleTimeout = 200 * time.Millisecond
		url, cs := servedSession(t, start(t, f, "false"), false)
		time.Sleep(500 * time.Millisecond)
		list := `{"jsonrpc":"2.0","id":7,"method":"tools/list","params":{}}`
		if status, body := rawMCP(t, url, "", cs.ID(), nil, list); status != http.StatusNotFound {
			t.Errorf("an idle session still answers: %d %s", status, body)
		}
	})
}

// TestMCPRefusesCrossOriginRequests: a web page cannot drive /mcp.
func TestMCPRefusesCrossOriginRequests(t *testing.T) {
	gw := start(t, testConfig(t, "", "fx"), "false")
	srv := httptest.NewServer(gw.Handler(false))
	defer srv.Close()
	init := `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"x","version":"1"}}}`
	tests := []struct {
		name   string
		header http.Header
		want   int
	}{
		{"cross-site fetch", http.Header{"Sec-Fetch-Site": {"cross-site"}}, http.StatusForbidden},
		{"same-site fetch from another origin", http.Header{"Sec-Fetch-Site": {"same-site"}}, http.StatusForbidden},
		{"Origin of another host", http.Header{"Origin": {"https://evil.example"}}, http.StatusForbidden},
		{"same-origin fetch", http.Header{"Sec-Fetch-Site": {"same-origin"}}, http.StatusOK},
		{"no browser headers", nil, http.StatusOK},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			status, body := rawMCP(t, srv.URL+MCPPath, "", "", tt.header, init)
			if status != tt.want {
				t.Errorf("status %d, want %d: %s", status, tt.want, body)
			}
			if tt.want == http.StatusForbidden && !strings.Contains(body, "Cross-origin requests") {
				t.Errorf("body %s", body)
			}
		})
	}
}

// TestAmbiguousEnvelopesAreRefused: JSON that readers could decode
// differently never reaches the SDK, the gate or an upstream, on /mcp and
// on the REST face; params of the wrong shape get interlock's words, not
// the SDK's Go types.
func TestAmbiguousEnvelopesAreRefused(t *testing.T) {
	url, cs := servedSession(t, start(t, testConfig(t, "", "fx"), "false"), false)
	base := strings.TrimSuffix(url, MCPPath)
	tests := []struct {
		name string
		args string // the arguments of an echo call, as sent
	}{
		{"duplicate argument", `{"a":1,"a":2}`},
		{"duplicate after unescaping", `{"a":1,"\u0061":2}`},
		{"duplicate meta-argument", `{"__confirm":false,"__confirm":true}`},
		{"nested duplicate", `{"x":{"y":[{"k":1,"k":2}]}}`},
		{"lone surrogate", `{"a":"\ud800"}`},
		{"invalid UTF-8", "{\"a\":\"\xff\xfe\"}"},
	}
	for _, tt := range tests {
		t.Run("mcp/"+tt.name, func(t *testing.T) {
			body := `{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"echo","arguments":` + tt.args + `}}`
			status, resp := rawMCP(t, url, "", cs.ID(), nil, body)
			var msg struct {
				ID    any `json:"id"`
				Error struct {
					Code    int64  `json:"code"`
					Message string `json:"message"`
				} `json:"error"`
			}
			if status != http.StatusBadRequest || json.Unmarshal([]byte(resp), &msg) != nil || msg.Error.Code != jsonrpc.CodeParseError || msg.ID != nil {
				t.Errorf("status %d: %s", status, resp)
			}
		})
		t.Run("rest/"+tt.name, func(t *testing.T) {
			status, resp := post(t, base+"/v1/tools/echo/call", "", `{"arguments":`+tt.args+`}`)
			if status != http.StatusBadRequest || resp["code"] != string(interlock.CodeValidationFailed) {
				t.Errorf("status %d: %v", status, resp)
			}
		})
	}
	t.Run("rest/duplicate envelope field", func(t *testing.T) {
		status, resp := post(t, base+"/v1/tools/wipe/call", "", `{"arguments":{"target":"x"},"confirm":false,"confirm":true}`)
		if status != http.StatusBadRequest || resp["code"] != string(interlock.CodeValidationFailed) {
			t.Errorf("status %d: %v", status, resp)
		}
	})
	shapes := []struct{ name, body string }{
		{"name of the wrong type", `{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":5}}`},
		{"params not an object", `{"jsonrpc":"2.0","id":4,"method":"tools/call","params":[1]}`},
		{"cursor of the wrong type", `{"jsonrpc":"2.0","id":4,"method":"tools/list","params":{"cursor":{}}}`},
		{"in a batch", `[{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":true}}]`},
	}
	for _, tt := range shapes {
		t.Run("params/"+tt.name, func(t *testing.T) {
			status, resp := rawMCP(t, url, "", cs.ID(), nil, tt.body)
			if status != http.StatusBadRequest || !strings.Contains(resp, "-32602") || !strings.Contains(resp, `"id":4`) {
				t.Errorf("status %d: %s", status, resp)
			}
			for _, leak := range []string{"mcp.", "Go ", "unmarshal", "Params"} {
				if strings.Contains(resp, leak) {
					t.Errorf("the answer names %q: %s", leak, resp)
				}
			}
		})
	}
}

// TestStreamsOutliveServerTimeouts: a call whose event stream lasts longer
// than the server's read and write timeouts still gets its answer, on a
// session and stateless alike.
func TestStreamsOutliveServerTimeouts(t *testing.T) {
	gw := start(t, testConfig(t, "", "fx"), "false")
	for _, stateless := range []bool{false, true} {
		t.Run(fmt.Sprintf("stateless=%v", stateless), func(t *testing.T) {
			srv := httptest.NewUnstartedServer(gw.Handler(stateless))
			srv.Config.ReadTimeout, srv.Config.WriteTimeout = 300*time.Millisecond, 300*time.Millisecond
			srv.Start()
			defer srv.Close()
			cs, err := mcp.NewClient(&mcp.Implementation{Name: "test"}, nil).Connect(context.Background(),
				&mcp.StreamableClientTransport{Endpoint: srv.URL + MCPPath}, onSession)
			if err != nil {
				t.Fatal(err)
			}
			defer cs.Close()
			if res := call(t, cs, "slow", map[string]any{"ms": 1000}); res.IsError {
				t.Errorf("a call longer than the timeouts: %+v", res)
			}
		})
	}
}
