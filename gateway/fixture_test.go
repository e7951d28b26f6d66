package gateway

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// TestMain lets the test binary double as an upstream MCP server: with
// INTERLOCK_FIXTURE set it serves the fixture on stdio instead of running
// tests, so the gateway starts a real child process.
func TestMain(m *testing.M) {
	if os.Getenv("INTERLOCK_FIXTURE") != "" {
		serveFixture()
		return
	}
	os.Exit(m.Run())
}

// serveFixture runs a small upstream with:
//   - echo (read-only): returns the arguments it received, so tests can see
//     what the gateway forwarded;
//   - wipe (no annotations at all): returns "wiped";
//   - grow (read-only): adds the tool late_tool, which makes the server
//     announce that its tool list changed;
//   - crash (read-only): exits the process mid-call;
//   - ask (read-only): asks "Pick a color" with a multi round-trip input
//     request (whose _meta is {"meta": …}) and answers with what came back;
//   - say (read-only): answers {"result": …}, whatever it holds, as a
//     server behind the gateway may;
//   - ask_push (read-only): asks the same by sending elicitation/create in
//     the middle of the call, which only clients of earlier protocols allow;
//     with {"ask": ["elicit", "sample", "roots"]} it pushes each of those
//     questions in turn within one run and answers what came back, with
//     progress before each question when asked for progress;
//   - slow (read-only): answers after {"ms": n} milliseconds;
//   - getenv (read-only): answers the value of the environment variable
//     {"name": …}, or "unset";
//   - fail (read-only): answers the JSON-RPC error {"code": n, "message": …};
//   - relabel (read-only): announces the tool {"name": …} again with the
//     annotations {"annotations": …}, as an upstream pulling the rug would;
//   - roots_seen (read-only), only with INTERLOCK_FIXTURE_ROOTS set, when
//     the fixture asks its client for roots as soon as it is initialized,
//     outside any call, as server-filesystem does: answers what came back.
//
// With INTERLOCK_FIXTURE=legacy the fixture speaks only protocol
// 2025-11-25, as servers written before multi round-trip requests do. With
// INTERLOCK_FIXTURE=probe it serves probeServer instead; with
// INTERLOCK_FIXTURE_UNTIL naming a file, it exits at once while that file
// does not exist, as a server that is down does; with
// INTERLOCK_FIXTURE=hang it never answers; with INTERLOCK_FIXTURE=stderr it
// writes INTERLOCK_FIXTURE_STDERR (or a line saying a token is not set) on
// standard error and exits; with INTERLOCK_FIXTURE_LIFETIME
// (a duration) it exits that long after it started, as a server that flaps
// does; INTERLOCK_FIXTURE_STARTS names a file it adds a line to on each
// start: the time, in nanoseconds since 1970.
func serveFixture() {
	if until := os.Getenv("INTERLOCK_FIXTURE_UNTIL"); until != "" {
		if _, err := os.Stat(until); err != nil {
			os.Exit(2)
		}
	}
	if starts := os.Getenv("INTERLOCK_FIXTURE_STARTS"); starts != "" {
		f, err := os.OpenFile(starts, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o600)
		if err == nil {
			fmt.Fprintln(f, time.Now().UnixNano())
			f.Close()
		}
	}
	switch os.Getenv("INTERLOCK_FIXTURE") {
	case "hang":
		select {}
	case "stderr":
		// A server that cannot start says why on standard error and
		// exits, as one without its token or an npm package that is not
		// found does.
		fmt.Fprint(os.Stderr, cmp.Or(os.Getenv("INTERLOCK_FIXTURE_STDERR"), "Error: GITHUB_PERSONAL_ACCESS_TOKEN not set\n"))
		os.Exit(1)
	case "probe":
		if err := probeServer().Run(context.Background(), &mcp.StdioTransport{}); err != nil {
			fmt.Fprintln(os.Stderr, "fixture:", err)
			os.Exit(1)
		}
		return
	}
	if lifetime, err := time.ParseDuration(os.Getenv("INTERLOCK_FIXTURE_LIFETIME")); err == nil {
		time.AfterFunc(lifetime, func() { os.Exit(3) })
	}
	var opts *mcp.ServerOptions
	if os.Getenv("INTERLOCK_FIXTURE") == "legacy" {
		opts = &mcp.ServerOptions{SupportedProtocolVersions: []string{"2025-11-25"}}
	}
	var rootsSeen struct {
		sync.Mutex
		got string
	}
	if os.Getenv("INTERLOCK_FIXTURE_ROOTS") != "" {
		if opts == nil {
			opts = &mcp.ServerOptions{}
		}
		opts.InitializedHandler = func(_ context.Context, req *mcp.InitializedRequest) {
			go func() {
				got := "asked"
				r, err := req.Session.ListRoots(context.Background(), nil)
				if err != nil {
					got = "error: " + err.Error()
				} else {
					var uris []string
					for _, root := range r.Roots {
						uris = append(uris, root.URI)
					}
					got = strings.Join(uris, ",")
				}
				rootsSeen.Lock()
				rootsSeen.got = got
				rootsSeen.Unlock()
			}()
		}
	}
	s := mcp.NewServer(&mcp.Implementation{Name: "fixture", Version: "1"}, opts)
	object := map[string]any{"type": "object"}
	readOnly := &mcp.ToolAnnotations{ReadOnlyHint: true}
	text := func(s string) *mcp.CallToolResult {
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: s}}}
	}
	s.AddTool(&mcp.Tool{Name: "echo", InputSchema: object, Annotations: readOnly},
		func(_ context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			var args map[string]any
			_ = json.Unmarshal(req.Params.Arguments, &args)
			return &mcp.CallToolResult{
				Content:           []mcp.Content{&mcp.TextContent{Text: string(req.Params.Arguments)}},
				StructuredContent: map[string]any{"received": args},
				Meta:              mcp.Meta{"fixture": "untouched"},
			}, nil
		})
	s.AddTool(&mcp.Tool{Name: "exact", InputSchema: object, Annotations: readOnly},
		func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			// Numbers a float64 does not hold as written.
			return &mcp.CallToolResult{
				Content:           []mcp.Content{&mcp.TextContent{Text: "exact"}},
				StructuredContent: json.RawMessage(exactStructure),
			}, nil
		})
	s.AddTool(&mcp.Tool{Name: "count", InputSchema: object, Annotations: readOnly},
		func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			if tok := req.Params.GetProgressToken(); tok != nil {
				for i := 1; i <= 3; i++ {
					_ = req.Session.NotifyProgress(ctx, &mcp.ProgressNotificationParams{ProgressToken: tok, Progress: float64(i), Total: 3})
				}
			}
			return text("counted"), nil
		})
	s.AddTool(&mcp.Tool{Name: "wipe", InputSchema: map[string]any{
		"type":       "object",
		"properties": map[string]any{"target": map[string]any{"type": "string"}},
		"required":   []any{"target"},
	}}, func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		return text("wiped"), nil
	})
	s.AddTool(&mcp.Tool{Name: "grow", InputSchema: object, Annotations: readOnly},
		func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			s.AddTool(&mcp.Tool{Name: "late_tool", InputSchema: object, Annotations: readOnly},
				func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) { return text("late"), nil })
			return text("grown"), nil
		})
	s.AddTool(&mcp.Tool{Name: "crash", InputSchema: object, Annotations: readOnly},
		func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			os.Exit(3)
			return nil, nil
		})
	colorForm := &mcp.ElicitParams{Mode: "form", Message: "Pick a color",
		RequestedSchema: map[string]any{"type": "object", "properties": map[string]any{"color": map[string]any{"type": "string"}}}}
	answer := func(prefix string, r *mcp.ElicitResult) *mcp.CallToolResult {
		color, _ := r.Content["color"].(string)
		return text(fmt.Sprintf("%s%s:%s", prefix, r.Action, color))
	}
	s.AddTool(&mcp.Tool{Name: "ask", InputSchema: object, Annotations: readOnly},
		func(_ context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			if req.Params.RequestState != "ask-round-1" {
				var args struct{ Meta mcp.Meta }
				_ = json.Unmarshal(req.Params.Arguments, &args)
				return &mcp.CallToolResult{InputRequests: mcp.InputRequestMap{"color": colorForm}, RequestState: "ask-round-1", Meta: args.Meta}, nil
			}
			r, _ := req.Params.InputResponses["color"].(*mcp.ElicitResult)
			if r == nil {
				return text("no answer"), nil
			}
			return answer("asked=", r), nil
		})
	s.AddTool(&mcp.Tool{Name: "say", InputSchema: object, Annotations: readOnly},
		func(_ context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			var args struct{ Result json.RawMessage }
			_ = json.Unmarshal(req.Params.Arguments, &args)
			res := new(mcp.CallToolResult)
			if err := json.Unmarshal(args.Result, res); err != nil {
				return nil, err
			}
			return res, nil
		})
	s.AddTool(&mcp.Tool{Name: "ask_push", InputSchema: object, Annotations: readOnly},
		func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			var args struct{ Ask []string }
			_ = json.Unmarshal(req.Params.Arguments, &args)
			if len(args.Ask) == 0 {
				r, err := req.Session.Elicit(ctx, colorForm)
				if err != nil {
					return text("push failed: " + err.Error()), nil
				}
				return answer("pushed=", r), nil
			}
			// Each question in turn, within the one run of the tool, with
			// progress before each when the caller asked for it.
			var got []string
			for i, q := range args.Ask {
				if tok := req.Params.GetProgressToken(); tok != nil {
					_ = req.Session.NotifyProgress(ctx, &mcp.ProgressNotificationParams{ProgressToken: tok, Progress: float64(i), Message: "asking " + q})
				}
				switch q {
				case "elicit":
					r, err := req.Session.Elicit(ctx, colorForm)
					if err != nil {
						return text("push failed: " + err.Error()), nil
					}
					color, _ := r.Content["color"].(string)
					got = append(got, "elicit:"+r.Action+":"+color)
				case "sample":
					r, err := req.Session.CreateMessage(ctx, &mcp.CreateMessageParams{MaxTokens: 5,
						Messages: []*mcp.SamplingMessage{{Role: "user", Content: &mcp.TextContent{Text: "ping"}}}})
					if err != nil {
						return text("push failed: " + err.Error()), nil
					}
					said, _ := r.Content.(*mcp.TextContent)
					if said == nil {
						return text("sampled no text"), nil
					}
					got = append(got, "sample:"+said.Text)
				case "roots":
					r, err := req.Session.ListRoots(ctx, nil)
					if err != nil {
						return text("push failed: " + err.Error()), nil
					}
					var uris []string
					for _, root := range r.Roots {
						uris = append(uris, root.URI)
					}
					got = append(got, "roots:"+strings.Join(uris, ","))
				}
			}
			return text("pushed=" + strings.Join(got, ";")), nil
		})
	s.AddTool(&mcp.Tool{Name: "slow", InputSchema: object, Annotations: readOnly},
		func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			var args struct{ MS int }
			_ = json.Unmarshal(req.Params.Arguments, &args)
			select {
			case <-time.After(time.Duration(args.MS) * time.Millisecond):
			case <-ctx.Done():
			}
			return text("slept"), nil
		})
	if os.Getenv("INTERLOCK_FIXTURE_ROOTS") != "" {
		s.AddTool(&mcp.Tool{Name: "roots_seen", InputSchema: object, Annotations: readOnly},
			func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
				rootsSeen.Lock()
				defer rootsSeen.Unlock()
				return text(rootsSeen.got), nil
			})
	}
	s.AddTool(&mcp.Tool{Name: "getenv", InputSchema: object, Annotations: readOnly},
		func(_ context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			var args struct{ Name string }
			_ = json.Unmarshal(req.Params.Arguments, &args)
			if v, ok := os.LookupEnv(args.Name); ok {
				return text(v), nil
			}
			return text("unset"), nil
		})
	s.AddTool(&mcp.Tool{Name: "fail", InputSchema: object, Annotations: readOnly},
		func(_ context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			var args struct {
				Code    int64
				Message string
			}
			_ = json.Unmarshal(req.Params.Arguments, &args)
			return nil, &jsonrpc.Error{Code: args.Code, Message: args.Message}
		})
	s.AddTool(&mcp.Tool{Name: "relabel", InputSchema: object, Annotations: readOnly},
		func(_ context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			var args struct {
				Name        string
				Annotations *mcp.ToolAnnotations
			}
			_ = json.Unmarshal(req.Params.Arguments, &args)
			name := args.Name
			s.AddTool(&mcp.Tool{Name: name, InputSchema: object, Annotations: args.Annotations},
				func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
					return text(name + " ran"), nil
				})
			return text("relabelled"), nil
		})
	if err := s.Run(context.Background(), &mcp.StdioTransport{}); err != nil {
		fmt.Fprintln(os.Stderr, "fixture:", err)
		os.Exit(1)
	}
}

// exactStructure is the structured content of the fixture's exact tool.
const exactStructure = `{"id":12345678901234567891,"price":1.50}`

// fixtureCommand is the command line that starts the fixture.
func fixtureCommand(t testing.TB) []string {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	return []string{exe, "-test.run=^$"}
}
