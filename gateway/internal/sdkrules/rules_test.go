package sdkrules

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

func TestSDKIn(t *testing.T) {
	for _, c := range []struct{ gomod, want string }{
		{"require (\n\tgithub.com/modelcontextprotocol/go-sdk v1.8.0\n)\n", "v1.8.0"},
		{"require github.com/modelcontextprotocol/go-sdk v1.9.1 // indirect\n", "v1.9.1"},
		{"require github.com/modelcontextprotocol/go-sdk v1.8.0\nreplace github.com/modelcontextprotocol/go-sdk => ../go-sdk\n", "replaced by ../go-sdk"},
		{"require github.com/modelcontextprotocol/go-sdk-extra v1.0.0\n", ""},
	} {
		if got := sdkIn(c.gomod); got != c.want {
			t.Errorf("sdkIn(%q) = %q, want %q", c.gomod, got, c.want)
		}
	}
}

func TestPOSTAccepted(t *testing.T) {
	local := &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 8740}
	for _, c := range []struct {
		name    string
		host    string
		headers map[string]string
		want    bool
	}{
		{"plain", "127.0.0.1:8740", nil, true},
		{"localhost", "localhost:8740", nil, true},
		{"IPv6 with a zone", "[::1%25lo]:8740", nil, true},
		{"rebinding", "evil.example:8740", nil, false},
		{"charset", "localhost", map[string]string{"Content-Type": "application/json; charset=utf-8"}, true},
		{"text body", "localhost", map[string]string{"Content-Type": "text/plain"}, false},
		{"JSON only", "localhost", map[string]string{"Accept": "application/json"}, false},
		{"wildcards", "localhost", map[string]string{"Accept": "application/*;q=0.9, TEXT/*"}, true},
		{"anything", "localhost", map[string]string{"Accept": "*/*"}, true},
		{"resuming", "localhost", map[string]string{"Last-Event-ID": "1"}, false},
	} {
		r := httptest.NewRequest(http.MethodPost, "/mcp", nil)
		r.Host = c.host
		r = r.WithContext(context.WithValue(r.Context(), http.LocalAddrContextKey, net.Addr(local)))
		r.Header.Set("Content-Type", "application/json")
		r.Header.Set("Accept", "application/json, text/event-stream")
		for k, v := range c.headers {
			r.Header.Set(k, v)
		}
		if got := POSTAccepted(r); got != c.want {
			t.Errorf("%s: POSTAccepted = %v, want %v", c.name, got, c.want)
		}
	}
}

func TestToolCallHeaders(t *testing.T) {
	h := http.Header{}
	h.Set(ProtocolVersionHeader, Protocol20260728)
	h.Set(MethodHeader, "tools/call")
	h.Set(NameHeader, "echo")
	if !ToolCallHeaders(h, "echo") || ToolCallHeaders(h, "other") {
		t.Error("Mcp-Name must name the tool called")
	}
	h.Set(ProtocolVersionHeader, "2025-11-25")
	if ToolCallHeaders(h, "echo") {
		t.Error("an earlier protocol version passed")
	}
}

// withUser returns the context a request gets from the SDK's bearer
// token middleware for a token of user.
func withUser(user string) context.Context {
	var ctx context.Context
	verify := func(context.Context, string, *http.Request) (*auth.TokenInfo, error) {
		return &auth.TokenInfo{UserID: user, Expiration: time.Now().Add(time.Hour)}, nil
	}
	h := auth.RequireBearerToken(verify, nil)(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) { ctx = r.Context() }))
	r := httptest.NewRequest(http.MethodPost, "/mcp", nil)
	r.Header.Set("Authorization", "Bearer key")
	h.ServeHTTP(httptest.NewRecorder(), r)
	return ctx
}

func TestSessionOwners(t *testing.T) {
	alice, bob := withUser("alice"), withUser("bob")
	if SessionOwner(alice) != "alice" || SessionOwner(context.Background()) != "" {
		t.Error("the owner is the token's UserID, or none")
	}
	if !MayUse(alice, "alice") || MayUse(bob, "alice") || MayUse(context.Background(), "alice") || !MayUse(bob, "") {
		t.Error("only the owner may use an owned session; anyone an unowned one")
	}
}

func TestLatestMeta(t *testing.T) {
	meta := func(s string) map[string]any {
		var m map[string]any
		if err := json.Unmarshal([]byte(s), &m); err != nil {
			t.Fatal(err)
		}
		return m
	}
	const v, caps = `"io.modelcontextprotocol/protocolVersion":"2026-07-28"`, `"io.modelcontextprotocol/clientCapabilities":{}`
	for s, want := range map[string]bool{
		`{` + v + `,` + caps + `}`: true,
		`{` + v + `,` + caps + `,"io.modelcontextprotocol/clientInfo":{"name":"c","version":"1","icons":[]}}`: true,
		`{` + v + `}`: false,
		`{` + v + `,"io.modelcontextprotocol/clientCapabilities":[]}`:                                    false,
		`{` + v + `,` + caps + `,"io.modelcontextprotocol/clientInfo":{"version":"1"}}`:                  false,
		`{` + v + `,` + caps + `,"io.modelcontextprotocol/clientInfo":null}`:                             false,
		`{"io.modelcontextprotocol/protocolVersion":"2025-11-25",` + caps + `}`:                          false,
		`{` + v + `,` + caps + `,"io.modelcontextprotocol/clientInfo":{"name":"c","version":1}}`:         false,
		`{` + v + `,` + caps + `,"io.modelcontextprotocol/clientInfo":{"name":"c","websiteUrl":"u"}}`:    true,
		`{"io.modelcontextprotocol/protocolVersion":"2027-01-01",` + caps + `}`:                          false,
		`{` + v + `,` + caps + `,"io.modelcontextprotocol/logLevel":"debug"}`:                            true,
		`{` + v + `,` + caps + `,"io.modelcontextprotocol/clientInfo":{"name":"","version":"1"}}`:        false,
		`{` + v + `,` + caps + `,"io.modelcontextprotocol/clientInfo":"c"}`:                              false,
		`{` + v + `,"io.modelcontextprotocol/clientCapabilities":null}`:                                  false,
		`{` + v + `,"io.modelcontextprotocol/clientCapabilities":{"elicitation":{}}}`:                    true,
		`{` + v + `,` + caps + `,"io.modelcontextprotocol/clientInfo":{"name":"c","title":"C","x":"y"}}`: true,
	} {
		if got := LatestMeta(meta(s)); got != want {
			t.Errorf("LatestMeta(%s) = %v, want %v", s, got, want)
		}
	}
}

