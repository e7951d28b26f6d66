package gateway

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"runtime"
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
	// settled is the number of goroutines once the streams closed have
	// wound down.
	settled := func() int {
		time.Sleep(200 * time.Millisecond)
		runtime.GC()
		return runtime.NumGoroutine()
	}

	heard("before any other stream")
	cycle(1)
	heard("after one stream opened and closed")
	cycle(5)
	heard("after six")
	base := settled()
	cycle(30)
	heard("after thirty-six")
	if now := settled(); now > base+5 {
		t.Errorf("goroutines grew from %d to %d over 30 streams opened and closed", base, now)
	}
}
