package gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/interlock-mcp/interlock"
	"github.com/interlock-mcp/interlock/config"
	"github.com/interlock-mcp/interlock/sqlite"
)

var quiet = slog.New(slog.DiscardHandler)

// fixtureTools is how many tools the fixture upstream offers.
const fixtureTools = 13

// testConfig builds a configuration whose upstreams all run the fixture.
func testConfig(t testing.TB, yaml string, upstreams ...string) *config.File {
	t.Helper()
	if strings.TrimSpace(yaml) == "" {
		// A file must set something; the fixtures below are all it holds.
		yaml = "upstreams: []\n"
	}
	f, err := config.Parse("gateway.yaml", []byte(yaml), func(string) (string, bool) { return "", false })
	if err != nil {
		t.Fatal(err)
	}
	for i, spec := range upstreams {
		name, prefix, _ := strings.Cut(spec, ":")
		f.Upstreams = append(f.Upstreams, &config.Upstream{
			Name: name, Prefix: prefix, Command: fixtureCommand(t),
			Env: map[string]string{"INTERLOCK_FIXTURE": "1"}, Line: 10 + i,
		})
	}
	return f
}

const testSecret = "a test secret that is long enough to seal"

func newGateway(t *testing.T, f *config.File, opts Options) *Gateway {
	t.Helper()
	gw, err := New(f, opts)
	if err != nil {
		t.Fatal(err)
	}
	return gw
}

func start(t *testing.T, f *config.File, dryRun string) *Gateway {
	t.Helper()
	return startLogged(t, f, dryRun, quiet)
}

// testEnv is the environment of a test gateway: the operator key set to
// dryRun and the test's sealing key.
func testEnv(dryRun string) func(string) string {
	return func(k string) string {
		switch k {
		case "MCP_DRY_RUN":
			return dryRun
		case interlock.SecretEnv:
			return testSecret
		}
		return ""
	}
}

// startLogged is start with the gateway's records going to log.
func startLogged(t *testing.T, f *config.File, dryRun string, log *slog.Logger) *Gateway {
	t.Helper()
	gw := newGateway(t, f, Options{Version: "test", Logger: log, Getenv: testEnv(dryRun)})
	t.Cleanup(func() { gw.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := gw.Start(ctx); err != nil {
		t.Fatalf("Start: %v", err)
	}
	return gw
}

// startAudited starts a gateway on f whose audit log is a SQLite file of
// the test's own, closed after the gateway. Unless opts say otherwise, the
// gateway is quiet, holds the test's sealing key and runs with dry run off.
func startAudited(t *testing.T, f *config.File, opts Options) (*Gateway, *sqlite.Audit) {
	t.Helper()
	log, err := sqlite.OpenAudit(context.Background(), filepath.Join(t.TempDir(), "audit.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { log.Close() })
	if opts.Version == "" {
		opts.Version = "test"
	}
	if opts.Logger == nil {
		opts.Logger = quiet
	}
	if opts.Getenv == nil {
		opts.Getenv = testEnv("false")
	}
	opts.Audit = log
	gw := newGateway(t, f, opts)
	t.Cleanup(func() { gw.Close() })
	if err := gw.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	return gw, log
}

// client connects to the gateway's server in memory.
func client(t *testing.T, gw *Gateway, opts *mcp.ClientOptions) *mcp.ClientSession {
	t.Helper()
	ctx := context.Background()
	st, ct := mcp.NewInMemoryTransports()
	if _, err := gw.Server().Connect(ctx, st, nil); err != nil {
		t.Fatal(err)
	}
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "test"}, opts).Connect(ctx, ct, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cs.Close() })
	return cs
}

func listTools(t *testing.T, cs *mcp.ClientSession) map[string]*mcp.Tool {
	t.Helper()
	res, err := cs.ListTools(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]*mcp.Tool{}
	for _, tool := range res.Tools {
		out[tool.Name] = tool
	}
	return out
}

func call(t *testing.T, cs *mcp.ClientSession, name string, args any) *mcp.CallToolResult {
	t.Helper()
	res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: name, Arguments: args})
	if err != nil {
		t.Fatalf("calling %s: %v", name, err)
	}
	return res
}

func body(t *testing.T, res *mcp.CallToolResult) interlock.Body {
	t.Helper()
	if !res.IsError {
		t.Fatalf("want an error result, got %+v", res)
	}
	out := interlock.BodyOfResult(res)
	if out.Code == "" {
		t.Fatalf("error result without an interlock body: %+v", res)
	}
	return out
}