func TestNonNullContent(t *testing.T) {
	if res := NonNullContent(&mcp.CallToolResult{}); res.Content == nil {
		t.Error("content left null")
	}
	asks := &mcp.CallToolResult{InputRequests: map[string]mcp.InputRequest{}}
	if NonNullContent(asks) != asks {
		t.Error("a result asking for input was changed")
	}
	if NonNullContent(nil) != nil {
		t.Error("no result became one")
	}
}

func TestComplete(t *testing.T) {
	server := &mcp.Implementation{Name: "interlock", Version: "1"}
	for _, c := range []struct{ in, want string }{
		{`{"content":[]}`, `{"_meta":{"io.modelcontextprotocol/serverInfo":{"name":"interlock","version":"1"}},"content":[],"resultType":"complete"}`},
		{`{"content":[],"_meta":{"io.modelcontextprotocol/serverInfo":{"name":"up"}}}`, `{"_meta":{"io.modelcontextprotocol/serverInfo":{"name":"up"}},"content":[],"resultType":"complete"}`},
		{`{"inputRequests":{}}`, `{"_meta":{"io.modelcontextprotocol/serverInfo":{"name":"interlock","version":"1"}},"inputRequests":{},"resultType":"input_required"}`},
		{`{"content":[{"type":"text","text":"x"}],"inputRequests":{}}`, ""},
	} {
		var fields map[string]json.RawMessage
		if err := json.Unmarshal([]byte(c.in), &fields); err != nil {
			t.Fatal(err)
		}
		err := Complete(fields, server)
		out, _ := json.Marshal(fields)
		if c.want == "" {
			if err == nil || !strings.Contains(err.Error(), "both content and inputRequests") {
				t.Errorf("Complete(%s) = %s, %v; want the SDK's server bug", c.in, out, err)
			}
			continue
		}
		if err != nil || string(out) != c.want {
			t.Errorf("Complete(%s) = %s, %v; want %s", c.in, out, err, c.want)
		}
	}
}

func TestEarlier(t *testing.T) {
	for _, c := range []struct {
		name, in, want string
		ok             bool
	}{
		{"complete, named by the upstream's SDK", `{"_meta":{"io.modelcontextprotocol/serverInfo":{"name":"up"}},"content":[],"resultType":"complete"}`, `{"content":[]}`, true},
		{"other _meta kept", `{"_meta":{"io.modelcontextprotocol/serverInfo":{"name":"up"},"x":1},"content":[],"resultType":"complete"}`, `{"_meta":{"x":1},"content":[]}`, true},
		{"numbers keep their bytes", `{"structuredContent":{"id":12345678901234567890},"content":[],"resultType":"complete"}`, `{"content":[],"structuredContent":{"id":12345678901234567890}}`, true},
		{"asks for input", `{"inputRequests":{},"resultType":"input_required"}`, `{"inputRequests":{},"resultType":"input_required"}`, false},
		{"not an object", `[1]`, `[1]`, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			out, ok := Earlier(json.RawMessage(c.in))
			if ok != c.ok || string(out) != c.want {
				t.Errorf("Earlier(%s) = %s, %v; want %s, %v", c.in, out, ok, c.want, c.ok)
			}
		})
	}
}

func TestIdleTimer(t *testing.T) {
	if NewIdleTimer(0, func() {}) != nil {
		t.Fatal("a timer without a timeout")
	}
	var none *IdleTimer
	none.StartPOST()
	none.EndPOST()
	none.Stop()

	var expired atomic.Bool
	timer := NewIdleTimer(20*time.Millisecond, func() { expired.Store(true) })
	timer.StartPOST()
	time.Sleep(60 * time.Millisecond)
	if expired.Load() {
		t.Fatal("expired with a POST in progress")
	}
	timer.EndPOST()
	deadline := time.Now().Add(5 * time.Second)
	for !expired.Load() && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if !expired.Load() {
		t.Fatal("not expired once idle")
	}

	expired.Store(false)
	timer = NewIdleTimer(20*time.Millisecond, func() { expired.Store(true) })
	timer.Stop()
	timer.StartPOST()
	timer.EndPOST()
	time.Sleep(60 * time.Millisecond)
	if expired.Load() {
		t.Fatal("a stopped timer expired")
	}
}
