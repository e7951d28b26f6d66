package gateway

import (
	"context"
	"fmt"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/interlock-mcp/interlock"
	"github.com/interlock-mcp/interlock/config"
)

// TestUpstreamGuard drives the fixture through an upstream's guard: a
// failing server opens the circuit (CIRCUIT_OPEN with retry_after_ms), a
// full bulkhead refuses at once, and a slow attempt is UPSTREAM_TIMEOUT.
func TestUpstreamGuard(t *testing.T) {
	t.Run("the circuit opens after consecutive failures", func(t *testing.T) {
		f := testConfig(t, "", "fx")
		f.Upstreams[0].Retries = new(0)
		f.Upstreams[0].Breaker = &config.Breaker{Failures: 3, Delay: "1s", Every: time.Second}
		gw := start(t, f, "false")
		cs := client(t, gw, nil)
		for range 3 {
			if b := body(t, call(t, cs, "fail", map[string]any{"code": -32603, "message": "db down"})); b.Code != interlock.CodeUpstreamError {
				t.Fatalf("failure: %+v", b)
			}
		}
		b := body(t, call(t, cs, "echo", map[string]any{}))
		if b.Code != interlock.CodeCircuitOpen || !b.Retriable || b.RetryAfterMS <= 0 || b.RetryAfterMS > 1000 {
			t.Fatalf("open circuit: %+v", b)
		}
		time.Sleep(time.Second)
		if res := call(t, cs, "echo", map[string]any{}); res.IsError {
			t.Errorf("after the delay the trial call should run: %+v", body(t, res))
		}
	})
	t.Run("arguments the upstream refuses do not open it", func(t *testing.T) {
		f := testConfig(t, "", "fx")
		f.Upstreams[0].Breaker = &config.Breaker{Failures: 2, Delay: "1m", Every: time.Minute}
		gw := start(t, f, "false")
		cs := client(t, gw, nil)
		for range 4 {
			if b := body(t, call(t, cs, "fail", map[string]any{"code": -32602, "message": "bad"})); b.Code != interlock.CodeValidationFailed {
				t.Fatalf("refusal: %+v", b)
			}
		}
		if res := call(t, cs, "echo", map[string]any{}); res.IsError {
			t.Errorf("answers opened the circuit: %+v", body(t, res))
		}
	})
	t.Run("one tenant's failures open its own circuit", func(t *testing.T) {
		acme, other, _ := twoTenants(t, func(u *config.Upstream) {
			u.Retries = new(0)
			u.Breaker = &config.Breaker{Failures: 3, Delay: "1m", Every: time.Minute}
		})
		// Arguments the tool fails on, as many times as open a circuit.
		for range 3 {
			call(t, other, "fail", map[string]any{"code": -32603, "message": "crafted"})
		}
		if b := body(t, call(t, other, "echo", map[string]any{})); b.Code != interlock.CodeCircuitOpen {
			t.Errorf("the failing tenant's next call: %+v", b)
		}
		if res := call(t, acme, "echo", map[string]any{}); res.IsError {
			t.Errorf("another tenant's call, whose principal has the same name: %+v", body(t, res))
		}
	})
	t.Run("one tenant's slow calls leave room for another's", func(t *testing.T) {
		acme, other, gw := twoTenants(t, func(u *config.Upstream) { u.MaxInFlight = 4 })
		ctx, cancel := context.WithCancel(context.Background())
		var wg sync.WaitGroup
		for range 3 {
			wg.Go(func() {
				_, _ = other.CallTool(ctx, &mcp.CallToolParams{Name: "slow", Arguments: map[string]any{"ms": 60000}})
			})
		}
		defer wg.Wait()
		defer cancel()
		eventually(t, "three slow calls in flight", func() bool { return flightsOnLinks(gw) == 3 })
		if b := body(t, call(t, other, "echo", map[string]any{})); b.Code != interlock.CodeBulkheadFull {
			t.Errorf("the slow tenant's fourth call: %+v", b)
		}
		if res := call(t, acme, "echo", map[string]any{}); res.IsError {
			t.Errorf("another tenant's call: %+v", body(t, res))
		}
	})
	t.Run("a full bulkhead refuses at once", func(t *testing.T) {
		f := testConfig(t, "", "fx")
		f.Upstreams[0].MaxInFlight = 1
		gw := start(t, f, "false")
		cs := client(t, gw, nil)
		// The slow call holds the one place until it is cancelled, so the
		// second call meets a full bulkhead however loaded the machine.
		ctx, cancel := context.WithCancel(context.Background())
		var wg sync.WaitGroup
		wg.Go(func() {
			_, _ = cs.CallTool(ctx, &mcp.CallToolParams{Name: "slow", Arguments: map[string]any{"ms": 60000}})
		})
		defer wg.Wait()
		defer cancel()
		eventually(t, "the slow call in flight on the upstream's link", func() bool { return flightsOnLinks(gw) == 1 })
		start := time.Now()
		b := body(t, call(t, cs, "echo", map[string]any{}))
		// At once: a call that waited for the place would wait a minute.
		if took := time.Since(start); b.Code != interlock.CodeBulkheadFull || !b.Retriable || took > 10*time.Second {
			t.Errorf("second call: %+v after %v", b, took)
		}
	})
	t.Run("an attempt over the timeout", func(t *testing.T) {
		f := testConfig(t, "", "fx")
		f.Upstreams[0].CallTimeout = 200 * time.Millisecond
		f.Upstreams[0].Retries = new(0)
		gw := start(t, f, "false")
		cs := client(t, gw, nil)
		if b := body(t, call(t, cs, "slow", map[string]any{"ms": 2000})); b.Code != interlock.CodeUpstreamTimeout {
			t.Errorf("slow call: %+v", b)
		}
	})
}

// twoTenants serves the fixture over HTTP, its upstream as edit leaves it,
// to alice of tenant acme and alice of tenant other.
func twoTenants(t *testing.T, edit func(*config.Upstream)) (acme, other *mcp.ClientSession, gw *Gateway) {
	f := testConfig(t, fmt.Sprintf(`
auth:
  keys:
    - {sha256: %s, principal: alice, tenant: acme}
    - {sha256: %s, principal: alice, tenant: other}
`, HashKey("alice-key"), HashKey("other-alice-key")), "fx")
	edit(f.Upstreams[0])
	gw = start(t, f, "false")
	srv := httptest.NewServer(gw.Handler(false))
	t.Cleanup(srv.Close)
	return dial(t, nil, srv.URL+MCPPath, "alice-key", nil), dial(t, nil, srv.URL+MCPPath, "other-alice-key", nil), gw
}
