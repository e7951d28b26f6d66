package gateway

import (
	"context"
	"fmt"
	"maps"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/interlock-mcp/interlock"
)

// TestTenantsSeeAndCallOnlyTheirTools: a tenant with an allowlist sees
// only its tools, on both protocol generations and on the REST face, and a
// call of a hidden tool is TOOL_NOT_ALLOWED; its overlay rule wins over the
// shared one; a tenant with no entry sees and decides as before; a budget
// refuses the call past its limit.
func TestTenantsSeeAndCallOnlyTheirTools(t *testing.T) {
	f := testConfig(t, fmt.Sprintf(`
auth:
  keys:
    - {sha256: %s, principal: ops, tenant: acme}
    - {sha256: %s, principal: ops, tenant: globex}
rules:
  - name: no-wipes
    match: {tools: [wipe]}
    mode: deny
tenants:
  - name: acme
    tools: [echo, "wip?"]
    rules:
      - name: acme-wipes
        match: {tools: [wipe]}
        mode: flag
budgets:
  - {name: one-wipe, per: tenant, limit: 1, window: 1h, rules: [acme-wipes]}
`, HashKey("acme-key"), HashKey("globex-key")), "fx")
	gw := start(t, f, "false")
	srv := httptest.NewServer(gw.Handler(false))
	defer srv.Close()

	generations := []struct {
		name string
		opts *mcp.ClientSessionOptions
	}{{"sessions", onSession}, {"stateless", nil}}
	for _, gen := range generations {
		t.Run(gen.name, func(t *testing.T) {
			connect := func(key string) *mcp.ClientSession {
				t.Helper()
				return dial(t, nil, srv.URL+MCPPath, key, gen.opts)
			}
			acme, globex := connect("acme-key"), connect("globex-key")
			if got := slices.Sorted(maps.Keys(listTools(t, acme))); !slices.Equal(got, []string{"echo", "wipe"}) {
				t.Errorf("acme lists %v, want [echo wipe]", got)
			}
			if got := len(listTools(t, globex)); got != fixtureTools {
				t.Errorf("globex, with no entry, lists %d tools, want all %d", got, fixtureTools)
			}
			b := body(t, call(t, acme, "slow", map[string]any{"ms": 1}))
			if b.Code != interlock.CodeToolNotAllowed || b.RecoveryHint == "" || b.Retriable {
				t.Errorf("acme calling a hidden tool: %+v, want TOOL_NOT_ALLOWED with a hint", b)
			}
			if res := call(t, globex, "slow", map[string]any{"ms": 1}); res.IsError {
				t.Errorf("globex calling slow: %+v", res)
			}
			if b := body(t, call(t, globex, "wipe", map[string]any{"target": "x", "__confirm": true})); b.Code != interlock.CodeToolNotAllowed {
				t.Errorf("globex wipe: %s, want the shared rule's TOOL_NOT_ALLOWED", b.Code)
			}
		})
	}

	// The overlay lets acme wipe, once an hour: the budget counts for the
	// whole tenant, across both generations' clients.
	cs, err := connectKey(srv.URL+MCPPath, "acme-key")
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	if res := call(t, cs, "wipe", map[string]any{"target": "x", "__confirm": true}); res.IsError {
		t.Fatalf("acme wipe under its overlay rule: %+v", res)
	}
	if b := body(t, call(t, cs, "wipe", map[string]any{"target": "y", "__confirm": true})); b.Code != interlock.CodeRateLimited || b.RetryAfterMS <= 0 {
		t.Errorf("second acme wipe: %+v, want RATE_LIMITED with retry_after_ms", b)
	}

	list := getTools(t, srv.URL, "acme-key")
	if len(list.Tools) != 2 || list.Tools[0].Name != "echo" || list.Tools[1].Name != "wipe" {
		t.Errorf("GET /v1/tools for acme = %+v, want echo and wipe", list.Tools)
	}
	status, rest := post(t, srv.URL+"/v1/tools/slow/call", "acme-key", `{"arguments":{"ms":1}}`)
	if status != http.StatusForbidden || rest["code"] != string(interlock.CodeToolNotAllowed) {
		t.Errorf("REST call of a hidden tool: %d %v", status, rest)
	}
}

