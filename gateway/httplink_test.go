package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/interlock-mcp/interlock"
	"github.com/interlock-mcp/interlock/config"
)

// TestHTTPSessionRequest drives the gateway's own requests on an HTTP
// upstream's session against upstreams that answer well and badly: the
// answer is found in a JSON body or on the request's event stream past
// what comes before it, a question on the stream that belongs to no one
// is answered cancel, and every way of not answering is an error, never a
// result.
func TestHTTPSessionRequest(t *testing.T) {
	for _, c := range []struct {
		name string
		// answer writes the upstream's answer to the request whose id is id.
		answer  func(w http.ResponseWriter, id string)
		want    string // the result, when one is wanted
		wantErr string // what the error says, otherwise
	}{
		{"JSON body", func(w http.ResponseWriter, id string) {
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprintf(w, `{"jsonrpc":"2.0","id":%s,"result":{"ok":1}}`, id)
		}, `{"ok":1}`, ""},
		{"event stream past a notification and another id", func(w http.ResponseWriter, id string) {
			w.Header().Set("Content-Type", "text/event-stream")
			fmt.Fprint(w, "event: message\ndata: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/message\",\"params\":{\"level\":\"info\",\"data\":\"x\"}}\n\n")
			fmt.Fprint(w, "data: {\"jsonrpc\":\"2.0\",\"id\":\"someone-else\",\"result\":{\"no\":1}}\n\n")
			fmt.Fprint(w, "data: not json\n\n")
			fmt.Fprintf(w, "data: {\"jsonrpc\":\"2.0\",\"id\":%s,\"result\":{\"ok\":2}}\n\n", id)
		}, `{"ok":2}`, ""},
		{"JSON-RPC error", func(w http.ResponseWriter, id string) {
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprintf(w, `{"jsonrpc":"2.0","id":%s,"error":{"code":-32602,"message":"no such task"}}`, id)
		}, "", "no such task"},
		{"stream that ends without the answer", func(w http.ResponseWriter, id string) {
			w.Header().Set("Content-Type", "text/event-stream")
			fmt.Fprint(w, "data: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\",\"params\":{}}\n\n")
		}, "", "ended without its answer"},
		{"answer to another request", func(w http.ResponseWriter, id string) {
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprint(w, `{"jsonrpc":"2.0","id":"interlock-0","result":{}}`)
		}, "", "not the answer to the request"},
		{"not JSON-RPC", func(w http.ResponseWriter, id string) {
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprint(w, `<html>`)
		}, "", "not a JSON-RPC message"},
		{"HTTP error", func(w http.ResponseWriter, id string) {
			http.Error(w, "boom", http.StatusInternalServerError)
		}, "", "HTTP 500"},
		{"message larger than the bound", func(w http.ResponseWriter, id string) {
			w.Header().Set("Content-Type", "text/event-stream")
			fmt.Fprintf(w, "data: {\"jsonrpc\":\"2.0\",\"id\":%s,\"result\":{\"big\":\"%s\"}}\n\n", id, strings.Repeat("x", maxUpstreamMessage))
		}, "", "ended without its answer"},
	} {
		t.Run(c.name, func(t *testing.T) {
			var headers http.Header
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				headers = r.Header.Clone()
				var m struct {
					ID json.RawMessage `json:"id"`
				}
				b, _ := io.ReadAll(r.Body)
				_ = json.Unmarshal(b, &m)
				c.answer(w, string(m.ID))
			}))
			defer srv.Close()
			h := &httpSession{u: &upstream{cfg: &config.Upstream{Name: "h", URL: srv.URL}}, id: "s-1", protocol: "2025-11-25"}
			res, err := h.request(context.Background(), "tasks/get", json.RawMessage(`{"taskId":"u-1"}`))
			if c.wantErr == "" {
				if err != nil || string(res) != c.want {
					t.Fatalf("request = %s, %v; want %s", res, err, c.want)
				}
			} else if err == nil || !strings.Contains(err.Error(), c.wantErr) {
				t.Fatalf("request = %s, %v; want an error saying %q", res, err, c.wantErr)
			}
			if headers.Get(sessionIDHeader) != "s-1" || headers.Get(protocolVersionHeader) != "2025-11-25" {
				t.Errorf("headers %v; want the session's id and protocol version", headers)
			}
		})
	}
	t.Run("a question on the stream that belongs to no one is answered cancel", func(t *testing.T) {
		replied := make(chan *jsonrpc.Response, 1)
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			b, _ := io.ReadAll(r.Body)
			m, err := jsonrpc.DecodeMessage(b)
			if err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			if resp, ok := m.(*jsonrpc.Response); ok {
				replied <- resp
				w.WriteHeader(http.StatusAccepted)
				return
			}
			id, _ := json.Marshal(m.(*jsonrpc.Request).ID.Raw())
			w.Header().Set("Content-Type", "text/event-stream")
			fmt.Fprint(w, "data: {\"jsonrpc\":\"2.0\",\"id\":7,\"method\":\"elicitation/create\",\"params\":{\"message\":\"which?\",\"requestedSchema\":{\"type\":\"object\"}}}\n\n")
			w.(http.Flusher).Flush()
			// The answer comes once the question was answered.
			reply := <-replied
			replied <- reply
			fmt.Fprintf(w, "data: {\"jsonrpc\":\"2.0\",\"id\":%s,\"result\":{\"ok\":3}}\n\n", id)
		}))
		defer srv.Close()
		h := &httpSession{u: &upstream{cfg: &config.Upstream{Name: "h", URL: srv.URL}}}
		res, err := h.request(context.Background(), "tasks/result", json.RawMessage(`{"taskId":"u-1"}`))
		if err != nil || string(res) != `{"ok":3}` {
			t.Fatalf("request = %s, %v", res, err)
		}
		reply := <-replied
		var answer mcp.ElicitResult
		if reply.Error != nil || json.Unmarshal(reply.Result, &answer) != nil || answer.Action != "cancel" {
			t.Fatalf("the question was answered %+v; want cancel", reply)
		}
		if id, _ := reply.ID.Raw().(int64); id != 7 {
			t.Errorf("the answer names request %v; want 7", reply.ID.Raw())
		}
	})
	t.Run("a request the gateway does not carry there", func(t *testing.T) {
		replied := make(chan *jsonrpc.Response, 1)
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			b, _ := io.ReadAll(r.Body)
			m, _ := jsonrpc.DecodeMessage(b)
			if resp, ok := m.(*jsonrpc.Response); ok {
				if bytes.Contains(b, []byte(`"result"`)) {
					t.Errorf("an error answer with a result: %s", b)
				}
				replied <- resp
				w.WriteHeader(http.StatusAccepted)
				return
			}
			w.Header().Set("Content-Type", "text/event-stream")
			fmt.Fprint(w, "data: {\"jsonrpc\":\"2.0\",\"id\":8,\"method\":\"tasks/list\",\"params\":{}}\n\n")
			w.(http.Flusher).Flush()
		}))
		defer srv.Close()
		h := &httpSession{u: &upstream{cfg: &config.Upstream{Name: "h", URL: srv.URL}}}
		_, err := h.request(context.Background(), "tasks/result", json.RawMessage(`{"taskId":"u-1"}`))
		if !errors.Is(err, mcp.ErrConnectionClosed) {
			t.Fatalf("request: %v; want the stream's end", err)
		}
		got := <-replied
		if rpcErr, ok := errors.AsType[*jsonrpc.Error](got.Error); !ok || rpcErr.Code != jsonrpc.CodeMethodNotFound {
			t.Fatalf("the request was answered %+v; want method not found", got)
		}
	})
}

