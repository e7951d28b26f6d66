package gateway

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/interlock-mcp/interlock/config"
)

// probeServer is an upstream of protocol 2025-11-25 that, during every
// kind of request a client can send through the gateway (a tool call, a
// resource read, a prompt, a completion, a subscription), sends what a
// server may send in the middle of a request, each naming the request's
// data: a log line, progress (when asked for it), and the questions
// sampling/createMessage, roots/list and elicitation/create. What came
// back is kept by data, and the tool probe_seen {data} answers it, so a
// test reads what the upstream heard whatever the request's kind.
// wait_file {path} answers once the file exists: a request that stays in
// flight for as long as a test needs; so does a read of slow://{ms}, for
// that many milliseconds.
func probeServer() *mcp.Server {
	var seen sync.Map // data → what came back
	push := func(ctx context.Context, ss *mcp.ServerSession, data string, progress any) {
		_ = ss.Log(ctx, &mcp.LoggingMessageParams{Level: "warning", Data: "log:" + data})
		if progress != nil {
			_ = ss.NotifyProgress(ctx, &mcp.ProgressNotificationParams{ProgressToken: progress, Progress: 1, Message: "progress:" + data})
		}
		var got []string
		sampled, err := ss.CreateMessage(ctx, &mcp.CreateMessageParams{MaxTokens: 5,
			Messages: []*mcp.SamplingMessage{{Role: "user", Content: &mcp.TextContent{Text: "sample:" + data}}}})
		if text, ok := contentText(sampled, err); ok {
			got = append(got, "sample="+text)
		} else {
			got = append(got, "sample=refused")
		}
		if roots, err := ss.ListRoots(ctx, nil); err == nil {
			var uris []string
			for _, r := range roots.Roots {
				uris = append(uris, r.URI)
			}
			got = append(got, "roots="+strings.Join(uris, ","))
		} else {
			got = append(got, "roots=refused")
		}
		form := &mcp.ElicitParams{Mode: "form", Message: "elicit:" + data, RequestedSchema: map[string]any{
			"type": "object", "properties": map[string]any{"who": map[string]any{"type": "string"}}}}
		if r, err := ss.Elicit(ctx, form); err == nil {
			who, _ := r.Content["who"].(string)
			got = append(got, "elicit="+r.Action+":"+who)
		} else {
			got = append(got, "elicit=refused")
		}
		seen.Store(data, strings.Join(got, ";"))
	}
	s := mcp.NewServer(&mcp.Implementation{Name: "probe", Version: "1"}, &mcp.ServerOptions{
		SupportedProtocolVersions: []string{"2025-11-25"},
		CompletionHandler: func(ctx context.Context, req *mcp.CompleteRequest) (*mcp.CompleteResult, error) {
			push(ctx, req.Session, req.Params.Argument.Value, nil)
			return &mcp.CompleteResult{Completion: mcp.CompletionResultDetails{Values: []string{"done"}}}, nil
		},
		SubscribeHandler: func(ctx context.Context, req *mcp.SubscribeRequest) error {
			push(ctx, req.Session, strings.TrimPrefix(req.Params.URI, "probe://"), nil)
			return nil
		},
		UnsubscribeHandler: func(context.Context, *mcp.UnsubscribeRequest) error { return nil },
	})
	object := map[string]any{"type": "object"}
	readOnly := &mcp.ToolAnnotations{ReadOnlyHint: true}
	text := func(s string) *mcp.CallToolResult {
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: s}}}
	}
	var args struct{ Data, Path string }
	read := func(req *mcp.CallToolRequest) (data, path string) {
		a := args
		_ = json.Unmarshal(req.Params.Arguments, &a)
		return a.Data, a.Path
	}
	s.AddTool(&mcp.Tool{Name: "probe", InputSchema: object, Annotations: readOnly},
		func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			data, _ := read(req)
			push(ctx, req.Session, data, req.Params.GetProgressToken())
			return text("probed"), nil
		})
	s.AddTool(&mcp.Tool{Name: "probe_seen", InputSchema: object, Annotations: readOnly},
		func(_ context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			data, _ := read(req)
			got, _ := seen.Load(data)
			answer, _ := got.(string)
			return text(answer), nil
		})
	s.AddTool(&mcp.Tool{Name: "wait_file", InputSchema: object, Annotations: readOnly},
		func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			_, path := read(req)
			for {
				if _, err := os.Stat(path); err == nil {
					return text("released"), nil
				}
				select {
				case <-ctx.Done():
					return text("cancelled"), nil
				case <-time.After(5 * time.Millisecond):
				}
			}
		})
	s.AddPrompt(&mcp.Prompt{Name: "probe", Arguments: []*mcp.PromptArgument{{Name: "data"}}},
		func(ctx context.Context, req *mcp.GetPromptRequest) (*mcp.GetPromptResult, error) {
			push(ctx, req.Session, req.Params.Arguments["data"], nil)
			return &mcp.GetPromptResult{Messages: []*mcp.PromptMessage{{Role: "user", Content: &mcp.TextContent{Text: "probed"}}}}, nil
		})
	s.AddResourceTemplate(&mcp.ResourceTemplate{Name: "slow", URITemplate: "slow://{ms}"},
		func(ctx context.Context, req *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
			ms, _ := strconv.Atoi(strings.TrimPrefix(req.Params.URI, "slow://"))
			select {
			case <-time.After(time.Duration(ms) * time.Millisecond):
			case <-ctx.Done():
			}
			return &mcp.ReadResourceResult{Contents: []*mcp.ResourceContents{{URI: req.Params.URI, Text: "slept"}}}, nil
		})
	s.AddResourceTemplate(&mcp.ResourceTemplate{Name: "probe", URITemplate: "probe://{data}"},
		func(ctx context.Context, req *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
			push(ctx, req.Session, strings.TrimPrefix(req.Params.URI, "probe://"), nil)
			return &mcp.ReadResourceResult{Contents: []*mcp.ResourceContents{{URI: req.Params.URI, Text: "probed"}}}, nil
		})
	return s
}

