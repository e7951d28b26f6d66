package gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/interlock-mcp/interlock"
	"github.com/interlock-mcp/interlock/config"
)

// httpUpstream serves a small MCP server over streamable HTTP that answers
// only requests carrying the right API key.
func httpUpstream(t *testing.T) *httptest.Server {
	t.Helper()
	s := mcp.NewServer(&mcp.Implementation{Name: "remote"}, nil)
	no := false
	s.AddTool(&mcp.Tool{Name: "close_ticket", InputSchema: map[string]any{"type": "object"},
		Annotations: &mcp.ToolAnnotations{DestructiveHint: &no}},
		func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "closed"}}}, nil
		})
	h := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s }, nil)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer remote-key" {
			http.Error(w, "unauthorized", http.StatusUnauthorized)
			return
		}
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	return srv
}

func TestHTTPUpstream(t *testing.T) {
	srv := httpUpstream(t)
	lookup := func(k string) (string, bool) {
		if k == "REMOTE_KEY" {
			return "remote-key", true
		}
		return "", false
	}
	f, err := config.Parse("gateway.yaml", []byte(`
upstreams:
  - name: remote
    url: `+srv.URL+`
    headers: {Authorization: "Bearer ${REMOTE_KEY}"}
    prefix: remote_
`), lookup)
	if err != nil {
		t.Fatal(err)
	}
	gw := start(t, f, "false")
	cs := client(t, gw, nil)
	if _, ok := listTools(t, cs)["remote_close_ticket"]; !ok {
		t.Fatal("the HTTP upstream's tool is not mirrored")
	}
	if b := body(t, call(t, cs, "remote_close_ticket", map[string]any{})); b.Code != interlock.CodeDryRunPreview {
		t.Errorf("unconfirmed: %s", b.Code)
	}
	res := call(t, cs, "remote_close_ticket", map[string]any{"__confirm": true})
	if res.IsError || res.Content[0].(*mcp.TextContent).Text != "closed" {
		t.Errorf("confirmed: %+v", res)
	}

	t.Run("a wrong key is a clear startup error", func(t *testing.T) {
		f, _ := config.Parse("gateway.yaml", []byte("upstreams:\n  - name: remote\n    url: "+srv.URL+"\n    headers: {Authorization: Bearer nope}\n"), lookup)
		gw := newGateway(t, f, Options{Logger: quiet})
		defer gw.Close()
		if err := startError(gw, "remote"); err == nil || !strings.Contains(err.Error(), `upstream "remote"`) || !strings.Contains(err.Error(), srv.URL) {
			t.Errorf("check = %v", err)
		}
	})
	t.Run("an upstream that went away is UPSTREAM_UNAVAILABLE", func(t *testing.T) {
		srv.CloseClientConnections()
		srv.Close()
		b := body(t, call(t, cs, "remote_close_ticket", map[string]any{"__confirm": true}))
		if b.Code != interlock.CodeUpstreamUnavailable || !b.Retriable {
			t.Errorf("body = %+v", b)
		}
	})
}

func TestUpstreamConfigErrors(t *testing.T) {
	tests := []struct{ src, want string }{
		{"upstreams:\n  - {name: a, url: 'ftp://x'}\n", `url "ftp://x" must be an http:// or https:// URL`},
		{"upstreams:\n  - {name: a, url: 'https://x/mcp', command: [x]}\n", "has both command and url"},
		{"upstreams:\n  - {name: a, url: 'https://x/mcp', dir: /tmp}\n", "env, inherit_env and dir apply only to a command"},
		{"upstreams:\n  - {name: a, command: [x], headers: {A: b}}\n", "headers apply only to a url"},
		{"upstreams:\n  - {name: a, url: 'https://x/mcp', headers: {A: '${NOPE}'}}\n", "headers A refers to ${NOPE}"},
	}
	for _, tt := range tests {
		_, err := config.Parse("p.yaml", []byte(tt.src), func(string) (string, bool) { return "", false })
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("Parse(%q) = %v, want %q", tt.src, err, tt.want)
		}
	}
}