// statelessUpstream serves over streamable HTTP without sessions (so it
// speaks 2026-07-28 to a link that asks for it) a tool "exact", whose
// result holds a number a decoding into Go values would round and the
// call's n, and a tool "headed", whose region argument the SDK's client
// must also send in an Mcp-Param-Region header. seen keeps the headers of
// each tools/call the upstream served.
func statelessUpstream(t *testing.T, seen chan<- http.Header) string {
	t.Helper()
	s := mcp.NewServer(&mcp.Implementation{Name: "stateless"}, nil)
	readOnly := &mcp.ToolAnnotations{ReadOnlyHint: true}
	s.AddTool(&mcp.Tool{Name: "exact", Annotations: readOnly,
		InputSchema: map[string]any{"type": "object", "properties": map[string]any{"n": map[string]any{"type": "integer"}}}},
		func(_ context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			var args struct{ N int }
			_ = json.Unmarshal(req.Params.Arguments, &args)
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: fmt.Sprint(args.N)}},
				StructuredContent: json.RawMessage(fmt.Sprintf(`{"id":12345678901234567891,"n":%d}`, args.N))}, nil
		})
	s.AddTool(&mcp.Tool{Name: "headed", Annotations: readOnly,
		InputSchema: map[string]any{"type": "object", "properties": map[string]any{"region": map[string]any{"type": "string", "x-mcp-header": "Region"}}}},
		func(_ context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "headed"}}}, nil
		})
	h := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s }, &mcp.StreamableHTTPOptions{Stateless: true})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Mcp-Method") == "tools/call" {
			select {
			case seen <- r.Header.Clone():
			default:
			}
		}
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