// contentText is the text of a sampling answer, when there is one.
func contentText(r *mcp.CreateMessageResult, err error) (string, bool) {
	if err != nil || r == nil {
		return "", false
	}
	t, ok := r.Content.(*mcp.TextContent)
	if !ok {
		return "", false
	}
	return t.Text, true
}

// witness is a client that notes everything the gateway sends it and
// answers every question in its own name.
type witness struct {
	name string
	mu   sync.Mutex
	saw  []string
}

func (w *witness) note(format string, args ...any) {
	w.mu.Lock()
	w.saw = append(w.saw, fmt.Sprintf(format, args...))
	w.mu.Unlock()
}

// heard returns what w was sent that mentions s.
func (w *witness) heard(s string) []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []string
	for _, m := range w.saw {
		if strings.Contains(m, s) {
			out = append(out, m)
		}
	}
	return out
}

func (w *witness) client() *mcp.Client {
	c := mcp.NewClient(&mcp.Implementation{Name: w.name}, &mcp.ClientOptions{
		LoggingMessageHandler: func(_ context.Context, r *mcp.LoggingMessageRequest) { w.note("log %v", r.Params.Data) },
		ProgressNotificationHandler: func(_ context.Context, r *mcp.ProgressNotificationClientRequest) {
			w.note("progress %s", r.Params.Message)
		},
		CreateMessageHandler: func(_ context.Context, r *mcp.CreateMessageRequest) (*mcp.CreateMessageResult, error) {
			var asked string
			if len(r.Params.Messages) > 0 {
				if t, ok := r.Params.Messages[0].Content.(*mcp.TextContent); ok {
					asked = t.Text
				}
			}
			w.note("sampling %s", asked)
			return &mcp.CreateMessageResult{Model: "m", Role: "assistant", Content: &mcp.TextContent{Text: "from-" + w.name}}, nil
		},
		ElicitationHandler: func(_ context.Context, r *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
			w.note("elicit %s", r.Params.Message)
			return &mcp.ElicitResult{Action: "accept", Content: map[string]any{"who": w.name}}, nil
		},
	})
	c.AddRoots(&mcp.Root{URI: "file:///home/" + w.name})
	return c
}

