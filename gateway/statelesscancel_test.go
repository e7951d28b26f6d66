package gateway

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// TestStatelessCancellation: without sessions, a client of 2025-11-25
// cancels a call either by notifications/cancelled in a POST of its own
// (as the TypeScript SDK 1.x does, leaving the call's stream open) or by
// closing the call's stream (as the go-sdk does); either way the call
// stops upstream. A cancellation ends only its own caller's call: not one
// of another key (of the same principal in another tenant, too), and
// none when the caller has two calls of that id in flight.
func TestStatelessCancellation(t *testing.T) {
	keys := map[string][2]string{"alice-acme": {"alice", "acme"}, "alice-globex": {"alice", "globex"}}
	var yaml strings.Builder
	yaml.WriteString("auth:\n  keys:\n")
	for key, who := range keys {
		fmt.Fprintf(&yaml, "    - {sha256: %s, principal: %q, tenant: %q}\n", HashKey(key), who[0], who[1])
	}
	var logged logBuffer
	gw := startLogged(t, testConfig(t, yaml.String(), "fx"), "false", logged.logger())
	srv := httptest.NewServer(gw.Handler(true))
	t.Cleanup(srv.Close)
	url := srv.URL + MCPPath
	inFlight := func() int {
		gw.inFlight.mu.Lock()
		defer gw.inFlight.mu.Unlock()
		return gw.inFlight.n
	}
	// slow starts a call of key that runs 30 s unless it is stopped; the
	// returned func closes its stream.
	slow := func(key string) context.CancelFunc {
		ctx, closeStream := context.WithCancel(context.Background())
		t.Cleanup(closeStream)
		go func() {
			req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url,
				strings.NewReader(`{"jsonrpc":"2.0","id":"slow-1","method":"tools/call","params":{"name":"slow","arguments":{"ms":30000}}}`))
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Accept", "application/json, text/event-stream")
			req.Header.Set("Mcp-Protocol-Version", "2025-11-25")
			req.Header.Set("Authorization", "Bearer "+key)
			if res, err := http.DefaultClient.Do(req); err == nil {
				res.Body.Close()
			}
		}()
		return closeStream
	}
	cancel := func(key string) {
		t.Helper()
		status, b := rawMCP(t, url, key, "", nil, `{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":"slow-1"}}`)
		if status != http.StatusAccepted {
			t.Fatalf("cancelling: %d %s", status, b)
		}
	}
	// settles waits until want calls are in flight and stay so for a
	// moment.
	settles := func(step string, want int) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for inFlight() != want {
			if time.Now().After(deadline) {
				t.Fatalf("%s: %d calls in flight, want %d", step, inFlight(), want)
			}
			time.Sleep(20 * time.Millisecond)
		}
		time.Sleep(300 * time.Millisecond)
		if n := inFlight(); n != want {
			t.Fatalf("%s: %d calls in flight, want %d", step, n, want)
		}
	}

	t.Run("by notification", func(t *testing.T) {
		slow("alice-acme")
		settles("started", 1)
		cancel("alice-acme")
		settles("cancelled", 0)
	})
	t.Run("by closing the stream", func(t *testing.T) {
		closeStream := slow("alice-acme")
		settles("started", 1)
		closeStream()
		settles("closed", 0)
	})
	t.Run("another caller's call of that id goes on", func(t *testing.T) {
		closeStream := slow("alice-acme")
		settles("started", 1)
		cancel("alice-globex")
		settles("cancelled by another", 1)
		closeStream()
		settles("closed", 0)
	})
	t.Run("a cancellation naming no call in flight ends nothing", func(t *testing.T) {
		closeStream := slow("alice-acme")
		settles("started", 1)
		for _, id := range []string{`"slow-2"`, `"SLOW-1"`, `{"id":"slow-1"}`, `["slow-1"]`, `null`, `"slow-1\u0000"`, `"` + strings.Repeat("x", 70000) + `"`} {
			status, b := rawMCP(t, url, "alice-acme", "", nil, `{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":`+id+`}}`)
			if status >= 500 {
				t.Errorf("cancelling %.40s: %d %.200s", id, status, b)
			}
		}
		settles("after cancellations of other ids", 1)
		closeStream()
		settles("closed", 0)
	})
	t.Run("two calls of one caller with that id: neither is ended", func(t *testing.T) {
		closeFirst, closeSecond := slow("alice-acme"), slow("alice-acme")
		settles("started", 2)
		cancel("alice-acme")
		settles("cancelled, ambiguously", 2)
		closeFirst()
		settles("the first closed", 1)
		cancel("alice-acme")
		settles("the second cancelled", 0)
		closeSecond()
	})
	// Each ended call is on record as cancelled, not as a failure of
	// interlock's.
	deadline := time.Now().Add(5 * time.Second)
	for strings.Count(logged.String(), "outcome=CANCELLED") < 6 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if out := logged.String(); strings.Count(out, "outcome=CANCELLED") != 6 || strings.Contains(out, "INTERNAL_ERROR") {
		t.Errorf("the gateway's log of the calls:\n%s", out)
	}
}