func TestMirroredToolsAreAdvertisedAsThePolicySeesThem(t *testing.T) {
	gw := start(t, testConfig(t, `
rules:
  - name: wipe-is-closed-world
    match: {tools: [wipe]}
    annotations: {openWorldHint: false}
    mode: flag
`, "fx"), "")
	tools := listTools(t, client(t, gw, nil))
	if len(tools) != fixtureTools {
		t.Fatalf("got %d tools, want the fixture's %d", len(tools), fixtureTools)
	}
	tests := []struct {
		tool                             string
		readOnly, destructive, openWorld bool
		confirm                          bool
	}{
		{"echo", true, false, true, false},
		// Unannotated upstream tool: the spec's defaults made explicit,
		// then the rule's override.
		{"wipe", false, true, false, true},
	}
	for _, tt := range tests {
		tool := tools[tt.tool]
		a := tool.Annotations
		if a == nil || a.DestructiveHint == nil || a.OpenWorldHint == nil {
			t.Fatalf("%s: hints not explicit: %+v", tt.tool, a)
		}
		if a.ReadOnlyHint != tt.readOnly || *a.DestructiveHint != tt.destructive || *a.OpenWorldHint != tt.openWorld {
			t.Errorf("%s: readOnly %v destructive %v openWorld %v", tt.tool, a.ReadOnlyHint, *a.DestructiveHint, *a.OpenWorldHint)
		}
		props, _ := tool.InputSchema.(map[string]any)["properties"].(map[string]any)
		if _, ok := props[interlock.MetaConfirm]; ok != tt.confirm {
			t.Errorf("%s: __confirm advertised = %v, want %v", tt.tool, ok, tt.confirm)
		}
	}
	if counts := gw.ToolCounts(); counts["fx"] != fixtureTools {
		t.Errorf("ToolCounts = %v", counts)
	}
}

func TestCallsThroughTheGate(t *testing.T) {
	gw := start(t, testConfig(t, "", "fx"), "false")
	cs := client(t, gw, nil)

	t.Run("read-only result is passed on untouched", func(t *testing.T) {
		res := call(t, cs, "echo", json.RawMessage(`{"n":1.50,"s":"x"}`))
		if res.IsError || res.Meta["fixture"] != "untouched" {
			t.Fatalf("result = %+v", res)
		}
		if got := res.Content[0].(*mcp.TextContent).Text; got != `{"n":1.50,"s":"x"}` {
			t.Errorf("upstream received %s", got)
		}
	})
	t.Run("meta-arguments are never forwarded", func(t *testing.T) {
		res := call(t, cs, "echo", map[string]any{"a": 1, "__confirm": true, "__confirm_token": "t"})
		if got := res.Content[0].(*mcp.TextContent).Text; got != `{"a":1}` {
			t.Errorf("upstream received %s", got)
		}
	})
	t.Run("unannotated tool needs the agent key", func(t *testing.T) {
		if b := body(t, call(t, cs, "wipe", map[string]any{"target": "all"})); b.Code != interlock.CodeDryRunPreview {
			t.Errorf("code = %s", b.Code)
		}
		res := call(t, cs, "wipe", map[string]any{"target": "all", "__confirm": true})
		if res.IsError || res.Content[0].(*mcp.TextContent).Text != "wiped" {
			t.Errorf("result = %+v", res)
		}
	})
	t.Run("schema violations are caught before the upstream", func(t *testing.T) {
		b := body(t, call(t, cs, "wipe", map[string]any{"__confirm": true}))
		if b.Code != interlock.CodeValidationFailed || len(b.ValidationIssues) != 1 || b.ValidationIssues[0].Path != "target" {
			t.Errorf("body = %+v", b)
		}
	})
	t.Run("arguments that are not an object", func(t *testing.T) {
		if b := body(t, call(t, cs, "echo", []int{1, 2})); b.Code != interlock.CodeValidationFailed {
			t.Errorf("code = %s", b.Code)
		}
	})
	t.Run("unknown tool is a protocol error", func(t *testing.T) {
		_, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "nope", Arguments: map[string]any{}})
		if err == nil || !strings.Contains(err.Error(), "nope") {
			t.Errorf("err = %v", err)
		}
	})
}