// TestLatestHTTPLinkIsRaw: a tool's result from an HTTP upstream of
// 2026-07-28 reaches clients of either generation, with sessions and
// without, as the upstream wrote it, two tenants calling at once each
// getting their own; the call carries the headers and _meta the protocol
// asks of it (the upstream's SDK refuses it otherwise), and a tool whose
// arguments travel in headers too still gets them.
func TestLatestHTTPLinkIsRaw(t *testing.T) {
	seen := make(chan http.Header, 64)
	gw, sessions := httpGateway(t, statelessUpstream(t, seen), false, "")
	stateless := httptest.NewServer(gw.Handler(true))
	t.Cleanup(stateless.Close)
	for _, c := range []struct{ version, url string }{
		{"2025-11-25", sessions},
		{"2026-07-28", sessions},
		// A client of 2025-11-25 without sessions shares the link of
		// 2026-07-28.
		{"2025-11-25", stateless.URL + MCPPath},
	} {
		version, url := c.version, c.url
		t.Run(version+" "+url, func(t *testing.T) {
			errs := make(chan error, 2)
			for i, key := range []string{"alice-key", "other-alice-key"} {
				go func() {
					var wire bytes.Buffer
					transport := &mcp.LoggingTransport{Writer: &wire,
						Transport: &mcp.StreamableClientTransport{Endpoint: url, HTTPClient: &http.Client{Transport: bearer{key}}}}
					cs, err := mcp.NewClient(&mcp.Implementation{Name: "test"}, nil).Connect(context.Background(), transport,
						&mcp.ClientSessionOptions{ProtocolVersion: version})
					if err != nil {
						errs <- err
						return
					}
					defer cs.Close()
					for n := i * 100; n < i*100+10; n++ {
						res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "exact", Arguments: map[string]any{"n": n}})
						if err != nil || res.IsError || res.Content[0].(*mcp.TextContent).Text != fmt.Sprint(n) {
							errs <- fmt.Errorf("%s's call %d: %v, %+v", key, n, err, res)
							return
						}
						if want := fmt.Sprintf(`{"id":12345678901234567891,"n":%d}`, n); !strings.Contains(wire.String(), want) {
							errs <- fmt.Errorf("%s's call %d: %s is not on the wire as the upstream wrote it:\n%s", key, n, want, wire.String())
							return
						}
					}
					// The client's SDK sends the header from the schema it listed.
					if _, err := cs.ListTools(context.Background(), nil); err != nil {
						errs <- err
						return
					}
					res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "headed", Arguments: map[string]any{"region": "eu"}})
					if err != nil || res.IsError {
						errs <- fmt.Errorf("%s's headed call: %v, %+v", key, err, res)
						return
					}
					errs <- nil
				}()
			}
			for range 2 {
				if err := <-errs; err != nil {
					t.Error(err)
				}
			}
		})
	}
	close(seen)
	regions := 0
	for h := range seen {
		if h.Get("Mcp-Protocol-Version") != "2026-07-28" || h.Get("Mcp-Name") == "" {
			t.Errorf("a tools/call reached the upstream with headers %v", h)
		}
		if h.Get("Mcp-Name") == "headed" && h.Get("Mcp-Param-Region") == "eu" {
			regions++
		}
	}
	// Only links of 2026-07-28 send the headers: the clients of 2025-11-25
	// with sessions are served on a link of their own protocol.
	if regions != 4 {
		t.Errorf("%d headed calls carried their region in a header, want 4", regions)
	}
}

