package gateway

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/interlock-mcp/interlock"
	"github.com/interlock-mcp/interlock/policy"
)

// httpUpstream serves a small MCP server over streamable HTTP that answers
// only requests carrying the right API key.
func httpUpstream(t *testing.T) *httptest.Server {
	t.Helper()
	s := mcp.NewServer(&mcp.Implementation{Name: "remote"}, nil)
	no := false
	s.AddTool(&mcp.Tool{Name: "close_ticket", InputSchema: map[string]any{"type": "object"},
		Annotations: &mcp.ToolAnnotations{DestructiveHint: &no}},
		func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "closed"}}}, nil
		})
	h := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s }, nil)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer remote-key" {
			http.Error(w, "unauthorized", http.StatusUnauthorized)
			return
		}
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	return srv
}

func TestHTTPUpstream(t *testing.T) {
	srv := httpUpstream(t)
	lookup := func(k string) (string, bool) {
		if k == "REMOTE_KEY" {
			return "remote-key", true
		}
		return "", false
	}
	f, err := policy.Parse("gateway.yaml", []byte(`
upstreams:
  - name: remote
    url: `+srv.URL+`
    headers: {Authorization: "Bearer ${REMOTE_KEY}"}
    prefix: remote_
`), lookup)
	if err != nil {
		t.Fatal(err)
	}
	gw := start(t, f, "false")
	cs := client(t, gw, nil)
	if _, ok := listTools(t, cs)["remote_close_ticket"]; !ok {
		t.Fatal("the HTTP upstream's tool is not mirrored")
	}
	if b := body(t, call(t, cs, "remote_close_ticket", map[string]any{})); b.Code != interlock.CodeDryRunPreview {
		t.Errorf("unconfirmed: %s", b.Code)
	}
	res := call(t, cs, "remote_close_ticket", map[string]any{"__confirm": true})
	if res.IsError || res.Content[0].(*mcp.TextContent).Text != "closed" {
		t.Errorf("confirmed: %+v", res)
	}

	t.Run("a wrong key is a clear startup error", func(t *testing.T) {
		f, _ := policy.Parse("gateway.yaml", []byte("upstreams:\n  - name: remote\n    url: "+srv.URL+"\n    headers: {Authorization: Bearer nope}\n"), lookup)
		gw := newGateway(t, f, Options{Logger: quiet})
		defer gw.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		err := gw.Start(ctx)
		if err == nil || !strings.Contains(err.Error(), `upstream "remote"`) || !strings.Contains(err.Error(), srv.URL) {
			t.Errorf("Start = %v", err)
		}
	})
	t.Run("an upstream that went away is UPSTREAM_UNAVAILABLE", func(t *testing.T) {
		srv.CloseClientConnections()
		srv.Close()
		b := body(t, call(t, cs, "remote_close_ticket", map[string]any{"__confirm": true}))
		if b.Code != interlock.CodeUpstreamUnavailable || !b.Retriable {
			t.Errorf("body = %+v", b)
		}
	})
}

func TestUpstreamConfigErrors(t *testing.T) {
	tests := []struct{ src, want string }{
		{"upstreams:\n  - {name: a, url: 'ftp://x'}\n", `url "ftp://x" must be an http:// or https:// URL`},
		{"upstreams:\n  - {name: a, url: 'https://x/mcp', command: [x]}\n", "has both command and url"},
		{"upstreams:\n  - {name: a, url: 'https://x/mcp', dir: /tmp}\n", "env and dir apply only to a command"},
		{"upstreams:\n  - {name: a, command: [x], headers: {A: b}}\n", "headers apply only to a url"},
		{"upstreams:\n  - {name: a, url: 'https://x/mcp', headers: {A: '${NOPE}'}}\n", "headers A refers to ${NOPE}"},
	}
	for _, tt := range tests {
		_, err := policy.Parse("p.yaml", []byte(tt.src), func(string) (string, bool) { return "", false })
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("Parse(%q) = %v, want %q", tt.src, err, tt.want)
		}
	}
}