// TestRedirectsKeepCredentialsHome: an HTTP upstream that redirects to
// another origin does not get its configured headers sent there; a
// redirect within its own origin is followed.
func TestRedirectsKeepCredentialsHome(t *testing.T) {
	remote := httpUpstream(t)
	// leaked records every Authorization header a redirect target saw.
	var leakedMu sync.Mutex
	var leaked []string
	catch := func(w http.ResponseWriter, r *http.Request) {
		leakedMu.Lock()
		leaked = append(leaked, r.Header.Get("Authorization"))
		leakedMu.Unlock()
		http.Error(w, "gone", http.StatusNotFound)
	}
	elsewhere := httptest.NewServer(http.HandlerFunc(catch))
	defer elsewhere.Close()
	target, _ := url.Parse(remote.URL)
	proxy := &httputil.ReverseProxy{Rewrite: func(r *httputil.ProxyRequest) { r.SetURL(target) }, FlushInterval: -1}
	front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, port, _ := net.SplitHostPort(r.Host)
		switch r.URL.Path {
		case "/to-other-port":
			http.Redirect(w, r, elsewhere.URL+"/mcp", http.StatusTemporaryRedirect)
		case "/to-other-host":
			// The same server under another name is another origin.
			http.Redirect(w, r, "http://localhost:"+port+"/catch", http.StatusTemporaryRedirect)
		case "/to-other-scheme":
			http.Redirect(w, r, "https://127.0.0.1:"+port+"/catch", http.StatusTemporaryRedirect)
		case "/catch":
			catch(w, r)
		case "/same-origin":
			http.Redirect(w, r, "/mcp", http.StatusTemporaryRedirect)
		case "/mcp":
			proxy.ServeHTTP(w, r)
		}
	}))
	defer front.Close()
	lookup := func(string) (string, bool) { return "", false }
	tests := []struct {
		path    string
		follows bool
	}{
		{"/to-other-port", false},
		{"/to-other-host", false},
		{"/to-other-scheme", false},
		{"/same-origin", true},
	}
	for _, tt := range tests {
		t.Run(tt.path, func(t *testing.T) {
			leakedMu.Lock()
			leaked = nil
			leakedMu.Unlock()
			f, err := config.Parse("gateway.yaml", []byte("upstreams:\n  - name: remote\n    url: "+front.URL+tt.path+
				"\n    headers: {Authorization: Bearer remote-key}\n"), lookup)
			if err != nil {
				t.Fatal(err)
			}
			var logs logBuffer
			gw := newGateway(t, f, Options{Logger: logs.logger()})
			defer gw.Close()
			err = startError(gw, "remote")
			leakedMu.Lock()
			defer leakedMu.Unlock()
			for _, h := range leaked {
				if h != "" {
					t.Errorf("the redirect target received Authorization %q", h)
				}
			}
			if tt.follows {
				if err != nil || gw.ToolCounts()["remote"] != 1 {
					t.Errorf("same-origin redirect: check = %v, tools %v", err, gw.ToolCounts())
				}
				return
			}
			if err == nil {
				t.Fatal("connected through a redirect to another origin")
			}
			if !strings.Contains(logs.String(), "refused a redirect to another origin") {
				t.Errorf("no log line says the redirect was refused:\n%s", logs.String())
			}
		})
	}
}

func TestOrigins(t *testing.T) {
	tests := []struct {
		a, b string
		same bool
	}{
		{"https://mcp.example.com/mcp", "https://mcp.example.com:443/other", true},
		{"http://MCP.example.com/mcp", "http://mcp.example.com:80/", true},
		{"https://mcp.example.com/mcp", "http://mcp.example.com/mcp", false},
		{"https://mcp.example.com/mcp", "https://mcp.example.com:8443/mcp", false},
		{"https://mcp.example.com/mcp", "https://evil.example.com/mcp", false},
		{"https://mcp.example.com/mcp", "https://mcp.example.com.evil.net/mcp", false},
		{"http://[::1]:8080/mcp", "http://[::1]:8080/x", true},
	}
	for _, tt := range tests {
		a, _ := url.Parse(tt.a)
		b, _ := url.Parse(tt.b)
		if got := sameOrigin(a, b); got != tt.same {
			t.Errorf("sameOrigin(%s, %s) = %v, want %v", tt.a, tt.b, got, tt.same)
		}
	}
}

// TestUpstreamConnectionPool: each HTTP upstream has its own pool, sized
// for concurrent calls, never net/http's shared default.
func TestUpstreamConnectionPool(t *testing.T) {
	a := &upstream{cfg: &config.Upstream{Name: "a", URL: "https://a.example/mcp"}}
	b := &upstream{cfg: &config.Upstream{Name: "b", URL: "https://b.example/mcp"}}
	poolOf := func(u *upstream) *http.Transport {
		c := u.httpClient()
		if c != u.httpClient() {
			t.Errorf("%s: a new client per connection", u.cfg.Name)
		}
		return c.Transport.(extrasTrip).next.(ownerTrip).next.(refusalTrip).next.(withHeaders).next.(*http.Transport)
	}
	pa, pb := poolOf(a), poolOf(b)
	if pa == http.DefaultTransport || pa == pb {
		t.Error("upstreams share a connection pool")
	}
	if pa.MaxIdleConnsPerHost != maxIdleConnsPerUpstream {
		t.Errorf("MaxIdleConnsPerHost = %d", pa.MaxIdleConnsPerHost)
	}
}

// floodLog counts, for each session of a floodServer, its calls of flood
// and the tools/list requests sent on it after the first call.
type floodLog struct {
	mu     sync.Mutex
	called map[string]int
	lists  map[string]int
}