// TestAnHTTPRefusalIsOneCalls: an HTTP upstream that refuses one tenant's
// call with an HTTP status (a body over its limit, 413; a moment's
// overload, 503) refuses that call alone: another tenant's call in flight
// on the same link finishes, the link stays open, and the refused caller
// learns the status, not that the server is down. A refusal the caller
// must mend (a 4xx) is neither tried again nor counted against the
// upstream, so one caller's refused calls cannot open the circuit for
// everyone. A JSON-RPC error in the refusal's body that answers the call
// is the upstream's answer, with its code; its words stay in the
// gateway's log.
func TestAnHTTPRefusalIsOneCalls(t *testing.T) {
	for _, c := range []struct {
		name      string
		stateless bool
		refusal   func(w http.ResponseWriter, id json.RawMessage)
		code      interlock.Code
		says      string
		callers   bool // the caller's to mend
	}{
		{"413 on a session", false, func(w http.ResponseWriter, _ json.RawMessage) {
			http.Error(w, "request body too large", http.StatusRequestEntityTooLarge)
		}, interlock.CodeUpstreamError, "HTTP 413", true},
		{"413 without sessions", true, func(w http.ResponseWriter, _ json.RawMessage) {
			http.Error(w, "request body too large", http.StatusRequestEntityTooLarge)
		}, interlock.CodeUpstreamError, "HTTP 413", true},
		{"503", false, func(w http.ResponseWriter, _ json.RawMessage) {
			http.Error(w, "busy", http.StatusServiceUnavailable)
		}, interlock.CodeUpstreamUnavailable, "HTTP 503", false},
		// The TypeScript SDK's servers answer a request they refuse so.
		{"a JSON-RPC error of no request in a 400", false, func(w http.ResponseWriter, _ json.RawMessage) {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusBadRequest)
			fmt.Fprint(w, `{"jsonrpc":"2.0","error":{"code":-32000,"message":"Bad Request: secret internals"},"id":null}`)
		}, interlock.CodeUpstreamError, "HTTP 400", true},
		{"the call's JSON-RPC error in a 400", false, func(w http.ResponseWriter, id json.RawMessage) {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusBadRequest)
			fmt.Fprintf(w, `{"jsonrpc":"2.0","id":%s,"error":{"code":-32602,"message":"secret internals"}}`, id)
		}, interlock.CodeValidationFailed, "rejected the arguments", true},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := mcp.NewServer(&mcp.Implementation{Name: "limited"}, nil)
			s.AddTool(&mcp.Tool{Name: "put", Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true}, InputSchema: map[string]any{"type": "object"}},
				func(_ context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
					if bytes.Contains(req.Params.Arguments, []byte("slow")) {
						time.Sleep(300 * time.Millisecond)
					}
					return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "put"}}}, nil
				})
			h := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s }, &mcp.StreamableHTTPOptions{Stateless: c.stateless})
			var opened, refusals atomic.Int32
			up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				b, _ := io.ReadAll(r.Body)
				r.Body = io.NopCloser(bytes.NewReader(b))
				switch {
				case bytes.Contains(b, []byte(`"initialize"`)), bytes.Contains(b, []byte(`"server/discover"`)):
					opened.Add(1)
				case bytes.Contains(b, []byte("huge")):
					var m struct{ ID json.RawMessage }
					_ = json.Unmarshal(b, &m)
					refusals.Add(1)
					c.refusal(w, m.ID)
					return
				}
				h.ServeHTTP(w, r)
			}))
			t.Cleanup(up.Close)
			_, url := httpGateway(t, up.URL, false, "")
			alice, other := dial(t, nil, url, "alice-key", nil), dial(t, nil, url, "other-alice-key", nil)
			before := opened.Load()

			slow := make(chan *mcp.CallToolResult, 1)
			go func() { slow <- call(t, alice, "put", map[string]any{"what": "slow"}) }()
			time.Sleep(50 * time.Millisecond)
			refused := call(t, other, "put", map[string]any{"what": "huge"})
			if b := body(t, refused); b.Code != c.code || !strings.Contains(b.Message, c.says) || strings.Contains(b.Message, "secret") {
				t.Errorf("the refused call answered %+v, want %s saying %q", b, c.code, c.says)
			}
			if res := <-slow; res.IsError {
				t.Errorf("the other tenant's call in flight: %+v", body(t, res))
			}
			if c.callers {
				if n := refusals.Load(); n != 1 {
					t.Errorf("a call the caller must mend was sent %d times", n)
				}
				// More than the breaker's 10 consecutive failures.
				for range 12 {
					call(t, other, "put", map[string]any{"what": "huge"})
				}
				if res := call(t, alice, "put", map[string]any{"what": "small"}); res.IsError {
					t.Errorf("another tenant's call after 13 refused ones: %+v", body(t, res))
				}
			}
			if res := call(t, other, "put", map[string]any{"what": "small"}); res.IsError {
				t.Errorf("the next call after the refusal: %+v", body(t, res))
			}
			if n := opened.Load(); n != before {
				t.Errorf("the link was opened %d more times for one refused call", n-before)
			}
		})
	}
}

