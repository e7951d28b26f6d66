package gateway

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"runtime/pprof"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// TestListChangesOutliveOtherStreams: a client of 2026-07-28 on one
// session (as over stdio) keeps hearing list changes on its first
// subscriptions/listen stream however often it opens and closes others
// (each Subscribe and Unsubscribe of a resource is one), and the gateway
// holds no more for it the more often it does.
func TestListChangesOutliveOtherStreams(t *testing.T) {
	const uri = "memo://one"
	up := mcp.NewServer(&mcp.Implementation{Name: "memos"}, &mcp.ServerOptions{
		SubscribeHandler:   func(context.Context, *mcp.SubscribeRequest) error { return nil },
		UnsubscribeHandler: func(context.Context, *mcp.UnsubscribeRequest) error { return nil },
	})
	read := func(context.Context, *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
		return &mcp.ReadResourceResult{Contents: []*mcp.ResourceContents{{URI: uri, Text: "one"}}}, nil
	}
	up.AddResource(&mcp.Resource{URI: uri, Name: "one"}, read)
	var added atomic.Int64
	up.AddTool(&mcp.Tool{Name: "add", InputSchema: map[string]any{"type": "object"}, Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true}},
		func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			n := added.Add(1)
			up.AddResource(&mcp.Resource{URI: fmt.Sprintf("memo://added/%d", n), Name: "added"}, read)
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "added"}}}, nil
		})
	upSrv := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return up }, nil))
	t.Cleanup(upSrv.Close)
	gw := start(t, testConfig(t, "upstreams:\n  - {name: memos, url: "+upSrv.URL+"}\n"), "false")

	var changes atomic.Int64
	cs := client(t, gw, &mcp.ClientOptions{
		ResourceListChangedHandler: func(context.Context, *mcp.ResourceListChangedRequest) { changes.Add(1) },
	})
	if v := cs.InitializeResult().ProtocolVersion; v != protocolNew {
		t.Fatalf("the client speaks %s, want %s", v, protocolNew)
	}
	ctx := context.Background()
	// heard adds a resource upstream and waits for the change to reach
	// the client.
	heard := func(step string) {
		t.Helper()
		before := changes.Load()
		if res := call(t, cs, "add", map[string]any{}); res.IsError {
			t.Fatalf("%s: add: %+v", step, res)
		}
		deadline := time.Now().Add(5 * time.Second)
		for changes.Load() == before {
			if time.Now().After(deadline) {
				t.Fatalf("%s: no resources/list_changed within 5 s", step)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	cycle := func(n int) {
		for range n {
			if err := cs.Subscribe(ctx, &mcp.SubscribeParams{URI: uri}); err != nil {
				t.Fatal(err)
			}
			if err := cs.Unsubscribe(ctx, &mcp.UnsubscribeParams{URI: uri}); err != nil {
				t.Fatal(err)
			}
		}
	}
	// running counts the goroutines that run the SDK's handler again for
	// a stream: one at most for each stream still open.
	running := func() int {
		var buf bytes.Buffer
		_ = pprof.Lookup("goroutine").WriteTo(&buf, 2)
		n := 0
		for _, g := range strings.Split(buf.String(), "\n\n") {
			if strings.Contains(g, "(*listens).ended.func") {
				n++
			}
		}
		return n
	}

	heard("before any other stream")
	cycle(1)
	heard("after one stream opened and closed")
	cycle(5)
	heard("after six")
	cycle(60)
	heard("after sixty-six")
	// Left to themselves, the runs for the first stream would be sixty;
	// the last stream closed may still be winding down.
	open := func() int {
		gw.listens.mu.Lock()
		defer gw.listens.mu.Unlock()
		n := 0
		for _, streams := range gw.listens.open {
			n += len(streams)
		}
		return n
	}
	deadline := time.Now().Add(2 * time.Second)
	for running() != 1 || open() != 1 {
		if time.Now().After(deadline) {
			t.Fatalf("%d goroutines run the SDK's handler again and the gateway keeps %d streams; want 1 and 1, for the one stream open",
				running(), open())
		}
		time.Sleep(20 * time.Millisecond)
	}
}
