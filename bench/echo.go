package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/interlock-mcp/interlock/internal/pollable"
)

// nopCloser leaves standard output open when the session closes, as the
// SDK's StdioTransport does.
type nopCloser struct{ io.Writer }

func (nopCloser) Close() error { return nil }

type echoArgs struct {
	Text string `json:"text"`
}

// echoServer is the upstream: "echo" is read-only, "echo_write" is
// destructive (gated by interlock's policy), both answer their argument.
func echoServer() *mcp.Server {
	s := mcp.NewServer(&mcp.Implementation{Name: "bench-echo", Version: "1"}, nil)
	handler := func(_ context.Context, _ *mcp.CallToolRequest, in echoArgs) (*mcp.CallToolResult, map[string]string, error) {
		return nil, map[string]string{"text": in.Text}, nil
	}
	mcp.AddTool(s, &mcp.Tool{Name: "echo", Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true}}, handler)
	destructive := true
	mcp.AddTool(s, &mcp.Tool{Name: "echo_write", Annotations: &mcp.ToolAnnotations{DestructiveHint: &destructive}}, handler)
	return s
}

// serveEcho runs the echo server on stdio, or on HTTP with -http (printing
// its address on standard output).
func serveEcho(args []string) {
	fs := flag.NewFlagSet("echo", flag.ExitOnError)
	httpAddr := fs.String("http", "", "serve streamable HTTP on this address instead of stdio")
	stateless := fs.Bool("stateless", false, "streamable HTTP without sessions")
	fs.Parse(args)
	s := echoServer()
	if *httpAddr == "" {
		// Through the poller, as interlock reads its own stdin: the SDK's
		// StdioTransport reads os.Stdin in blocking mode, and the runtime
		// would now and then stall this server until the next request
		// (see internal/pollable), which the soak would count as a lost
		// answer of the variant measured.
		in := pollable.Open(os.Stdin)
		check(s.Run(context.Background(), &mcp.IOTransport{Reader: in, Writer: nopCloser{os.Stdout}}))
		return
	}
	ln, err := net.Listen("tcp", *httpAddr)
	check(err)
	fmt.Printf("http://%s/mcp\n", ln.Addr())
	os.Stdout.Sync()
	h := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s }, &mcp.StreamableHTTPOptions{Stateless: *stateless})
	mux := http.NewServeMux()
	mux.Handle("/mcp", h)
	check(http.Serve(ln, mux))
}