// TestRawLinkKeepsItsConnection: the calls a client makes one after
// another on an HTTP upstream's link go over one connection, which the
// gateway reads to the end of each call's stream and so gets back; one
// closed unread would make each next call open another.
func TestRawLinkKeepsItsConnection(t *testing.T) {
	for _, c := range []struct {
		upstream, client string
		stateless        bool
	}{
		{"on a session", "2025-11-25", false},
		{"without sessions", "2025-11-25", true},
		{"without sessions", "2026-07-28", true},
	} {
		t.Run(c.upstream+", a client of "+c.client, func(t *testing.T) {
			var conns atomic.Int32
			srv := httptest.NewUnstartedServer(echoHandler(&mcp.StreamableHTTPOptions{Stateless: c.stateless}))
			srv.Config.ConnState = func(_ net.Conn, st http.ConnState) {
				if st == http.StateNew {
					conns.Add(1)
				}
			}
			srv.Start()
			t.Cleanup(srv.Close)
			_, url := httpGateway(t, srv.URL, false, "")
			cs := dial(t, nil, url, "alice-key", &mcp.ClientSessionOptions{ProtocolVersion: c.client})
			call(t, cs, "echo", map[string]any{})
			before := conns.Load()
			for range 50 {
				if res := call(t, cs, "echo", map[string]any{}); res.IsError {
					t.Fatalf("call: %+v", body(t, res))
				}
			}
			if n := conns.Load() - before; n > 1 {
				t.Errorf("50 calls one after another opened %d connections to the upstream", n)
			}
		})
	}
}

// TestAStreamKeptOpenAfterItsAnswer: an upstream that answers a call on
// its event stream and keeps the stream open, trickling comments, does
// not hold the call: the gateway stops reading it soon after the answer.
func TestAStreamKeptOpenAfterItsAnswer(t *testing.T) {
	up := handRolledUpstream(t, func(w http.ResponseWriter, r *http.Request, id json.RawMessage, method string, _ []byte) {
		result := map[string]string{
			"initialize": `{"protocolVersion":"2025-11-25","capabilities":{"tools":{}},"serverInfo":{"name":"open","version":"1"}}`,
			"tools/list": `{"tools":[{"name":"hold","inputSchema":{"type":"object"},"annotations":{"readOnlyHint":true}}]}`,
			"tools/call": `{"content":[{"type":"text","text":"answered"}]}`,
		}[method]
		if result == "" {
			result = "{}"
		}
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprintf(w, "event: message\ndata: {\"jsonrpc\":\"2.0\",\"id\":%s,\"result\":%s}\n\n", id, result)
		w.(http.Flusher).Flush()
		if method != "tools/call" {
			return
		}
		for {
			select {
			case <-r.Context().Done():
				return
			case <-time.After(time.Millisecond):
				fmt.Fprint(w, ": still here\n\n")
				w.(http.Flusher).Flush()
			}
		}
	})
	_, url := httpGateway(t, up.URL, false, "")
	cs := dial(t, nil, url, "alice-key", &mcp.ClientSessionOptions{ProtocolVersion: "2025-11-25"})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for range 3 {
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "hold", Arguments: map[string]any{}})
		if err != nil || res.IsError || res.Content[0].(*mcp.TextContent).Text != "answered" {
			t.Fatalf("a call whose stream stays open: %v, %+v", err, res)
		}
	}
}

