package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/interlock-mcp/interlock/gateway/internal/sdkrules"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// TestLaneKeepsTheIdleTimeout: calls the lane serves keep a session alive
// as calls through the SDK would, a call longer than the timeout does not
// end its session, and a session left idle still expires.
func TestLaneKeepsTheIdleTimeout(t *testing.T) {
	const timeout = 500 * time.Millisecond
	f := testConfig(t, "", "fx")
	f.HTTP.SessionIdleTimeout = timeout
	gw := start(t, f, "false")
	// The gateway saw a session idle at most from the sending of one
	// request to the answer of the next. A run in which that span reached
	// the timeout (a loaded machine) proves nothing of a session in use,
	// and is made again on a new session.
	for try := 1; ; try++ {
		if keptAlive(t, gw, timeout) {
			return
		}
		if try == 5 {
			t.Fatalf("in %d runs the machine never made requests less than %v apart", try, timeout)
		}
	}
}

// keptAlive runs TestLaneKeepsTheIdleTimeout on a new session, and
// reports false when it could not keep its requests close enough.
func keptAlive(t *testing.T, gw *Gateway, timeout time.Duration) bool {
	t.Helper()
	url, cs := servedSession(t, gw, false)
	list := `{"jsonrpc":"2.0","id":7,"method":"tools/list","params":{}}`
	began := time.Now()
	last := began // when the previous request was sent
	for time.Since(began) < 2*timeout {
		sent := time.Now()
		res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"n": 1}})
		if time.Since(last) >= timeout {
			return false
		}
		if err != nil || res.IsError {
			t.Fatalf("echo on a session in use: %v %+v", err, res)
		}
		last = sent
		time.Sleep(timeout / 10)
	}
	status, b := rawMCP(t, url, "", cs.ID(), nil, list)
	if time.Since(last) >= timeout {
		return false
	}
	if status != http.StatusOK {
		t.Fatalf("a session in use expired: %d %s", status, b)
	}
	// The slow call holds the session for three timeouts; its answer
	// comes no sooner, so only the span past them can be idle.
	sent := time.Now()
	if res := call(t, cs, "slow", map[string]any{"ms": 3 * timeout.Milliseconds()}); res.IsError {
		t.Fatalf("slow: %+v", body(t, res))
	}
	status, b = rawMCP(t, url, "", cs.ID(), nil, list)
	if time.Since(sent) >= 4*timeout {
		return false
	}
	if status != http.StatusOK {
		t.Fatalf("a session expired during a long call: %d %s", status, b)
	}
	// Idle for three timeouts: a late timer only makes the expiry surer.
	time.Sleep(3 * timeout)
	if status, b := rawMCP(t, url, "", cs.ID(), nil, list); status != http.StatusNotFound {
		t.Errorf("an idle session still answers: %d %s", status, b)
	}
	return true
}

// TestLaneCancellation: a client's notifications/cancelled stops a call the
// lane serves, as the SDK would stop one of its own.
func TestLaneCancellation(t *testing.T) {
	gw := start(t, testConfig(t, "", "fx"), "false")
	url, cs := servedSession(t, gw, false)
	done := make(chan time.Duration, 1)
	go func() {
		began := time.Now()
		rawMCP(t, url, "", cs.ID(), nil, `{"jsonrpc":"2.0","id":"slow-1","method":"tools/call","params":{"name":"slow","arguments":{"ms":20000}}}`)
		done <- time.Since(began)
	}()
	eventually(t, "the call to be in flight", func() bool {
		gw.inFlight.mu.Lock()
		defer gw.inFlight.mu.Unlock()
		return gw.inFlight.n == 1
	})
	status, b := rawMCP(t, url, "", cs.ID(), nil, `{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":"slow-1"}}`)
	if status != http.StatusAccepted {
		t.Fatalf("cancelling: %d %s", status, b)
	}
	select {
	case took := <-done:
		if took > 10*time.Second {
			t.Errorf("the cancelled call took %s", took)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the cancelled call is still running")
	}
}

// TestLaneAnswers checks the answers the lane writes, and that what it does
// not take still reaches the SDK.
func TestLaneAnswers(t *testing.T) {
	gw := start(t, testConfig(t, "", "fx"), "false")
	url, cs := servedSession(t, gw, false)
	tests := []struct {
		name        string
		header      http.Header
		body        string
		status      int
		contentType string
		want        string // in the body
		lane        bool   // the lane answers, not the SDK
	}{
		{"a call", nil, `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo","arguments":{"a":1}}}`,
			http.StatusOK, "application/json", `"id":1,"result":{`, true},
		{"a refusal", nil, `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"wipe","arguments":{"target":"x"}}}`,
			http.StatusOK, "application/json", `"isError":true`, true},
		{"an unknown tool, answered by the SDK", nil, `{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"nope"}}`,
			http.StatusOK, "text/event-stream", `unknown tool`, false},
		{"progress, on the call's stream before the answer", nil,
			`{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"count","arguments":{},"_meta":{"progressToken":"p"}}}`,
			http.StatusOK, "text/event-stream", `"params":{"progressToken":"p","progress":3,"total":3}}

event: message
data: {"jsonrpc":"2.0","id":4,"result":{`, true},
		{"another protocol in the header, served by the SDK", http.Header{"Mcp-Protocol-Version": {"2025-06-18"}},
			`{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"echo","arguments":{}}}`,
			http.StatusOK, "text/event-stream", `"id":5,"result":{`, false},
		{"a name that is not loopback, refused by the SDK", http.Header{"Host": {"rebound.example"}},
			`{"jsonrpc":"2.0","id":6,"method":"tools/call","params":{"name":"echo","arguments":{}}}`,
			http.StatusForbidden, "", `invalid Host header`, false},
		{"a response no question waits for, passed to the SDK", nil, `{"jsonrpc":"2.0","id":"interlock-999","result":{}}`,
			http.StatusAccepted, "", ``, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := laneServed.Load()
			status, b, contentType := rawMCPType(t, url, cs.ID(), tt.header, tt.body)
			if status != tt.status || !strings.HasPrefix(contentType, tt.contentType) || !strings.Contains(b, tt.want) {
				t.Errorf("got %d %s %s", status, contentType, b)
			}
			if served := laneServed.Load() != before; served != tt.lane {
				t.Errorf("the lane served it: %v, want %v", served, tt.lane)
			}
		})
	}
}

