package gateway

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// TestNewProtocol routes requests by the protocol generation they name,
// in the header or in the _meta of any message of the body.
func TestNewProtocol(t *testing.T) {
	cases := []struct {
		name, header, body string
		want               bool
	}{
		{"initialize of an earlier client", "", `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25"}}`, false},
		{"a call on a session", "2025-11-25", `{"jsonrpc":"2.0","id":2,"method":"tools/list"}`, false},
		{"server/discover", "2026-07-28", `{"jsonrpc":"2.0","id":1,"method":"server/discover","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}}}`, true},
		{"the version in _meta alone", "", `{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}}}`, true},
		{"a later version in the header alone", "2027-01-01", `{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":1}}`, true},
		{"one message of a batch", "", `[{"jsonrpc":"2.0","id":1,"method":"ping"},{"jsonrpc":"2.0","id":2,"method":"ping","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}}}]`, true},
		{"a _meta version of another type", "", `{"jsonrpc":"2.0","id":1,"method":"ping","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":20260728}}}`, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var got string
			route := byGeneration(
				http.HandlerFunc(func(http.ResponseWriter, *http.Request) { got = "sessions" }),
				http.HandlerFunc(func(http.ResponseWriter, *http.Request) { got = "stateless" }))
			r := httptest.NewRequestWithContext(context.Background(), http.MethodPost, MCPPath, strings.NewReader(c.body))
			if c.header != "" {
				r.Header.Set(protocolVersionHeader, c.header)
			}
			mcpEnvelope(1<<20, route).ServeHTTP(httptest.NewRecorder(), r)
			want := map[bool]string{true: "stateless", false: "sessions"}[c.want]
			if got != want {
				t.Errorf("served by %q, want %q", got, want)
			}
		})
	}
}
