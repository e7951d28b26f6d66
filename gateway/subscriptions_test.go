package gateway

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// updates collects the resources/updated notifications a client hears.
type updates struct {
	mu   sync.Mutex
	uris []string
}

func (u *updates) add(_ context.Context, req *mcp.ResourceUpdatedNotificationRequest) {
	u.mu.Lock()
	u.uris = append(u.uris, req.Params.URI)
	u.mu.Unlock()
}

func (u *updates) count() int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return len(u.uris)
}

// TestResourceUpdatesReachEverySubscriber: interlock subscribes upstream
// once for a URI, and an update reaches every client session subscribed
// to it, and no other; one that unsubscribes hears no more.
func TestResourceUpdatesReachEverySubscriber(t *testing.T) {
	const uri = "memo://one"
	up := mcp.NewServer(&mcp.Implementation{Name: "memos"}, &mcp.ServerOptions{
		SubscribeHandler:   func(context.Context, *mcp.SubscribeRequest) error { return nil },
		UnsubscribeHandler: func(context.Context, *mcp.UnsubscribeRequest) error { return nil },
	})
	up.AddResource(&mcp.Resource{URI: uri, Name: "one"}, func(context.Context, *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
		return &mcp.ReadResourceResult{Contents: []*mcp.ResourceContents{{URI: uri, Text: "one"}}}, nil
	})
	up.AddTool(&mcp.Tool{Name: "touch", InputSchema: map[string]any{"type": "object"}, Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true}},
		func(ctx context.Context, _ *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			if err := up.ResourceUpdated(ctx, &mcp.ResourceUpdatedNotificationParams{URI: uri}); err != nil {
				return nil, err
			}
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "touched"}}}, nil
		})
	upSrv := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return up }, nil))
	t.Cleanup(upSrv.Close)
	gw := start(t, testConfig(t, "upstreams:\n  - {name: memos, url: "+upSrv.URL+"}\n"), "false")
	srv := httptest.NewServer(gw.Handler(false))
	t.Cleanup(srv.Close)
	connect := func(u *updates) *mcp.ClientSession {
		return dial(t, mcp.NewClient(&mcp.Implementation{Name: "c"}, &mcp.ClientOptions{ResourceUpdatedHandler: u.add}),
			srv.URL+MCPPath, "", &mcp.ClientSessionOptions{ProtocolVersion: "2025-11-25"})
	}
	var a, b, c updates
	csA, csB := connect(&a), connect(&b)
	connect(&c)
	ctx := context.Background()
	for _, cs := range []*mcp.ClientSession{csA, csB} {
		if err := cs.Subscribe(ctx, &mcp.SubscribeParams{URI: uri}); err != nil {
			t.Fatal(err)
		}
	}
	// heard waits until each of want has heard its count, up to 5 s.
	heard := func(step string, want map[*updates]int) {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for {
			ok := true
			for u, n := range want {
				ok = ok && u.count() == n
			}
			if ok {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: updates heard: a %d, b %d, c %d; want a %d, b %d, c %d",
					step, a.count(), b.count(), c.count(), want[&a], want[&b], want[&c])
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	for _, step := range []struct {
		name        string
		unsubscribe *mcp.ClientSession
		a, b        int // updates heard so far
	}{
		{"both subscribed", nil, 1, 1},
		{"a unsubscribed", csA, 1, 2},
	} {
		if step.unsubscribe != nil {
			if err := step.unsubscribe.Unsubscribe(ctx, &mcp.UnsubscribeParams{URI: uri}); err != nil {
				t.Fatal(err)
			}
		}
		if res := call(t, csB, "touch", map[string]any{}); res.IsError {
			t.Fatalf("%s: touch: %+v", step.name, res)
		}
		heard(step.name, map[*updates]int{&a: step.a, &b: step.b, &c: 0})
	}
	// Nothing more arrives late to a session that should not hear it.
	time.Sleep(200 * time.Millisecond)
	heard("in the end", map[*updates]int{&a: 1, &b: 2, &c: 0})
}