// TestHeaderBindingFollowsTheListing: whether a tool's calls go through
// the SDK's client, which writes the headers its schema binds, follows the
// upstream's last listing: a tool listed again without the binding, or no
// longer listed, is no longer taken for bound, and an upstream that keeps
// renaming such tools does not grow what the gateway keeps.
func TestHeaderBindingFollowsTheListing(t *testing.T) {
	s := mcp.NewServer(&mcp.Implementation{Name: "changing"}, nil)
	bound := map[string]any{"type": "object", "properties": map[string]any{"region": map[string]any{"type": "string", "x-mcp-header": "Region"}}}
	plain := map[string]any{"type": "object", "properties": map[string]any{"region": map[string]any{"type": "string"}}}
	answer := func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		return &mcp.CallToolResult{}, nil
	}
	s.AddTool(&mcp.Tool{Name: "headed", InputSchema: bound}, answer)
	h := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s }, &mcp.StreamableHTTPOptions{Stateless: true})
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	gw, _ := httpGateway(t, srv.URL, false, "")
	u := gw.upstreams[0]
	for _, step := range []struct {
		name   string
		change func()
		want   map[string]bool
	}{
		{"as first listed", func() {}, map[string]bool{"headed": true}},
		{"listed again without the binding", func() { s.AddTool(&mcp.Tool{Name: "headed", InputSchema: plain}, answer) },
			map[string]bool{"headed": false}},
		{"bound again, then gone, and another bound", func() {
			s.AddTool(&mcp.Tool{Name: "headed", InputSchema: bound}, answer)
			if err := gw.refresh(context.Background(), u, nil, false); err != nil || !u.headed("headed") {
				t.Fatalf("bound again: %v, headed %t", err, u.headed("headed"))
			}
			s.RemoveTools("headed")
			s.AddTool(&mcp.Tool{Name: "renamed", InputSchema: bound}, answer)
		}, map[string]bool{"headed": false, "renamed": true}},
	} {
		step.change()
		if err := gw.refresh(context.Background(), u, nil, false); err != nil {
			t.Fatalf("%s: %v", step.name, err)
		}
		kept := 0
		for tool, want := range step.want {
			if got := u.headed(tool); got != want {
				t.Errorf("%s: %s taken for bound to a header: %t, want %t", step.name, tool, got, want)
			}
			if want {
				kept++
			}
		}
		if n := len(*u.headerBound.Load()); n != kept {
			t.Errorf("%s: the gateway keeps %d tools as bound, want %d", step.name, n, kept)
		}
	}
}