func TestUpstreamThatDiesIsRestarted(t *testing.T) {
	gw := start(t, testConfig(t, "rules: [{name: wipes, match: {tools: [wipe]}, mode: allow}]", "fx"), "false")
	cs := client(t, gw, nil)
	b := body(t, call(t, cs, "crash", map[string]any{}))
	if b.Code != interlock.CodeUpstreamUnavailable || !b.Retriable {
		t.Fatalf("body = %+v", b)
	}
	// The gateway keeps serving: the next call, made while the child is
	// started again in the background, waits for it and runs.
	if !gw.upstreams[0].reconnectingNow() {
		t.Fatal("no restart under way after the crash")
	}
	// wipe may not be retried (it is not read-only), so only the wait
	// lets it run.
	if res := call(t, cs, "wipe", map[string]any{"target": "x"}); res.IsError {
		t.Fatalf("the call during the restart: %+v", body(t, res))
	}
}

// TestToolListChangesAreMirrored: an upstream that adds a tool during a
// call announces it, and every way a client comes in hears the change and
// can call the tool. A client of 2025-11-25 on a session calls through the
// link of its protocol, whose child is not the shared link's: the change
// must be read from the link that announced it.
func TestToolListChangesAreMirrored(t *testing.T) {
	ways := []struct {
		name    string
		connect func(t *testing.T, gw *Gateway, opts *mcp.ClientOptions) *mcp.ClientSession
	}{
		{"in memory", func(t *testing.T, gw *Gateway, opts *mcp.ClientOptions) *mcp.ClientSession {
			return client(t, gw, opts)
		}},
		{"http 2025-11-25", httpClient("2025-11-25")},
		{"http 2026-07-28", httpClient("2026-07-28")},
	}
	for _, way := range ways {
		t.Run(way.name, func(t *testing.T) {
			gw := start(t, testConfig(t, "", "fx"), "")
			changed := make(chan struct{}, 10)
			cs := way.connect(t, gw, &mcp.ClientOptions{ToolListChangedHandler: func(context.Context, *mcp.ToolListChangedRequest) {
				changed <- struct{}{}
			}})
			if _, ok := listTools(t, cs)["late_tool"]; ok {
				t.Fatal("late_tool listed before it exists")
			}
			call(t, cs, "grow", map[string]any{})
			select {
			case <-changed:
			case <-time.After(10 * time.Second):
				t.Fatal("no notifications/tools/list_changed within 10 s")
			}
			if _, ok := listTools(t, cs)["late_tool"]; !ok {
				t.Fatal("late_tool is not listed after the change")
			}
			if res := call(t, cs, "late_tool", map[string]any{}); res.IsError {
				t.Errorf("late_tool: %+v", res)
			}
		})
	}
}

// httpClient connects a client of protocol version to gw over streamable
// HTTP.
func httpClient(version string) func(t *testing.T, gw *Gateway, opts *mcp.ClientOptions) *mcp.ClientSession {
	return func(t *testing.T, gw *Gateway, opts *mcp.ClientOptions) *mcp.ClientSession {
		t.Helper()
		srv := httptest.NewServer(gw.Handler(false))
		t.Cleanup(srv.Close)
		return dial(t, mcp.NewClient(&mcp.Implementation{Name: "test"}, opts), srv.URL+MCPPath, "", &mcp.ClientSessionOptions{ProtocolVersion: version})
	}
}

// dial connects c (a plain client when nil) to the MCP endpoint at url
// over streamable HTTP, with key as its bearer credential unless it is "";
// the session closes when the test ends.
func dial(t testing.TB, c *mcp.Client, url, key string, opts *mcp.ClientSessionOptions) *mcp.ClientSession {
	t.Helper()
	if c == nil {
		c = mcp.NewClient(&mcp.Implementation{Name: "test"}, nil)
	}
	transport := &mcp.StreamableClientTransport{Endpoint: url}
	if key != "" {
		transport.HTTPClient = &http.Client{Transport: bearer{key}}
	}
	cs, err := c.Connect(context.Background(), transport, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cs.Close() })
	return cs
}

func TestToolNameCollisions(t *testing.T) {
	t.Run("without a prefix start fails", func(t *testing.T) {
		gw := newGateway(t, testConfig(t, "", "one", "two"), Options{Logger: quiet})
		defer gw.Close()
		err := gw.Start(context.Background())
		if err == nil {
			t.Fatal("Start succeeded")
		}
		for _, want := range []string{`"echo"`, `"one"`, `"two"`, "prefix", "gateway.yaml:11"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("error %q does not mention %s", err, want)
			}
		}
	})
	t.Run("a prefix resolves it", func(t *testing.T) {
		gw := start(t, testConfig(t, "", "one", "two:b_"), "false")
		tools := listTools(t, client(t, gw, nil))
		if tools["echo"] == nil || tools["b_echo"] == nil || len(tools) != 2*fixtureTools {
			t.Fatalf("tools = %v", tools)
		}
		res := call(t, client(t, gw, nil), "b_echo", map[string]any{"x": 1})
		if res.IsError {
			t.Errorf("b_echo: %+v", res)
		}
	})
}

