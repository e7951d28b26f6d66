package gateway

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/interlock-mcp/interlock/config"
	"github.com/interlock-mcp/interlock/sqlite"
)

// echoUpstream serves, over streamable HTTP (with opts), echoHandler.
func echoUpstream(b *testing.B, opts *mcp.StreamableHTTPOptions) *httptest.Server {
	srv := httptest.NewServer(echoHandler(opts))
	b.Cleanup(srv.Close)
	return srv
}

// echoHandler serves, over streamable HTTP (with opts), one read-only tool
// that answers its arguments.
func echoHandler(opts *mcp.StreamableHTTPOptions) http.Handler {
	s := mcp.NewServer(&mcp.Implementation{Name: "echo"}, nil)
	s.AddTool(&mcp.Tool{Name: "echo", InputSchema: map[string]any{"type": "object"}, Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true}},
		func(_ context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: string(req.Params.Arguments)}}}, nil
		})
	return mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s }, opts)
}

// BenchmarkUpstreamLeg compares a call to an HTTP upstream made by a plain
// SDK client with the same call made by the gateway's upstream leg.
func BenchmarkUpstreamLeg(b *testing.B) {
	srv := echoUpstream(b, nil)
	ctx := context.Background()
	args := json.RawMessage(`{"text":"hello"}`)
	b.Run("sdk-client", func(b *testing.B) {
		cs, err := mcp.NewClient(&mcp.Implementation{Name: "bench"}, nil).Connect(ctx, &mcp.StreamableClientTransport{Endpoint: srv.URL}, nil)
		if err != nil {
			b.Fatal(err)
		}
		defer cs.Close()
		callEcho(b, cs, args)
	})
	b.Run("sdk-proxy-in-memory", func(b *testing.B) {
		up, err := mcp.NewClient(&mcp.Implementation{Name: "bench"}, nil).Connect(ctx, &mcp.StreamableClientTransport{Endpoint: srv.URL}, nil)
		if err != nil {
			b.Fatal(err)
		}
		defer up.Close()
		s := mcp.NewServer(&mcp.Implementation{Name: "proxy"}, nil)
		s.AddTool(&mcp.Tool{Name: "echo", InputSchema: map[string]any{"type": "object"}, Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true}},
			func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
				return up.CallTool(ctx, &mcp.CallToolParams{Name: "echo", Arguments: req.Params.Arguments})
			})
		b.Run("in-memory", func(b *testing.B) { callEcho(b, inMemory(b, s), args) })
		b.Run("http", func(b *testing.B) {
			callEcho(b, overHTTP(b, mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s }, nil)), args)
		})
	})
	f, err := config.Parse("gateway.yaml", []byte("upstreams:\n  - name: echo\n    url: "+srv.URL+"\n"), func(string) (string, bool) { return "", false })
	if err != nil {
		b.Fatal(err)
	}
	gw := startForBench(b, f, Options{})
	u := gw.upstreams[0]
	b.Run("upstream-call", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := u.call(ctx, "echo", args, nil, true); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("gateway", func(b *testing.B) {
		b.Run("in-memory", func(b *testing.B) { callEcho(b, inMemory(b, gw.Server()), args) })
		b.Run("http", func(b *testing.B) { callEcho(b, overHTTP(b, gw.Handler(false)), args) })
		b.Run("http-audited", func(b *testing.B) {
			log, err := sqlite.OpenAudit(ctx, filepath.Join(b.TempDir(), "audit.db"))
			if err != nil {
				b.Fatal(err)
			}
			defer log.Close()
			audited := startForBench(b, f, Options{Audit: log})
			callEcho(b, overHTTP(b, audited.Handler(false)), args)
		})
	})
}