// resourceUpstream serves over streamable HTTP, without sessions (so
// clients of every protocol generation can be relayed to it), a tool, a
// resource at name://doc and a prompt "greet", each saying which upstream
// it is.
func resourceUpstream(t *testing.T, name string) string {
	t.Helper()
	s := mcp.NewServer(&mcp.Implementation{Name: name}, nil)
	s.AddTool(&mcp.Tool{Name: "ping", InputSchema: map[string]any{"type": "object"}, Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true}},
		func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: name}}}, nil
		})
	s.AddResource(&mcp.Resource{URI: name + "://doc", Name: "doc"}, func(_ context.Context, req *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
		return &mcp.ReadResourceResult{Contents: []*mcp.ResourceContents{{URI: req.Params.URI, Text: name}}}, nil
	})
	s.AddPrompt(&mcp.Prompt{Name: "greet"}, func(context.Context, *mcp.GetPromptRequest) (*mcp.GetPromptResult, error) {
		return &mcp.GetPromptResult{Messages: []*mcp.PromptMessage{{Role: "user", Content: &mcp.TextContent{Text: name}}}}, nil
	})
	srv := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s }, &mcp.StreamableHTTPOptions{Stateless: true}))
	t.Cleanup(srv.Close)
	return srv.URL
}

// TestTenantsSeeOnlyTheirUpstreamsResourcesAndPrompts: a tenant limited
// to some upstreams lists, reads and gets nothing of the others' resources
// and prompts; without the limit, it sees both.
func TestTenantsSeeOnlyTheirUpstreamsResourcesAndPrompts(t *testing.T) {
	one, two := resourceUpstream(t, "one"), resourceUpstream(t, "two")
	upstreams := fmt.Sprintf("upstreams:\n  - {name: one, url: %q, prefix: one_}\n  - {name: two, url: %q, prefix: two_}\n", one, two)
	tests := []struct {
		name    string
		tenants string
		want    []string // the upstreams the caller sees
	}{
		{"limited to one upstream", "tenants:\n  - {name: local, upstreams: [one]}\n", []string{"one"}},
		{"another tenant's limit", "tenants:\n  - {name: acme, upstreams: [one]}\n", []string{"one", "two"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			gw := start(t, testConfig(t, upstreams+tt.tenants), "false")
			// The in-memory client has no API key: tenant local.
			cs := client(t, gw, nil)
			ctx := context.Background()

			var tools, resources, prompts []string
			for name := range listTools(t, cs) {
				tools = append(tools, strings.TrimSuffix(name, "_ping"))
			}
			res, err := cs.ListResources(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range res.Resources {
				resources = append(resources, strings.TrimSuffix(r.URI, "://doc"))
			}
			ps, err := cs.ListPrompts(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			for _, p := range ps.Prompts {
				prompts = append(prompts, strings.TrimSuffix(p.Name, "_greet"))
			}
			for what, got := range map[string][]string{"tools": tools, "resources": resources, "prompts": prompts} {
				if slices.Sort(got); !slices.Equal(got, tt.want) {
					t.Errorf("%s of upstreams %v, want %v", what, got, tt.want)
				}
			}
			for _, up := range []string{"one", "two"} {
				visible := slices.Contains(tt.want, up)
				read, err := cs.ReadResource(ctx, &mcp.ReadResourceParams{URI: up + "://doc"})
				if (err == nil) != visible || (err == nil && read.Contents[0].Text != up) {
					t.Errorf("reading %s://doc: %v, %v; visible: %v", up, read, err, visible)
				}
				got, err := cs.GetPrompt(ctx, &mcp.GetPromptParams{Name: up + "_greet"})
				if (err == nil) != visible || (err == nil && got.Messages[0].Content.(*mcp.TextContent).Text != up) {
					t.Errorf("getting %s_greet: %v, %v; visible: %v", up, got, err, visible)
				}
			}
		})
	}
}