// startError is the error a check of the gateway's configuration reports
// for the upstream name when it connects it (see interlock check --connect).
func startError(gw *Gateway, name string) error {
	return gw.StartEach(context.Background(), func(u *config.Upstream) bool { return u.Name == name })[name]
}

func TestUpstreamThatDoesNotStart(t *testing.T) {
	f := testConfig(t, "")
	f.Upstreams = append(f.Upstreams, &config.Upstream{Name: "ghost", Command: []string{"/nonexistent/mcp-server"}, Line: 7})
	gw := newGateway(t, f, Options{Logger: quiet})
	defer gw.Close()
	// The gateway serves without it and keeps trying; a check names it.
	if err := gw.Start(context.Background()); err != nil {
		t.Fatalf("Start = %v", err)
	}
	if got := gw.Ready(context.Background()); len(got) != 1 || got[0].Name != "upstream ghost" {
		t.Errorf("Ready = %v", got)
	}
	checked := newGateway(t, f, Options{Logger: quiet})
	defer checked.Close()
	err := startError(checked, "ghost")
	for _, want := range []string{`upstream "ghost"`, "/nonexistent/mcp-server", "gateway.yaml:7"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %s", err, want)
		}
	}
}

func TestCheckListen(t *testing.T) {
	withKeys := &config.File{Auth: config.Auth{Keys: []*config.Key{{SHA256: HashKey("k"), Principal: "ci"}}}}
	tests := []struct {
		addr string
		f    *config.File
		ok   bool
	}{
		{"127.0.0.1:8740", &config.File{}, true},
		{"localhost:8740", &config.File{}, true},
		{"[::1]:8740", &config.File{}, true},
		{"0.0.0.0:8740", &config.File{}, false},
		{":8740", &config.File{}, false},
		{"10.1.2.3:8740", &config.File{}, false},
		{"0.0.0.0:8740", withKeys, true},
		{"nonsense", &config.File{}, false},
	}
	for _, tt := range tests {
		err := CheckListen(tt.addr, tt.f)
		if (err == nil) != tt.ok {
			t.Errorf("CheckListen(%q) = %v, want ok=%v", tt.addr, err, tt.ok)
		}
		if err != nil && tt.addr != "nonsense" && !strings.Contains(err.Error(), "auth.keys") {
			t.Errorf("refusal does not say how to configure keys: %v", err)
		}
	}
}

// bearer adds an Authorization header to every request.
type bearer struct{ key string }

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	if b.key != "" {
		r.Header.Set("Authorization", "Bearer "+b.key)
	}
	return http.DefaultTransport.RoundTrip(r)
}