// rawMCPType is rawMCP that also returns the response's content type.
func rawMCPType(t *testing.T, url, session string, header http.Header, body string) (int, string, string) {
	t.Helper()
	status, b, contentType, err := postMCP(url, session, header, body)
	if err != nil {
		t.Fatal(err)
	}
	return status, b, contentType
}

// postMCP posts body to the MCP endpoint on session with the headers a
// client of 2025-11-25 sends, and those given.
func postMCP(url, session string, header http.Header, body string) (int, string, string, error) {
	req, _ := http.NewRequestWithContext(context.Background(), http.MethodPost, url, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Mcp-Protocol-Version", "2025-11-25")
	if session != "" {
		req.Header.Set(sessionIDHeader, session)
	}
	for k, v := range header {
		req.Header[k] = v
	}
	if host := header.Get("Host"); host != "" {
		req.Host = host
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, "", "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), resp.Header.Get("Content-Type"), err
}

// TestLaneCarriesQuestions: a question the upstream pushes during a call
// the lane serves travels on the call's own stream, the client's answer
// comes back in a POST of its own, and the call completes with it.
func TestLaneCarriesQuestions(t *testing.T) {
	f := testConfig(t, "", "fx")
	f.Upstreams[0].Env["INTERLOCK_FIXTURE"] = "legacy"
	gw := start(t, f, "false")
	human := &picker{}
	srv := httptest.NewServer(gw.Handler(false))
	defer srv.Close()
	posts := &postRecorder{}
	transport := &mcp.StreamableClientTransport{Endpoint: srv.URL + MCPPath, HTTPClient: &http.Client{Transport: posts}}
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "test"}, &mcp.ClientOptions{ElicitationHandler: human.answer}).Connect(
		context.Background(), transport, onSession)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	answeredOnce(t, cs, "ask_push", map[string]any{}, human, "pushed=accept:blue")
	if !strings.Contains(posts.String(), `"id":"interlock-`) {
		t.Errorf("the question did not travel on the call's stream; the client posted:\n%s", posts)
	}
}

// postRecorder keeps the bodies of the POSTs a client makes.
type postRecorder struct {
	mu     sync.Mutex
	bodies bytes.Buffer
}

func (p *postRecorder) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Method == http.MethodPost && r.Body != nil {
		b, err := io.ReadAll(r.Body)
		if err != nil {
			return nil, err
		}
		p.mu.Lock()
		p.bodies.Write(b)
		p.bodies.WriteByte('\n')
		p.mu.Unlock()
		r.Body = io.NopCloser(bytes.NewReader(b))
	}
	return http.DefaultTransport.RoundTrip(r)
}

func (p *postRecorder) String() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.bodies.String()
}

