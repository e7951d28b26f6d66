package gateway

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// TestNewProtocol routes requests by the protocol generation they name,
// in the header or in the _meta of any message of the body.
func TestNewProtocol(t *testing.T) {
	cases := []struct {
		name, header, body string
		want               bool
	}{
		{"initialize of an earlier client", "", `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25"}}`, false},
		{"a call on a session", "2025-11-25", `{"jsonrpc":"2.0","id":2,"method":"tools/list"}`, false},
		{"server/discover", "2026-07-28", `{"jsonrpc":"2.0","id":1,"method":"server/discover","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}}}`, true},
		{"the version in _meta alone", "", `{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}}}`, true},
		{"a later version in the header alone", "2027-01-01", `{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":1}}`, true},
		{"one message of a batch", "", `[{"jsonrpc":"2.0","id":1,"method":"ping"},{"jsonrpc":"2.0","id":2,"method":"ping","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}}}]`, true},
		{"a _meta version of another type", "", `{"jsonrpc":"2.0","id":1,"method":"ping","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":20260728}}}`, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var got string
			route := byGeneration(
				http.HandlerFunc(func(http.ResponseWriter, *http.Request) { got = "sessions" }),
				http.HandlerFunc(func(http.ResponseWriter, *http.Request) { got = "stateless" }))
			r := httptest.NewRequestWithContext(context.Background(), http.MethodPost, MCPPath, strings.NewReader(c.body))
			if c.header != "" {
				r.Header.Set(protocolVersionHeader, c.header)
			}
			mcpEnvelope(1<<20, route).ServeHTTP(httptest.NewRecorder(), r)
			want := map[bool]string{true: "stateless", false: "sessions"}[c.want]
			if got != want {
				t.Errorf("served by %q, want %q", got, want)
			}
		})
	}
}

// TestClientMetaStaysOnItsHop: a client of 2026-07-28 gets a prompt, a
// resource and a completion from an upstream that speaks only 2025-11-25
// with sessions. The client's _meta names its own protocol, which the
// upstream would refuse, so the gateway must not pass it on. (The prompt
// and the resource are the gateway's own requests on the link's raw side.)
func TestClientMetaStaysOnItsHop(t *testing.T) {
	s := mcp.NewServer(&mcp.Implementation{Name: "old"}, &mcp.ServerOptions{
		SupportedProtocolVersions: []string{"2025-11-25"},
		CompletionHandler: func(context.Context, *mcp.CompleteRequest) (*mcp.CompleteResult, error) {
			return &mcp.CompleteResult{Completion: mcp.CompletionResultDetails{Values: []string{"world"}}}, nil
		},
	})
	s.AddPrompt(&mcp.Prompt{Name: "greet", Arguments: []*mcp.PromptArgument{{Name: "who"}}},
		func(context.Context, *mcp.GetPromptRequest) (*mcp.GetPromptResult, error) {
			return &mcp.GetPromptResult{Messages: []*mcp.PromptMessage{{Role: "user", Content: &mcp.TextContent{Text: "hello"}}}}, nil
		})
	s.AddResource(&mcp.Resource{URI: "file:///greeting", Name: "greeting"},
		func(_ context.Context, req *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
			return &mcp.ReadResourceResult{Contents: []*mcp.ResourceContents{{URI: req.Params.URI, Text: "hi"}}}, nil
		})
	up := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s }, nil))
	t.Cleanup(up.Close)
	gw := start(t, testConfig(t, "upstreams:\n  - {name: old, url: "+up.URL+"}\n"), "false")
	srv := httptest.NewServer(gw.Handler(false))
	t.Cleanup(srv.Close)
	ctx := context.Background()
	cs := dial(t, nil, srv.URL+MCPPath, "", nil)
	if v := cs.InitializeResult().ProtocolVersion; v != "2026-07-28" {
		t.Fatalf("the client speaks %s, want 2026-07-28", v)
	}
	p, err := cs.GetPrompt(ctx, &mcp.GetPromptParams{Name: "greet", Arguments: map[string]string{"who": "x"}})
	if err != nil || len(p.Messages) != 1 {
		t.Errorf("prompts/get: %v, %+v", err, p)
	}
	r, err := cs.ReadResource(ctx, &mcp.ReadResourceParams{URI: "file:///greeting"})
	if err != nil || len(r.Contents) != 1 || r.Contents[0].Text != "hi" {
		t.Errorf("resources/read: %v, %+v", err, r)
	}
	c, err := cs.Complete(ctx, &mcp.CompleteParams{Ref: &mcp.CompleteReference{Type: "ref/prompt", Name: "greet"},
		Argument: mcp.CompleteParamsArgument{Name: "who", Value: "w"}})
	if err != nil || len(c.Completion.Values) != 1 || c.Completion.Values[0] != "world" {
		t.Errorf("completion/complete: %v, %+v", err, c)
	}
}