func TestHTTPAuthentication(t *testing.T) {
	f := testConfig(t, fmt.Sprintf(`
auth:
  keys:
    - {sha256: %s, principal: ci-bot, tenant: acme}
    - {sha256: %s, principal: alice}
rules:
  - name: bots-may-not-wipe
    match: {tools: [wipe]}
    when: "principal == 'ci-bot' && tenant == 'acme'"
    mode: deny
`, HashKey("bot-key"), HashKey("alice-key")), "fx")
	gw := start(t, f, "false")
	srv := httptest.NewServer(gw.Handler(false))
	defer srv.Close()

	connect := func(key string) (*mcp.ClientSession, error) { return connectKey(srv.URL+MCPPath, key) }
	for _, key := range []string{"", "wrong-key"} {
		if cs, err := connect(key); err == nil {
			cs.Close()
			t.Errorf("key %q was accepted", key)
		}
	}
	bot, err := connect("bot-key")
	if err != nil {
		t.Fatal(err)
	}
	defer bot.Close()
	if b := body(t, call(t, bot, "wipe", map[string]any{"target": "x", "__confirm": true})); b.Code != interlock.CodeToolNotAllowed {
		t.Errorf("ci-bot in acme: code %s, want TOOL_NOT_ALLOWED", b.Code)
	}
	alice, err := connect("alice-key")
	if err != nil {
		t.Fatal(err)
	}
	defer alice.Close()
	if res := call(t, alice, "wipe", map[string]any{"target": "x", "__confirm": true}); res.IsError {
		t.Errorf("alice: %+v", res)
	}

	resp, err := http.Get(srv.URL + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	var bare map[string]any
	json.NewDecoder(resp.Body).Decode(&bare)
	resp.Body.Close()
	if len(bare) != 1 || bare["status"] != "ok" {
		t.Errorf("healthz without a key says more than its status: %v", bare)
	}
	req, _ := http.NewRequest(http.MethodGet, srv.URL+"/healthz", nil)
	req.Header.Set("Authorization", "Bearer alice-key")
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var health struct {
		Status    string `json:"status"`
		DryRun    bool   `json:"dry_run"`
		Upstreams []struct {
			Name  string `json:"name"`
			Tools int    `json:"tools"`
		} `json:"upstreams"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&health); err != nil {
		t.Fatal(err)
	}
	if health.Status != "ok" || health.DryRun || len(health.Upstreams) != 1 || health.Upstreams[0].Tools != fixtureTools {
		t.Errorf("healthz = %+v", health)
	}
}

func TestAnonymousHTTPIdentity(t *testing.T) {
	f := testConfig(t, `
rules:
  - name: anonymous-may-not-wipe
    match: {tools: [wipe]}
    when: "principal == 'anonymous'"
    mode: deny
`, "fx")
	gw := start(t, f, "false")
	_, cs := servedSession(t, gw, true)
	if b := body(t, call(t, cs, "wipe", map[string]any{"target": "x", "__confirm": true})); b.Code != interlock.CodeToolNotAllowed {
		t.Errorf("code %s, want TOOL_NOT_ALLOWED for anonymous", b.Code)
	}
	// Over stdio or in memory the caller is the local user, not anonymous.
	if res := call(t, client(t, gw, nil), "wipe", map[string]any{"target": "x", "__confirm": true}); res.IsError {
		t.Errorf("local caller: %+v", res)
	}
}

func TestUpstreamTimeout(t *testing.T) {
	f := testConfig(t, "", "fx")
	f.Upstreams[0].CallTimeout = 300 * time.Millisecond
	gw := start(t, f, "false")
	cs := client(t, gw, nil)
	b := body(t, call(t, cs, "slow", map[string]any{"ms": 5000}))
	if b.Code != interlock.CodeUpstreamTimeout || !b.Retriable || !strings.Contains(b.Message, "300ms") {
		t.Errorf("body = %+v", b)
	}
	if res := call(t, cs, "slow", map[string]any{"ms": 1}); res.IsError {
		t.Errorf("a quick call after a timeout: %+v", body(t, res))
	}
}

// TestChildEnvironment: an upstream child gets the base list of the
// gateway's environment and its own env entries, the whole environment
// only with inherit_env, and never the sealing keys or their file's name.
func TestChildEnvironment(t *testing.T) {
	t.Setenv(interlock.SecretEnv, "a secret that must stay inside the gateway")
	t.Setenv(config.SecretFileEnv, "/etc/interlock/secret")
	t.Setenv("INTERLOCK_TEST_INHERITED", "inherited")
	t.Setenv("TZ", "Europe/Berlin")
	tests := []struct {
		name    string
		inherit bool
		want    map[string]string
	}{
		{"base only", false, map[string]string{
			interlock.SecretEnv:        "unset",
			config.SecretFileEnv:       "unset",
			"INTERLOCK_TEST_INHERITED": "unset",
			"TZ":                       "Europe/Berlin",
			"PATH":                     os.Getenv("PATH"),
			"FROM_CONFIG":              "configured",
		}},
		{"inherit_env", true, map[string]string{
			interlock.SecretEnv:        "unset",
			config.SecretFileEnv:       "unset",
			"INTERLOCK_TEST_INHERITED": "inherited",
			"TZ":                       "Europe/Berlin",
			"FROM_CONFIG":              "configured",
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := testConfig(t, "", "fx")
			f.Upstreams[0].Env["FROM_CONFIG"] = "configured"
			f.Upstreams[0].InheritEnv = tt.inherit
			cs := client(t, start(t, f, "false"), nil)
			for name, want := range tt.want {
				res := call(t, cs, "getenv", map[string]any{"name": name})
				if got := res.Content[0].(*mcp.TextContent).Text; got != want {
					t.Errorf("%s in the child = %q, want %q", name, got, want)
				}
			}
		})
	}
}
