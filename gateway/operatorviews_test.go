package gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/interlock-mcp/interlock"
	"github.com/interlock-mcp/interlock/config"
	"github.com/interlock-mcp/interlock/metrics"
)

// TestOperatorViews: /metrics and the details of /readyz and /healthz
// name every upstream, tool and gateway, so with keys configured they are
// for the operator, a key whose tenant sees every upstream and tool. A key
// of a tenant limited to some tools or upstreams gets 403
// PERMISSION_DENIED on /metrics, and from the others only the status;
// readiness itself answers anyone, as a probe needs.
func TestOperatorViews(t *testing.T) {
	command, err := json.Marshal(fixtureCommand(t))
	if err != nil {
		t.Fatal(err)
	}
	f := testConfig(t, fmt.Sprintf(`
upstreams:
  - {name: fx, command: %s, env: {INTERLOCK_FIXTURE: "1"}}
auth:
  keys:
    - {sha256: %s, principal: ops}
    - {sha256: %s, principal: bot, tenant: tools-only}
    - {sha256: %s, principal: bot, tenant: fx-only}
tenants:
  - {name: tools-only, tools: [echo]}
  - {name: fx-only, upstreams: [fx]}
`, command, HashKey("ops-key"), HashKey("tools-key"), HashKey("fx-key")))
	// An upstream that never starts, for /readyz to name.
	f.Upstreams = append(f.Upstreams, &config.Upstream{Name: "ghost", Command: []string{"/nonexistent/mcp-server"}})
	const drift = "config digests differ: 3f2a9c1b7d4e (gateway gw-b)"
	gw := newGateway(t, f, Options{Metrics: metrics.New(), Drift: func(context.Context) string { return drift },
		Logger: quiet, Getenv: testEnv("false")})
	t.Cleanup(func() { gw.Close() })
	if err := gw.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	h := gw.Handler(false)
	get := func(method, path, key, body string) (int, string) {
		req := httptest.NewRequest(method, path, strings.NewReader(body))
		if key != "" {
			req.Header.Set("Authorization", "Bearer "+key)
		}
		if body != "" {
			req.Header.Set("Content-Type", "application/json")
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		b, _ := io.ReadAll(rec.Body)
		return rec.Code, string(b)
	}
	// A call, so that the metrics name a tool.
	if code, body := get(http.MethodPost, "/v1/tools/echo/call", "ops-key", `{"arguments":{}}`); code != http.StatusOK {
		t.Fatalf("the call: %d %s", code, body)
	}

	// What only the operator may read, in each answer.
	secrets := []string{`tool="echo"`, `upstream="fx"`, "ghost", "gw-b", "3f2a9c1b7d4e", `"upstreams"`}
	tests := []struct {
		name    string
		key     string
		metrics int // the status of /metrics
	}{
		{"no key", "", http.StatusUnauthorized},
		{"a tenant limited to some tools", "tools-key", http.StatusForbidden},
		{"a tenant limited to some upstreams", "fx-key", http.StatusForbidden},
		{"the operator", "ops-key", http.StatusOK},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			operator := tt.metrics == http.StatusOK
			code, metricsBody := get(http.MethodGet, "/metrics", tt.key, "")
			if code != tt.metrics {
				t.Errorf("/metrics: %d %.300s", code, metricsBody)
			}
			if code == http.StatusForbidden {
				var refusal interlock.Body
				if err := json.Unmarshal([]byte(metricsBody), &refusal); err != nil || refusal.Code != interlock.CodePermissionDenied || refusal.RecoveryHint == "" {
					t.Errorf("/metrics refusal: %s (%v)", metricsBody, err)
				}
			}
			readyCode, ready := get(http.MethodGet, "/readyz", tt.key, "")
			var status struct{ Status string }
			if err := json.Unmarshal([]byte(ready), &status); err != nil || readyCode != http.StatusServiceUnavailable || status.Status != "not ready" {
				t.Errorf("/readyz: %d %s", readyCode, ready)
			}
			healthCode, health := get(http.MethodGet, "/healthz", tt.key, "")
			if healthCode != http.StatusOK || !strings.Contains(health, `"status":"ok"`) {
				t.Errorf("/healthz: %d %s", healthCode, health)
			}
			for path, body := range map[string]string{"/metrics": metricsBody, "/readyz": ready, "/healthz": health} {
				for _, s := range secrets {
					// Each answer the operator gets names some of them.
					if operator || !strings.Contains(body, s) {
						continue
					}
					t.Errorf("%s shows %s to a caller who is not the operator", path, s)
				}
			}
			if operator {
				for _, want := range []string{`tool="echo"`, `upstream="fx"`} {
					if !strings.Contains(metricsBody, want) {
						t.Errorf("/metrics lacks %s", want)
					}
				}
				for _, want := range []string{"upstream ghost", drift} {
					if !strings.Contains(ready, want) {
						t.Errorf("/readyz lacks %q: %s", want, ready)
					}
				}
				if !strings.Contains(health, `"name":"fx"`) {
					t.Errorf("/healthz lacks the upstreams: %s", health)
				}
			}
		})
	}
}
