package gateway

import (
	"context"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// countingPicker answers every question it is asked, and counts them.
type countingPicker struct {
	mu    sync.Mutex
	asked int
}

func (p *countingPicker) answer(context.Context, *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
	p.mu.Lock()
	p.asked++
	p.mu.Unlock()
	return &mcp.ElicitResult{Action: "accept", Content: map[string]any{"color": "blue"}}, nil
}

func (p *countingPicker) count() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.asked
}

// TestQuestionRouting: a question an upstream pushes during a call goes to
// the client whose call it is. On the shared link that is known while that
// client's calls are the only ones in flight; while another client's call
// is too, nobody is asked and the upstream is answered cancel. With
// per_client each client's link is its own, so its client is always known.
func TestQuestionRouting(t *testing.T) {
	for _, tc := range []struct {
		name      string
		perClient bool
		busyOther bool   // another client has a call in flight meanwhile
		want      string // what the upstream's tool answers
		askedA    int    // questions the caller's human saw
	}{
		{"shared link, one call in flight", false, false, "pushed=accept:blue", 1},
		{"shared link, another client's call in flight", false, true, "pushed=cancel:", 0},
		{"per_client, another client's call in flight", true, true, "pushed=accept:blue", 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := testConfig(t, "", "fx")
			f.Upstreams[0].Env["INTERLOCK_FIXTURE"] = "legacy"
			f.Upstreams[0].PerClient = tc.perClient
			gw := start(t, f, "false")
			srv := httptest.NewServer(gw.Handler(false))
			// Registered first, so it runs after the sessions are closed.
			t.Cleanup(srv.Close)
			connect := func(p *countingPicker) *mcp.ClientSession {
				return dial(t, mcp.NewClient(&mcp.Implementation{Name: "c"}, &mcp.ClientOptions{ElicitationHandler: p.answer}),
					srv.URL+MCPPath, "", &mcp.ClientSessionOptions{ProtocolVersion: "2025-11-25"})
			}
			var a, b countingPicker
			csA, csB := connect(&a), connect(&b)
			var wg sync.WaitGroup
			if tc.busyOther {
				started := make(chan struct{})
				wg.Add(1)
				go func() {
					defer wg.Done()
					close(started)
					call(t, csB, "slow", map[string]any{"ms": 1500})
				}()
				<-started
				// The other call is in flight once the gateway tracks it.
				eventually(t, "the other call in flight", func() bool { return callsInFlight(gw) == 1 })
			}
			res := call(t, csA, "ask_push", map[string]any{})
			wg.Wait()
			if res.IsError || res.Content[0].(*mcp.TextContent).Text != tc.want {
				t.Errorf("ask_push = %+v, want %q", res.Content[0], tc.want)
			}
			if a.count() != tc.askedA || b.count() != 0 {
				t.Errorf("asked: caller %d, other %d; want %d, 0", a.count(), b.count(), tc.askedA)
			}
		})
	}
}

// TestRootsAskedAsTheLinkOpens: an upstream that asks for roots as soon as
// a client's own link is made (server-filesystem does) has its question
// carried on the stream of the call that made the link, and hears the
// answer even when it answered that call first, so the call's stream
// ended before the client's answer came.
func TestRootsAskedAsTheLinkOpens(t *testing.T) {
	f := testConfig(t, "", "fx")
	f.Upstreams[0].Env["INTERLOCK_FIXTURE"] = "legacy"
	f.Upstreams[0].Env["INTERLOCK_FIXTURE_ROOTS"] = "1"
	f.Upstreams[0].PerClient = true
	gw := start(t, f, "false")
	srv := httptest.NewServer(gw.Handler(false))
	t.Cleanup(srv.Close)
	client := mcp.NewClient(&mcp.Implementation{Name: "c"}, nil)
	client.AddRoots(&mcp.Root{URI: "file:///work/project"})
	cs := dial(t, client, srv.URL+MCPPath, "", &mcp.ClientSessionOptions{ProtocolVersion: "2025-11-25"})
	// The first call makes the link; the fixture answers it at once.
	if res := call(t, cs, "echo", map[string]any{}); res.IsError {
		t.Fatalf("echo: %+v", res.Content)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		seen := call(t, cs, "roots_seen", map[string]any{}).Content[0].(*mcp.TextContent).Text
		if seen == "file:///work/project" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the upstream's roots: %q, want the client's", seen)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// callsInFlight counts the calls in flight on the gateway's upstreams.
func callsInFlight(gw *Gateway) int {
	n := 0
	for _, u := range gw.upstreams {
		u.flights.mu.Lock()
		n += len(u.flights.all)
		u.flights.mu.Unlock()
	}
	return n
}