// BenchmarkLatestHTTPUpstream is a call of a client of 2026-07-28, without
// sessions, through the gateway to an HTTP upstream of 2026-07-28.
func BenchmarkLatestHTTPUpstream(b *testing.B) {
	srv := echoUpstream(b, &mcp.StreamableHTTPOptions{Stateless: true})
	f, err := config.Parse("gateway.yaml", []byte("upstreams:\n  - name: echo\n    url: "+srv.URL+"\n"), func(string) (string, bool) { return "", false })
	if err != nil {
		b.Fatal(err)
	}
	gw := startForBench(b, f, Options{})
	front := httptest.NewServer(gw.Handler(true))
	b.Cleanup(front.Close)
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "bench"}, nil).Connect(context.Background(),
		&mcp.StreamableClientTransport{Endpoint: front.URL + MCPPath}, &mcp.ClientSessionOptions{ProtocolVersion: "2026-07-28"})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { cs.Close() })
	callEcho(b, cs, json.RawMessage(`{"text":"hello"}`))
}

// BenchmarkChildUpstream is a client's call through the gateway to a
// child over stdio, as interlock serve runs most upstreams, over HTTP for
// each protocol generation, and for a client of 2026-07-28 to a child of
// 2025-11-25 (legacy), whose calls the gateway holds (see held.go).
func BenchmarkChildUpstream(b *testing.B) {
	f := testConfig(b, "", "fx", "old:old_")
	f.Upstreams[1].Env["INTERLOCK_FIXTURE"] = "legacy"
	gw := startForBench(b, f, Options{})
	srv := httptest.NewServer(gw.Handler(false))
	b.Cleanup(srv.Close)
	for _, tc := range []struct{ name, version, tool string }{
		{"http-2025-11-25", "2025-11-25", "echo"},
		{"http-2026-07-28", "2026-07-28", "echo"},
		{"http-2026-07-28-legacy", "2026-07-28", "old_echo"},
	} {
		b.Run(tc.name, func(b *testing.B) {
			cs, err := mcp.NewClient(&mcp.Implementation{Name: "bench"}, nil).Connect(context.Background(),
				&mcp.StreamableClientTransport{Endpoint: srv.URL + MCPPath}, &mcp.ClientSessionOptions{ProtocolVersion: tc.version})
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { cs.Close() })
			callTool(b, cs, tc.tool, json.RawMessage(`{"text":"hello"}`))
		})
	}
}

// startForBench starts a gateway for f with dry run on.
func startForBench(b *testing.B, f *config.File, opts Options) *Gateway {
	opts.Logger, opts.Getenv = quiet, func(string) string { return "" }
	gw, err := New(f, opts)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { gw.Close() })
	if err := gw.Start(context.Background()); err != nil {
		b.Fatal(err)
	}
	return gw
}

// inMemory connects a client to s in memory.
func inMemory(b *testing.B, s *mcp.Server) *mcp.ClientSession {
	ctx := context.Background()
	st, ct := mcp.NewInMemoryTransports()
	if _, err := s.Connect(ctx, st, nil); err != nil {
		b.Fatal(err)
	}
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "bench"}, nil).Connect(ctx, ct, nil)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { cs.Close() })
	return cs
}

// overHTTP serves h on loopback and connects a client to it.
func overHTTP(b *testing.B, h http.Handler) *mcp.ClientSession {
	srv := httptest.NewServer(h)
	b.Cleanup(srv.Close)
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "bench"}, nil).Connect(context.Background(), &mcp.StreamableClientTransport{Endpoint: srv.URL + MCPPath}, &mcp.ClientSessionOptions{ProtocolVersion: "2025-11-25"})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { cs.Close() })
	return cs
}

// callEcho calls echo b.N times.
func callEcho(b *testing.B, cs *mcp.ClientSession, args json.RawMessage) {
	callTool(b, cs, "echo", args)
}

// callTool calls tool b.N times.
func callTool(b *testing.B, cs *mcp.ClientSession, tool string, args json.RawMessage) {
	b.ReportAllocs()
	for b.Loop() {
		res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: tool, Arguments: args})
		if err != nil || res.IsError {
			b.Fatal(res, err)
		}
	}
}