// TestHostileResultsThroughTheSDKsClient: on a link of 2026-07-28 the
// SDK's client carries the calls of tools bound to headers, and calls
// with no client to ask (the REST face); an upstream that answers them
// with something the SDK cannot read as a tool's result still answered.
// The caller gets UPSTREAM_ERROR without the upstream's bytes, and the
// link every tenant shares is kept, not closed under the others' calls
// and made again.
func TestHostileResultsThroughTheSDKsClient(t *testing.T) {
	var handshakes atomic.Int64
	up := hostileUpstream(t, "2026-07-28", `{"type":"object","properties":{"result":{"type":"string"},"region":{"type":"string","x-mcp-header":"Region"}}}`, &handshakes)
	gw, url := httpGateway(t, up.URL, false, "")
	u := gw.upstreams[0]
	link := func() *mcp.ClientSession {
		u.mu.Lock()
		defer u.mu.Unlock()
		return u.session
	}
	was := link()
	if !u.headed("answer") {
		t.Fatal("the tool is not taken for bound to a header")
	}
	// The callers take turns between two tenants, so that no tenant's
	// circuit opens on the failures tried again.
	keys := []string{"alice-key", "bob-key", "other-alice-key"}
	for i, tt := range []struct{ name, result, text string }{
		{"a result", `{"content":[{"type":"text","text":"fine"}],"resultType":"complete"}`, "fine"},
		{"not an object", `["secret-1"]`, ""},
		{"content not a list", `{"content":"secret-2","resultType":"complete"}`, ""},
		{"content of no known type", `{"content":[{"type":"secret-3"}],"resultType":"complete"}`, ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			cs := dial(t, nil, url, keys[i%len(keys)], &mcp.ClientSessionOptions{ProtocolVersion: "2026-07-28"})
			// The client's SDK sends the header from the schema it listed.
			if _, err := cs.ListTools(t.Context(), nil); err != nil {
				t.Fatal(err)
			}
			res := call(t, cs, "answer", map[string]any{"result": tt.result, "region": "eu"})
			wire := resultJSON(t, res)
			switch {
			case tt.text != "":
				if res.IsError || len(res.Content) != 1 || res.Content[0].(*mcp.TextContent).Text != tt.text {
					t.Errorf("the result reads %s", wire)
				}
			default:
				if b := body(t, res); b.Code != interlock.CodeUpstreamError || strings.Contains(wire, "secret") {
					t.Errorf("the client gets %s", wire)
				}
			}
			if link() != was || handshakes.Load() != 1 {
				t.Errorf("the link was dropped: %d handshakes with the upstream", handshakes.Load())
			}
		})
	}
	// Another tenant's call in flight on the link while one is answered
	// badly still gets its answer.
	t.Run("beside another tenant's call", func(t *testing.T) {
		slow := dial(t, nil, url, "other-alice-key", &mcp.ClientSessionOptions{ProtocolVersion: "2026-07-28"})
		bad := dial(t, nil, url, "alice-key", &mcp.ClientSessionOptions{ProtocolVersion: "2026-07-28"})
		for _, cs := range []*mcp.ClientSession{slow, bad} {
			if _, err := cs.ListTools(t.Context(), nil); err != nil {
				t.Fatal(err)
			}
		}
		done := make(chan *mcp.CallToolResult, 1)
		go func() {
			res, err := slow.CallTool(t.Context(), &mcp.CallToolParams{Name: "answer", Arguments: map[string]any{
				"result": `{"content":[{"type":"text","text":"slow"}],"resultType":"complete"}`, "region": "eu", "wait": 500}})
			if err != nil {
				res = &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: err.Error()}}}
			}
			done <- res
		}()
		time.Sleep(100 * time.Millisecond) // the slow call is on the link
		if b := body(t, call(t, bad, "answer", map[string]any{"result": `{"content":[{"type":"secret-5"}]}`, "region": "eu"})); b.Code != interlock.CodeUpstreamError {
			t.Errorf("the bad answer gives %+v", b)
		}
		if res := <-done; res.IsError || len(res.Content) != 1 || res.Content[0].(*mcp.TextContent).Text != "slow" {
			t.Errorf("the other tenant's call gets %s", resultJSON(t, res))
		}
		if link() != was || handshakes.Load() != 1 {
			t.Errorf("the link was dropped: %d handshakes with the upstream", handshakes.Load())
		}
	})
	status, out := post(t, strings.TrimSuffix(url, MCPPath)+"/v1/tools/answer/call", "other-alice-key", `{"arguments":{"result":"{\"content\":\"secret-4\"}"}}`)
	if out["code"] != string(interlock.CodeUpstreamError) || strings.Contains(fmt.Sprint(out), "secret") || link() != was {
		t.Errorf("REST answers %d %v; link kept: %t", status, out, link() == was)
	}
}
