package gateway

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/interlock-mcp/interlock/audit"
	"github.com/interlock-mcp/interlock/metrics"
)

// TestEventsAreRecordedAndCounted: a refused API key, an upstream restart
// and hints an upstream tried to loosen each leave an audit record and a
// count at /metrics, which takes the same keys as /mcp.
func TestEventsAreRecordedAndCounted(t *testing.T) {
	m := metrics.New()
	f := testConfig(t, fmt.Sprintf("auth:\n  keys:\n    - {sha256: %s, principal: alice}\n", HashKey("alice-key")), "fx")
	gw, log := startAudited(t, f, Options{Metrics: m})
	srv := httptest.NewServer(gw.Handler(false))
	defer srv.Close()

	get := func(path, key string) (int, string) {
		status, b, _ := bearerRequest(t, http.MethodGet, srv.URL+path, key, "")
		return status, string(b)
	}
	if code, _ := get("/metrics", ""); code != http.StatusUnauthorized {
		t.Errorf("/metrics without a key: %d", code)
	}
	if code, _ := get("/metrics", "wrong-key"); code != http.StatusUnauthorized {
		t.Errorf("/metrics with a wrong key: %d", code)
	}

	cs := dial(t, nil, srv.URL+MCPPath, "alice-key", nil)
	call(t, cs, "crash", map[string]any{})
	eventually(t, "the upstream back", func() bool { return !call(t, cs, "echo", map[string]any{}).IsError })
	call(t, cs, "relabel", map[string]any{"name": "wipe", "annotations": map[string]any{"readOnlyHint": true}})
	eventually(t, "the loosening recorded", func() bool {
		_, body := get("/metrics", "alice-key")
		return strings.Contains(body, `interlock_events_total{event="hints_loosened"} 1`)
	})

	_, body := get("/metrics", "alice-key")
	for _, want := range []string{
		`interlock_events_total{event="auth_refused"} 2`,
		`interlock_upstream_up{upstream="fx"} 1`,
		`interlock_calls_total{decision="allowed",mode="allow",outcome="ok",tool="echo"}`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	events := map[string][]string{}
	for r, err := range log.Records(context.Background(), 1) {
		if err != nil {
			t.Fatal(err)
		}
		if r.Event != "call" {
			events[r.Event] = append(events[r.Event], r.Upstream+" "+r.Tool+" "+r.Detail)
		}
	}
	if got := events["auth_refused"]; len(got) != 2 || !strings.Contains(got[0], "GET /metrics") || !strings.Contains(got[0], "no API key") ||
		!strings.Contains(got[1], "an unknown API key") || strings.Contains(strings.Join(got, " "), "wrong-key") {
		t.Errorf("auth_refused records: %q", got)
	}
	// crash is read-only, so its call was retried: each attempt restarted
	// the upstream, and each restart is one record and one count.
	restarts := events["upstream_restarted"]
	if len(restarts) == 0 || !strings.HasPrefix(restarts[0], "fx ") ||
		!strings.Contains(body, fmt.Sprintf(`interlock_events_total{event="upstream_restarted"} %d`, len(restarts))) {
		t.Errorf("upstream_restarted records: %q", restarts)
	}
	if got := events["hints_loosened"]; len(got) != 1 || !strings.Contains(got[0], "fx wipe") || !strings.Contains(got[0], "readOnlyHint") {
		t.Errorf("hints_loosened records: %q", got)
	}
	if n, err := audit.Verify(log.Records(context.Background(), 1)); err != nil || n == 0 {
		t.Errorf("verify: %d, %v", n, err)
	}
}
