package main

import (
	"context"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"runtime/debug"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// serveSDKProxy runs the least a proxy built on the go-sdk can do: a server
// on HTTP whose one tool, echo, forwards each call through a client session
// to the upstream at -upstream and answers what came back. No policy, no
// audit, no resilience, and interlock's collector target: it is the floor of what the SDK's two legs cost, the
// figure interlock's own work is measured above.
func serveSDKProxy(args []string) {
	fs := flag.NewFlagSet("sdkproxy", flag.ExitOnError)
	httpAddr := fs.String("http", "127.0.0.1:0", "address to serve streamable HTTP on")
	upstream := fs.String("upstream", "", "the upstream's MCP URL")
	fs.Parse(args)
	// The same collector target as interlock serve, so that the two
	// differ only in what they do per call.
	debug.SetGCPercent(400)
	ctx := context.Background()
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "sdkproxy"}, nil).Connect(ctx, &mcp.StreamableClientTransport{Endpoint: *upstream}, nil)
	check(err)
	s := mcp.NewServer(&mcp.Implementation{Name: "sdkproxy", Version: "1"}, nil)
	s.AddTool(&mcp.Tool{Name: "echo", InputSchema: map[string]any{"type": "object"}, Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true}},
		func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return cs.CallTool(ctx, &mcp.CallToolParams{Name: req.Params.Name, Arguments: req.Params.Arguments})
		})
	ln, err := net.Listen("tcp", *httpAddr)
	check(err)
	fmt.Printf("http://%s/mcp\n", ln.Addr())
	os.Stdout.Sync()
	mux := http.NewServeMux()
	mux.Handle("/mcp", mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s }, nil))
	check(http.Serve(ln, mux))
}
