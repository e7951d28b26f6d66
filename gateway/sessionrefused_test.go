package gateway

import (
	"bytes"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/interlock-mcp/interlock/metrics"
)

// TestRefusedSessionsAreLoggedAndCounted: a session refused for the cap
// is a 429 to the client, a warning in the gateway's log and a count at
// /metrics, so that an operator learns why a client cannot connect.
func TestRefusedSessionsAreLoggedAndCounted(t *testing.T) {
	f := testConfig(t, fmt.Sprintf("http: {max_sessions_per_principal: 1}\nauth:\n  keys:\n    - {sha256: %s, principal: ci}\n", HashKey("ci-key")), "fx")
	var logged bytes.Buffer
	m := metrics.New()
	gw := newGateway(t, f, Options{Version: "test", Metrics: m, Logger: slog.New(slog.NewTextHandler(&logged, nil)), Getenv: testEnv("false")})
	t.Cleanup(func() { gw.Close() })
	if err := gw.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(gw.Handler(false))
	defer srv.Close()
	cs, err := connectKey(srv.URL+MCPPath, "ci-key")
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	init := `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"x","version":"1"}}}`
	for i := range 2 {
		if status, body := rawMCP(t, srv.URL+MCPPath, "ci-key", "", nil, init); status != http.StatusTooManyRequests {
			t.Fatalf("refusal %d: %d %s", i, status, body)
		}
	}
	if got := strings.Count(logged.String(), "refused a new MCP session"); got != 2 {
		t.Errorf("%d refusals logged, want 2:\n%s", got, logged.String())
	}
	if !strings.Contains(logged.String(), "max_sessions_per_principal=1") {
		t.Errorf("the log does not name the cap:\n%s", logged.String())
	}
	rec := httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	body, _ := io.ReadAll(rec.Body)
	if !strings.Contains(string(body), `interlock_events_total{event="session_refused"} 2`) {
		t.Errorf("/metrics does not count the refusals:\n%s", body)
	}
}