// TestEveryMessageReachesItsOwner runs two clients of different tenants
// through one upstream. While acme has a tool call in flight, globex sends
// each kind of request the gateway forwards, during which the upstream
// logs, reports progress and asks for sampling, roots and a form, each
// naming globex's data. Nothing of it may reach acme, and nothing of
// acme's (its answers, its roots) may reach globex's request. Where the
// question can be known to be globex's (its own link, or the stream of its
// POST to an HTTP upstream), globex is asked and answers. Over stdio and
// HTTP upstreams, shared and per_client, for clients of 2025-11-25 (on
// sessions) and 2026-07-28.
func TestEveryMessageReachesItsOwner(t *testing.T) {
	generations := []struct {
		name      string
		opts      *mcp.ClientSessionOptions
		stateless bool // served by --stateless
	}{{"2025-11-25", onSession, false}, {"2025-11-25 without a session", onSession, true}, {"2026-07-28", nil, false}}
	kinds := []string{"tools/call", "resources/read", "prompts/get", "completion/complete", "resources/subscribe"}
	for _, transport := range []string{"stdio", "http"} {
		for _, perClient := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s upstream, per_client %v", transport, perClient), func(t *testing.T) {
				f := testConfig(t, fmt.Sprintf(`
auth:
  keys:
    - {sha256: %s, principal: alice, tenant: acme}
    - {sha256: %s, principal: alice, tenant: globex}
`, HashKey("acme-key"), HashKey("globex-key")))
				up := &config.Upstream{Name: "probe", PerClient: perClient, Line: 10}
				if transport == "stdio" {
					up.Command, up.Env = fixtureCommand(t), map[string]string{"INTERLOCK_FIXTURE": "probe"}
				} else {
					probe := probeServer()
					srv := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return probe }, nil))
					t.Cleanup(srv.Close)
					up.URL = srv.URL
				}
				f.Upstreams = append(f.Upstreams, up)
				gw := start(t, f, "false")
				srv, stateless := httptest.NewServer(gw.Handler(false)), httptest.NewServer(gw.Handler(true))
				t.Cleanup(srv.Close)
				t.Cleanup(stateless.Close)
				connect := func(w *witness, key string, opts *mcp.ClientSessionOptions, withoutSession bool) *mcp.ClientSession {
					t.Helper()
					url := srv.URL
					if withoutSession {
						url = stateless.URL
					}
					cs := dial(t, w.client(), url+MCPPath, key, opts)
					if opts != nil {
						// A level set, so that a log line handed to this
						// client would be seen.
						if err := cs.SetLoggingLevel(context.Background(), &mcp.SetLoggingLevelParams{Level: "debug"}); err != nil {
							t.Fatal(err)
						}
					}
					return cs
				}
				// Over stdio with per_client, each link is a child of its
				// own, which alone knows what it heard: the upstream is
				// asked on the link the request went over.
				onShared := connect(&witness{name: "reader"}, "globex-key", nil, false)
				n := 0
				for _, genA := range generations {
					for _, genB := range generations {
						acme, globex := &witness{name: "acme"}, &witness{name: "globex"}
						csA, csB := connect(acme, "acme-key", genA.opts, genA.stateless), connect(globex, "globex-key", genB.opts, genB.stateless)
						for _, kind := range kinds {
							n++
							data := fmt.Sprintf("globex-secret-%d", n)
							t.Run(fmt.Sprintf("acme %s, globex %s, %s", genA.name, genB.name, kind), func(t *testing.T) {
								release := filepath.Join(t.TempDir(), "release")
								resA := make(chan *mcp.CallToolResult, 1)
								go func() {
									res, err := csA.CallTool(context.Background(), &mcp.CallToolParams{Name: "wait_file", Arguments: map[string]any{"path": release}})
									if err != nil {
										res = &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: err.Error()}}}
									}
									resA <- res
								}()
								eventually(t, "acme's call in flight on the upstream", func() bool { return flightsOnLinks(gw) == 1 })
								dropped := gw.upstreams[0].flights.dropped.Load()
								if err := send(csB, kind, data); err != nil && !(genB.stateless && strings.Contains(err.Error(), `"CANCELLED"`)) {
									// A client without a session cannot be shown the
									// upstream's form, and its call is CANCELLED.
									t.Errorf("globex's %s: %v", kind, err)
								}
								if err := os.WriteFile(release, nil, 0o600); err != nil {
									t.Fatal(err)
								}
								if res := <-resA; res.IsError || res.Content[0].(*mcp.TextContent).Text != "released" {
									t.Errorf("acme's own call ended %+v, want released", res.Content[0])
								}
								reader := onShared
								if ownLink(genB.name, kind, perClient) && !genB.stateless {
									reader = csB
								}
								heard := call(t, reader, "probe_seen", map[string]any{"data": data}).Content[0].(*mcp.TextContent).Text
								if leaked := acme.heard(data); len(leaked) > 0 {
									t.Errorf("acme was sent globex's messages: %q", leaked)
								}
								if strings.Contains(heard, "acme") {
									t.Errorf("the upstream heard acme's answers during globex's %s: %s", kind, heard)
								}
								// Where globex can be asked, it is asked and answers.
								own := transport == "http" || ownLink(genB.name, kind, perClient) || ownLink(genA.name, "tools/call", perClient)
								// A client on a session is asked during any request; one of
								// 2026-07-28 in its call's result.
								askable := genB.name == "2025-11-25" || (genB.opts == nil && kind == "tools/call")
								if own && askable {
									want := "sample=from-globex;roots=file:///home/globex;elicit=accept:globex"
									if heard != want {
										t.Errorf("the upstream heard %q from globex's %s, want %q", heard, kind, want)
									}
									if genB.name == "2025-11-25" {
										eventually(t, "globex's log line", func() bool { return len(globex.heard("log:"+data)) == 1 })
									}
								} else if heard != "sample=refused;roots=refused;elicit=cancel:" {
									t.Errorf("the upstream heard %q from globex's %s, want every question refused", heard, kind)
								}
								if !own && gw.upstreams[0].flights.dropped.Load() == dropped {
									t.Errorf("globex's log line during its %s was not dropped", kind)
								}
							})
						}
					}
				}
			})
		}
	}
}