// TestLaneAnswersAsTheSDKDoes sends the same calls with the lane on and
// off, for each protocol generation, and compares the results.
func TestLaneAnswersAsTheSDKDoes(t *testing.T) {
	gw := start(t, testConfig(t, "", "fx"), "false")
	srv := httptest.NewServer(gw.Handler(false))
	t.Cleanup(srv.Close)
	url := srv.URL + MCPPath
	session := func() string {
		t.Helper()
		c, err := mcp.NewClient(&mcp.Implementation{Name: "test"}, nil).Connect(context.Background(),
			&mcp.StreamableClientTransport{Endpoint: url}, onSession)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c.ID()
	}()
	latestMeta := `"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{},"io.modelcontextprotocol/clientInfo":{"name":"raw","version":"1"}}`
	calls := []struct{ tool, args string }{
		{"echo", `{"a":[1,2.5,"x"]}`},
		{"exact", `{}`},
		{"wipe", `{"target":"x"}`},
		{"wipe", `{"target":"x","__confirm":true}`},
		{"wipe", `{}`},
		{"fail", `{"code":-32000,"message":"no"}`},
	}
	for _, generation := range []string{"2025-11-25", "2026-07-28"} {
		for _, c := range calls {
			t.Run(generation+" "+c.tool+" "+c.args, func(t *testing.T) {
				body := `{"jsonrpc":"2.0","id":9,"method":"tools/call","params":{"name":"` + c.tool + `","arguments":` + c.args + `}}`
				sid := session
				if generation == "2026-07-28" {
					body = `{"jsonrpc":"2.0","id":9,"method":"tools/call","params":{"name":"` + c.tool + `","arguments":` + c.args + `,` + latestMeta + `}}`
					sid = ""
				}
				answer := func(off bool) (string, map[string]any) {
					laneOff.Store(off)
					defer laneOff.Store(false)
					header := http.Header{"Mcp-Protocol-Version": {generation}}
					if generation == "2026-07-28" {
						header["Mcp-Method"], header["Mcp-Name"] = []string{"tools/call"}, []string{c.tool}
					}
					contentType, b := firstMessage(t, url, sid, header, body)
					var m map[string]any
					if err := json.Unmarshal([]byte(b), &m); err != nil {
						t.Fatalf("%s: %v", b, err)
					}
					return contentType, m
				}
				before := laneServed.Load()
				_, lane := answer(false)
				if laneServed.Load() != before+1 {
					t.Errorf("the lane did not answer")
				}
				_, sdk := answer(true)
				scrub(lane)
				scrub(sdk)
				if !reflect.DeepEqual(lane, sdk) {
					t.Errorf("the lane answered\n%v\nthe SDK\n%v", lane, sdk)
				}
			})
		}
	}
}

// scrub removes from an answer what differs between two calls by design:
// confirm tokens, which are new each time.
func scrub(v any) {
	switch v := v.(type) {
	case map[string]any:
		for k, e := range v {
			if k == "confirm_token" || k == "text" {
				if s, ok := e.(string); ok && strings.Contains(s, "confirm_token") {
					v[k] = "scrubbed"
					continue
				}
			}
			if k == "confirm_token" {
				v[k] = "scrubbed"
				continue
			}
			scrub(e)
		}
	case []any:
		for _, e := range v {
			scrub(e)
		}
	}
}

// TestLaneServesClientsWithoutSessionsAtOnce: clients of 2026-07-28 share
// no session, so two of them may send calls with the same id at the same
// time; both take the lane, and are in flight on the upstream together.
func TestLaneServesClientsWithoutSessionsAtOnce(t *testing.T) {
	gw := start(t, testConfig(t, "", "fx"), "false")
	srv := httptest.NewServer(gw.Handler(false))
	t.Cleanup(srv.Close)
	// Each call sleeps 3 s: the second has that long to reach the
	// upstream while the first is still there.
	body := `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"slow","arguments":{"ms":3000},` +
		`"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}}}`
	header := http.Header{"Mcp-Protocol-Version": {"2026-07-28"}, "Mcp-Method": {"tools/call"}, "Mcp-Name": {"slow"}}
	before := laneServed.Load()
	done := make(chan string, 2)
	for range 2 {
		go func() {
			_, b, _, err := postMCP(srv.URL+MCPPath, "", header, body)
			if err != nil {
				b = err.Error()
			}
			done <- b
		}()
	}
	eventually(t, "both calls in flight on the upstream at once", func() bool { return flightsOnLinks(gw) == 2 })
	for range 2 {
		if b := <-done; !strings.Contains(b, `"text":"slept"`) {
			t.Errorf("got %s", b)
		}
	}
	if n := laneServed.Load() - before; n != 2 {
		t.Errorf("the lane served %d of the 2 calls", n)
	}
}

// TestQuestionsKeepTheirMode: a question an upstream asks without a mode
// is forwarded as a form, or as a URL when it names one, as the SDK infers
// it, never with "mode": "" (which the TypeScript SDK 1.x refuses); one
// with a mode keeps it.
func TestQuestionsKeepTheirMode(t *testing.T) {
	for _, tt := range []struct {
		in   *mcp.ElicitParams
		want string
	}{
		{&mcp.ElicitParams{Message: "Pick a color"}, `"mode":"form"`},
		{&mcp.ElicitParams{Mode: "form", Message: "Pick"}, `"mode":"form"`},
		{&mcp.ElicitParams{Mode: "url", URL: "https://x.example/a", ElicitationID: "e1", Message: "Open"}, `"mode":"url"`},
		{&mcp.ElicitParams{URL: "https://x.example/a", ElicitationID: "e1", Message: "Open"}, `"mode":"url"`},
	} {
		b, err := json.Marshal(sdkrules.ElicitMode(tt.in))
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(b), tt.want) || strings.Contains(string(b), `"mode":""`) {
			t.Errorf("forwarded %s, want %s", b, tt.want)
		}
	}
	if p := (&mcp.ElicitParams{Message: "x"}); sdkrules.ElicitMode(p) == p || p.Mode != "" {
		t.Error("ElicitMode changed the upstream's own params")
	}
}