// floodServer is an HTTP upstream of 2025-11-25 whose one tool, flood,
// sends n notifications/tools/list_changed on the call's stream before its
// result, as a broken or hostile server may.
func floodServer(t *testing.T, n int, log *floodLog) *httptest.Server {
	var sessions atomic.Int64
	log.called, log.lists = map[string]int{}, map[string]int{}
	return handRolledUpstream(t, func(w http.ResponseWriter, r *http.Request, id json.RawMessage, method string, _ []byte) {
		session := r.Header.Get("Mcp-Session-Id")
		w.Header().Set("Content-Type", "application/json")
		switch method {
		case "initialize":
			w.Header().Set("Mcp-Session-Id", fmt.Sprintf("flood-%d", sessions.Add(1)))
			fmt.Fprintf(w, `{"jsonrpc":"2.0","id":%s,"result":{"protocolVersion":"2025-11-25","capabilities":{"tools":{"listChanged":true}},"serverInfo":{"name":"flood","version":"1"}}}`, id)
		case "tools/list":
			log.mu.Lock()
			if log.called[session] > 0 {
				log.lists[session]++
			}
			log.mu.Unlock()
			fmt.Fprintf(w, `{"jsonrpc":"2.0","id":%s,"result":{"tools":[{"name":"flood","inputSchema":{"type":"object"},"annotations":{"readOnlyHint":true}}]}}`, id)
		case "tools/call":
			log.mu.Lock()
			log.called[session]++
			log.mu.Unlock()
			w.Header().Set("Content-Type", "text/event-stream")
			for range n {
				fmt.Fprint(w, "event: message\ndata: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/tools/list_changed\"}\n\n")
			}
			fmt.Fprintf(w, "event: message\ndata: {\"jsonrpc\":\"2.0\",\"id\":%s,\"result\":{\"content\":[{\"type\":\"text\",\"text\":\"flooded\"}]}}\n\n", id)
		default:
			fmt.Fprintf(w, `{"jsonrpc":"2.0","id":%s,"result":{}}`, id)
		}
	})
}

// TestToolListChangeFlood: an upstream that says its tool list changed a
// thousand times in a burst is listed again a few times, not a thousand:
// changes heard while a link's tools are being listed are answered by one
// more listing, after that one. Two tenants whose links are their own
// flood at once, and each link is listed again, apart from the other.
func TestToolListChangeFlood(t *testing.T) {
	for _, tt := range []struct {
		name      string
		perClient bool
		clients   int
	}{{"one shared link", false, 1}, {"two tenants on links of their own", true, 2}} {
		t.Run(tt.name, func(t *testing.T) {
			var log floodLog
			_, url := httpGateway(t, floodServer(t, 1000, &log).URL, tt.perClient, "")
			var sessions []*mcp.ClientSession
			for _, key := range []string{"alice-key", "other-alice-key"}[:tt.clients] {
				// Clients before 2026-07-28 on sessions, which per_client
				// gives links of their own.
				sessions = append(sessions, dial(t, nil, url, key, &mcp.ClientSessionOptions{ProtocolVersion: "2025-11-25"}))
			}
			began := time.Now()
			var wg sync.WaitGroup
			for _, cs := range sessions {
				wg.Go(func() {
					if res, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: "flood", Arguments: map[string]any{}}); err != nil || res.IsError {
						t.Errorf("flood: %v %+v", err, res)
					}
				})
			}
			wg.Wait()
			// Wait for the listings the bursts set off to end: one at once,
			// then at most one a relistGap for as long as changes are heard.
			listed := func() string {
				log.mu.Lock()
				defer log.mu.Unlock()
				return fmt.Sprint(log.lists)
			}
			for last := ""; last != listed(); {
				last = listed()
				time.Sleep(300 * time.Millisecond)
			}
			most := 1 + int(time.Since(began)/relistGap)
			for _, cs := range sessions {
				if _, ok := listTools(t, cs)["flood"]; !ok {
					t.Error("flood is no longer listed")
				}
			}
			log.mu.Lock()
			defer log.mu.Unlock()
			if len(log.called) != tt.clients {
				t.Fatalf("the calls came on sessions %v, want %d", log.called, tt.clients)
			}
			for session := range log.called {
				if got := log.lists[session]; got < 1 || got > most {
					t.Errorf("session %s was listed %d times after a burst of 1000 changes, want 1 to %d", session, got, most)
				}
			}
		})
	}
}

// TestToolsChangedCoalesces: changes heard every millisecond for a second
// set off one listing at once and then at most one per relistGap, the last
// of them after the last change.
func TestToolsChangedCoalesces(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		life, stop := context.WithCancel(t.Context())
		defer stop()
		var lists []time.Time
		var mu sync.Mutex
		u := &upstream{life: life, onToolsChanged: func(*upstream, *mcp.ClientSession) {
			mu.Lock()
			lists = append(lists, time.Now())
			mu.Unlock()
			time.Sleep(5 * time.Millisecond)
		}}
		start := time.Now()
		for range 1000 {
			u.toolsChanged(nil)
			time.Sleep(time.Millisecond)
		}
		last := time.Now()
		time.Sleep(time.Second)
		synctest.Wait()
		mu.Lock()
		defer mu.Unlock()
		if len(lists) < 2 || len(lists) > 1+int(last.Sub(start)/relistGap)+1 || lists[0] != start || !lists[len(lists)-1].After(last.Add(-time.Millisecond)) {
			t.Errorf("listed at %v for changes from %v to %v", lists, start, last)
		}
	})
}