// ownLink reports whether a request of a client of generation gen goes
// over a link of its client's own, rather than the shared one: with
// per_client, for a client of 2025-11-25 on a session, but for its
// subscriptions, which always use the shared link.
func ownLink(gen, kind string, perClient bool) bool {
	return perClient && gen == "2025-11-25" && kind != "resources/subscribe"
}

// send makes one request of kind, naming data, as globex.
func send(cs *mcp.ClientSession, kind, data string) error {
	ctx := context.Background()
	switch kind {
	case "tools/call":
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "probe", Arguments: map[string]any{"data": data},
			Meta: mcp.Meta{"progressToken": "progress-" + data}})
		if err == nil && res.IsError {
			err = fmt.Errorf("%s", res.Content[0].(*mcp.TextContent).Text)
		}
		return err
	case "resources/read":
		_, err := cs.ReadResource(ctx, &mcp.ReadResourceParams{URI: "probe://" + data})
		return err
	case "prompts/get":
		_, err := cs.GetPrompt(ctx, &mcp.GetPromptParams{Name: "probe", Arguments: map[string]string{"data": data}})
		return err
	case "completion/complete":
		_, err := cs.Complete(ctx, &mcp.CompleteParams{Ref: &mcp.CompleteReference{Type: "ref/prompt", Name: "probe"},
			Argument: mcp.CompleteParamsArgument{Name: "data", Value: data}})
		return err
	case "resources/subscribe":
		return cs.Subscribe(ctx, &mcp.SubscribeParams{URI: "probe://" + data})
	}
	return fmt.Errorf("no such kind %q", kind)
}

// flightsOnLinks counts the requests in flight on the gateway's upstreams
// that have reached their link.
func flightsOnLinks(gw *Gateway) int {
	n := 0
	for _, u := range gw.upstreams {
		u.flights.mu.Lock()
		for fl := range u.flights.all {
			if fl.link != nil {
				n++
			}
		}
		u.flights.mu.Unlock()
	}
	return n
}

// TestEveryForwardedRequestHasAnOwner reads the gateway's code: every
// request the gateway sends on an upstream's link is made inside a send
// function handed to forward, or by the few functions that enter their
// flight in the table themselves (a tool call's attempt, and sendCall, which
// only attempt calls, once the flight is entered; a held call) or that
// speak on a link nobody shares yet (dial). A request sent any other
// way would have no owner, and whatever the upstream said during it could
// be handed to another client's request.
func TestEveryForwardedRequestHasAnOwner(t *testing.T) {
	requests := map[string]bool{}
	for _, m := range []string{"CallTool", "ReadResource", "GetPrompt", "Complete", "Subscribe", "Unsubscribe",
		"SetLoggingLevel", "Ping", "Resources", "ResourceTemplates", "Prompts", "Tools", "ListTools",
		"ListPrompts", "ListResources", "ListResourceTemplates"} {
		requests[m] = true
	}
	// The functions that enter their own flight (sendCall is attempt's), or
	// speak on a new link.
	ownFlight := map[string]bool{"attempt": true, "sendCall": true, "dial": true, "forwardLevel": true}
	fset := token.NewFileSet()
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	found := 0
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		imports := map[string]bool{}
		for _, imp := range f.Imports {
			path := strings.Trim(imp.Path.Value, `"`)
			if imp.Name != nil {
				imports[imp.Name.Name] = true
			} else {
				imports[path[strings.LastIndex(path, "/")+1:]] = true
			}
		}
		for _, decl := range f.Decls {
			fn, ok := decl.(*ast.FuncDecl)
			if !ok || fn.Body == nil {
				continue
			}
			var stack []ast.Node
			ast.Inspect(fn.Body, func(n ast.Node) bool {
				if n == nil {
					stack = stack[:len(stack)-1]
					return true
				}
				stack = append(stack, n)
				call, ok := n.(*ast.CallExpr)
				if !ok {
					return true
				}
				sel, ok := call.Fun.(*ast.SelectorExpr)
				if !ok || !requests[sel.Sel.Name] {
					return true
				}
				if x, ok := sel.X.(*ast.Ident); ok && imports[x.Name] {
					return true // a package's function, not a link's method
				}
				found++
				if ownFlight[fn.Name.Name] || sentByForward(stack) {
					return true
				}
				t.Errorf("%s: %s sends %s on a link outside forward: enter its flight in the table (see owners.go)",
					fset.Position(call.Pos()), fn.Name.Name, sel.Sel.Name)
				return true
			})
		}
	}
	if found < 10 {
		t.Errorf("found %d requests sent on links; the reading of the code is broken", found)
	}
}

// sentByForward reports whether the innermost function literal in stack is
// an argument of a call of forward, or of one that hands it to forward
// (gather) or enters its flight itself (hold).
func sentByForward(stack []ast.Node) bool {
	for i := len(stack) - 1; i > 0; i-- {
		lit, ok := stack[i].(*ast.FuncLit)
		if !ok {
			continue
		}
		call, ok := stack[i-1].(*ast.CallExpr)
		if !ok {
			return false
		}
		var name string
		switch fun := call.Fun.(type) {
		case *ast.SelectorExpr:
			name = fun.Sel.Name
		case *ast.Ident:
			name = fun.Name
		}
		for _, arg := range call.Args {
			// gather hands its list function to forward.
			if arg == lit && (name == "forward" || name == "hold" || name == "gather") {
				return true
			}
		}
		return false
	}
	return false
}

// TestFlightMarks: an HTTP link's client marks each request and
// notification on a POST's stream with the POST's flight, replaces a mark
// the upstream wrote itself, removes one from every message of another
// stream, and leaves responses and what it cannot read as they are.
func TestFlightMarks(t *testing.T) {
	for _, tc := range []struct {
		name, msg, mark, want string
	}{
		{"a notification on a POST's stream", `{"jsonrpc":"2.0","method":"notifications/message","params":{"level":"info","data":"x"}}`, "7",
			`{"jsonrpc":"2.0","method":"notifications/message","params":{"_meta":{"interlock/flight":"7"},"data":"x","level":"info"}}`},
		{"a request without params", `{"jsonrpc":"2.0","id":3,"method":"roots/list"}`, "7",
			`{"id":3,"jsonrpc":"2.0","method":"roots/list","params":{"_meta":{"interlock/flight":"7"}}}`},
		{"a forged mark on a POST's stream", `{"jsonrpc":"2.0","id":3,"method":"sampling/createMessage","params":{"_meta":{"interlock/flight":"1","k":1}}}`, "7",
			`{"id":3,"jsonrpc":"2.0","method":"sampling/createMessage","params":{"_meta":{"interlock/flight":"7","k":1}}}`},
		{"a forged mark on the session's stream", `{"jsonrpc":"2.0","id":3,"method":"elicitation/create","params":{"_meta":{"interlock/flight":"1"},"message":"m"}}`, "",
			`{"id":3,"jsonrpc":"2.0","method":"elicitation/create","params":{"message":"m"}}`},
		{"a notification on the session's stream", `{"jsonrpc":"2.0","method":"notifications/tools/list_changed"}`, "", ""},
		{"a response", `{"jsonrpc":"2.0","id":3,"result":{"method":"x","_meta":{"interlock/flight":"1"}}}`, "7", ""},
		{"params that are no object", `{"jsonrpc":"2.0","method":"m","params":[1]}`, "7", ""},
		{"no JSON", `{"method":`, "7", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, changed := markMessage([]byte(tc.msg), tc.mark)
			if tc.want == "" {
				if changed {
					t.Errorf("changed to %s, want it left as it was", out)
				}
				return
			}
			if !changed || string(out) != tc.want {
				t.Errorf("marked %s (changed %v), want %s", out, changed, tc.want)
			}
		})
	}
	// In a stream, each event is marked where its data is, and its other
	// fields are kept.
	stream := "id: 1\nevent: message\ndata: {\"jsonrpc\":\"2.0\",\ndata: \"method\":\"notifications/progress\",\"params\":{}}\n\n" +
		"id: 2\ndata: {\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{}}\n\n"
	s := &markedStream{src: bufio.NewReader(strings.NewReader(stream)), body: io.NopCloser(nil), mark: "9"}
	got, err := io.ReadAll(s)
	if err != nil {
		t.Fatal(err)
	}
	want := "id: 1\nevent: message\ndata: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\",\"params\":{\"_meta\":{\"interlock/flight\":\"9\"}}}\n\n" +
		"id: 2\ndata: {\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{}}\n\n"
	if string(got) != want {
		t.Errorf("stream:\n%s\nwant:\n%s", got, want)
	}
}
