package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/interlock-mcp/interlock"
	"github.com/interlock-mcp/interlock/config"
)

func TestRetryDelay(t *testing.T) {
	tests := []struct {
		attempt int
		want    time.Duration
	}{
		{0, 500 * time.Millisecond},
		{1, time.Second},
		{2, 2 * time.Second},
		{5, 16 * time.Second},
		{6, reconnectMax},
		{1000, reconnectMax},
	}
	for _, tt := range tests {
		t.Run(tt.want.String(), func(t *testing.T) {
			if got := retryDelay(tt.attempt); got != tt.want {
				t.Errorf("retryDelay(%d) = %s", tt.attempt, got)
			}
		})
	}
}

// TestRetryUntilBacksOff checks, in a bubble of fake time, when a
// reconnect loop tries again and that it stops with its context.
func TestRetryUntilBacksOff(t *testing.T) {
	tests := []struct {
		name     string
		first    int
		failures int
		want     []time.Duration // since the loop started
	}{
		{"from the first delay", 0, 3, []time.Duration{500 * time.Millisecond, 1500 * time.Millisecond, 3500 * time.Millisecond, 7500 * time.Millisecond}},
		{"after links that died young", 6, 1, []time.Duration{reconnectMax, 2 * reconnectMax}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				begin := time.Now()
				var at []time.Duration
				err := retryUntil(t.Context(), tt.first, func(context.Context) error {
					at = append(at, time.Since(begin))
					if len(at) <= tt.failures {
						return errors.New("down")
					}
					return nil
				})
				if err != nil || len(at) != len(tt.want) {
					t.Fatalf("err %v, attempts at %v", err, at)
				}
				for i := range at {
					if at[i] != tt.want[i] {
						t.Errorf("attempt %d at %s, want %s", i, at[i], tt.want[i])
					}
				}
			})
		})
	}
	t.Run("stops with its context", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
			defer cancel()
			tries := 0
			err := retryUntil(ctx, 0, func(context.Context) error { tries++; return errors.New("down") })
			// 0.5+1+2+4+8+16+30 s is 61.5 s: six attempts fit in the minute.
			if !errors.Is(err, context.DeadlineExceeded) || tries != 6 {
				t.Errorf("err %v after %d tries", err, tries)
			}
		})
	})
}

// TestUpstreamDownAtStart: the gateway starts without an upstream that is
// down, serves the others, is not ready, and mirrors its tools once it
// answers.
func TestUpstreamDownAtStart(t *testing.T) {
	gate := filepath.Join(t.TempDir(), "up")
	f := testConfig(t, "", "fx", "late:l_")
	f.Upstreams[1].Env["INTERLOCK_FIXTURE_UNTIL"] = gate
	gw := start(t, f, "false")
	if counts := gw.ToolCounts(); counts["fx"] != fixtureTools || counts["late"] != 0 {
		t.Fatalf("ToolCounts = %v", counts)
	}
	cs := client(t, gw, nil)
	if res := call(t, cs, "echo", map[string]any{}); res.IsError {
		t.Errorf("the other upstream does not serve: %+v", res)
	}
	if got := gw.Ready(context.Background()); len(got) != 1 || got[0].Name != "upstream late" {
		t.Errorf("Ready = %v", got)
	}
	if err := os.WriteFile(gate, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the late upstream's tools", func() bool { return gw.ToolCounts()["late"] == fixtureTools })
	if got := gw.Ready(context.Background()); len(got) != 0 {
		t.Errorf("Ready = %v", got)
	}
	if res := call(t, cs, "l_echo", map[string]any{}); res.IsError {
		t.Errorf("l_echo: %+v", body(t, res))
	}
}

// TestChildThatDiesFailsItsCalls: a call in flight when its child dies
// ends UPSTREAM_UNAVAILABLE, the other upstreams serve on, and the child
// is started again in the background.
func TestChildThatDiesFailsItsCalls(t *testing.T) {
	f := testConfig(t, "", "fx", "other:o_")
	// No retries: the client gets the answer of the attempt the child
	// took, not that of a retry made after the child was gone.
	none := 0
	f.Upstreams[0].Retries = &none
	gw := start(t, f, "false")
	cs := client(t, gw, nil)
	slow := make(chan *mcp.CallToolResult, 1)
	go func() {
		res, _ := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "slow", Arguments: map[string]any{"ms": 20000}})
		slow <- res
	}()
	// The slow call must be on the child's link when the child dies: a
	// call still waiting for a link would wait for the restart instead,
	// and prove nothing about a call the child took.
	eventually(t, "the slow call in flight on the child's link", func() bool { return flightsOnLinks(gw) == 1 })
	if b := body(t, call(t, cs, "crash", map[string]any{})); b.Code != interlock.CodeUpstreamUnavailable {
		t.Errorf("crash: %+v", b)
	}
	select {
	case res := <-slow:
		if res == nil {
			t.Fatal("the call in flight failed as a protocol error")
		}
		// The child took the call: it may have run, and the answer says so.
		if b := body(t, res); b.Code != interlock.CodeUpstreamUnavailable || !b.Retriable ||
			!strings.Contains(b.Message, "may or may not have run") || strings.Contains(b.Message, "EOF") {
			t.Errorf("the call in flight: %+v", b)
		}
	case <-time.After(10 * time.Second):
		// Half the slow call's 20 s: a call made again on the restarted
		// child would still be running.
		t.Fatal("the call in flight did not end with its child")
	}
	if n := flightsOnLinks(gw); n != 0 {
		t.Errorf("%d requests still in flight after the child died", n)
	}
	if res := call(t, cs, "o_echo", map[string]any{}); res.IsError {
		t.Errorf("the other upstream stopped serving: %+v", body(t, res))
	}
	eventually(t, "the child started again", func() bool { return !call(t, cs, "echo", map[string]any{}).IsError })
}

// TestReadyz: 200 when every upstream is connected and every probe
// answers; 503 naming what is not otherwise, the names only to key holders.
func TestReadyz(t *testing.T) {
	storeDown := errors.New("dial tcp 10.0.0.9:6379: connection refused")
	probes := []Probe{
		{Name: "token store", Check: func(context.Context) error { return nil }},
		{Name: "audit log", Check: func(context.Context) error { return storeDown }},
	}
	tests := []struct {
		name     string
		keys     bool
		probes   []Probe
		down     bool
		key      string
		status   int
		notReady []string
	}{
		{"all ready", false, probes[:1], false, "", http.StatusOK, nil},
		{"a store down", false, probes, false, "", http.StatusServiceUnavailable, []string{"audit log"}},
		{"an upstream down", false, probes[:1], true, "", http.StatusServiceUnavailable, []string{"upstream ghost"}},
		{"without a key", true, probes, true, "", http.StatusServiceUnavailable, nil},
		{"with a key", true, probes, true, "k", http.StatusServiceUnavailable, []string{"upstream ghost", "audit log"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := testConfig(t, "", "fx")
			if tt.keys {
				f.Auth.Keys = []*config.Key{{SHA256: HashKey("k"), Principal: "ops", Tenant: "acme"}}
			}
			if tt.down {
				f.Upstreams = append(f.Upstreams, &config.Upstream{Name: "ghost", Command: []string{"/nonexistent/mcp-server"}})
			}
			gw := newGateway(t, f, Options{Probes: tt.probes, Logger: quiet})
			defer gw.Close()
			if err := gw.Start(context.Background()); err != nil {
				t.Fatal(err)
			}
			req := httptest.NewRequest(http.MethodGet, "/readyz", nil)
			if tt.key != "" {
				req.Header.Set("Authorization", "Bearer "+tt.key)
			}
			rec := httptest.NewRecorder()
			gw.Handler(false).ServeHTTP(rec, req)
			var got struct {
				Status   string     `json:"status"`
				NotReady []NotReady `json:"not_ready"`
			}
			if err := json.Unmarshal(rec.Body.Bytes(), &got); err != nil {
				t.Fatalf("body %q: %v", rec.Body, err)
			}
			var names []string
			for _, n := range got.NotReady {
				names = append(names, n.Name)
			}
			if rec.Code != tt.status || strings.Join(names, ",") != strings.Join(tt.notReady, ",") {
				t.Errorf("%d %s", rec.Code, rec.Body)
			}
			if strings.Contains(rec.Body.String(), "10.0.0.9") || strings.Contains(rec.Body.String(), "nonexistent") {
				t.Errorf("the body carries an error's text: %s", rec.Body)
			}
		})
	}
}

// TestDrain: draining refuses new calls, on MCP and the REST face alike,
// lets those in flight finish, whichever face they came by, and gives up
// when its context ends.
func TestDrain(t *testing.T) {
	tests := []struct {
		name    string
		rest    bool // the call in flight came over the REST face
		slowMS  int
		bound   time.Duration
		drained bool
	}{
		{"the call in flight finishes", false, 300, 10 * time.Second, true},
		{"the bound ends the wait", false, 1500, 200 * time.Millisecond, false},
		{"the REST call in flight finishes", true, 300, 10 * time.Second, true},
		{"the bound ends the wait for a REST call", true, 1500, 200 * time.Millisecond, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			gw := start(t, testConfig(t, "", "fx"), "false")
			srv := httptest.NewServer(gw.Handler(false))
			defer srv.Close()
			cs := client(t, gw, nil)
			ran := make(chan bool, 1)
			go func() {
				if tt.rest {
					resp, err := http.Post(srv.URL+"/v1/tools/slow/call", "application/json", strings.NewReader(fmt.Sprintf(`{"arguments":{"ms":%d}}`, tt.slowMS)))
					if err == nil {
						resp.Body.Close()
					}
					ran <- err == nil && resp.StatusCode == http.StatusOK
					return
				}
				res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "slow", Arguments: map[string]any{"ms": tt.slowMS}})
				ran <- err == nil && !res.IsError
			}()
			drained := drainOne(t, gw, tt.bound)
			refused := body(t, call(t, cs, "echo", map[string]any{}))
			if refused.Code != interlock.CodeUpstreamUnavailable || !refused.Retriable {
				t.Errorf("a call while draining: %+v", refused)
			}
			// The REST face answers with the same body, as a 503.
			var want map[string]any
			b, _ := json.Marshal(refused)
			if err := json.Unmarshal(b, &want); err != nil {
				t.Fatal(err)
			}
			for _, path := range []string{"/v1/tools/echo/call", "/v1/approvals/a1/approve"} {
				if status, got := post(t, srv.URL+path, "", `{}`); status != http.StatusServiceUnavailable || !reflect.DeepEqual(got, want) {
					t.Errorf("POST %s while draining: %d %v, want 503 %v", path, status, got, want)
				}
			}
			if got := gw.Ready(context.Background()); len(got) != 1 || got[0].Name != "gateway" {
				t.Errorf("Ready while draining = %+v, want the gateway not ready", got)
			}
			if err := <-drained; (err == nil) != tt.drained {
				t.Errorf("Drain = %v", err)
			}
			if tt.drained && !<-ran {
				t.Error("the call in flight did not run")
			}
		})
	}
}

// drainOne waits until gw has one request in flight, then drains gw for
// at most bound; it returns once the drain began, with where the drain's
// outcome will be told.
func drainOne(t *testing.T, gw *Gateway, bound time.Duration) <-chan error {
	t.Helper()
	eventually(t, "one request in flight", func() bool {
		gw.inFlight.mu.Lock()
		defer gw.inFlight.mu.Unlock()
		return gw.inFlight.n == 1
	})
	ctx, cancel := context.WithTimeout(context.Background(), bound)
	drained := make(chan error, 1)
	go func() {
		defer cancel()
		drained <- gw.Drain(ctx)
	}()
	eventually(t, "draining", func() bool {
		gw.inFlight.mu.Lock()
		defer gw.inFlight.mu.Unlock()
		return gw.inFlight.draining
	})
	return drained
}

// TestDrainWaitsForReads: a resource read in flight is let finish by a
// drain, and one that comes while it drains is refused, nothing asked.
func TestDrainWaitsForReads(t *testing.T) {
	f := testConfig(t, "", "fx")
	f.Upstreams[0].Env["INTERLOCK_FIXTURE"] = "probe"
	gw := start(t, f, "false")
	cs := client(t, gw, nil)
	read := make(chan error, 1)
	go func() {
		res, err := cs.ReadResource(context.Background(), &mcp.ReadResourceParams{URI: "slow://500"})
		if err == nil && (len(res.Contents) != 1 || res.Contents[0].Text != "slept") {
			err = fmt.Errorf("read %+v", res.Contents)
		}
		read <- err
	}()
	drained := drainOne(t, gw, 10*time.Second)
	if _, err := cs.ReadResource(context.Background(), &mcp.ReadResourceParams{URI: "slow://0"}); err == nil ||
		!strings.Contains(err.Error(), "shutting down") {
		t.Errorf("a read while draining: %v", err)
	}
	if err := <-drained; err != nil {
		t.Errorf("Drain = %v", err)
	}
	if err := <-read; err != nil {
		t.Errorf("the read in flight: %v", err)
	}
}

// TestUpstreamThatHangs: an upstream that never answers the handshake
// delays the start by a bounded time, and is retried in the background
// like one that is down.
func TestUpstreamThatHangs(t *testing.T) {
	saved := connectTimeout
	connectTimeout = 300 * time.Millisecond
	t.Cleanup(func() { connectTimeout = saved })
	f := testConfig(t, "", "fx", "stuck:s_")
	f.Upstreams[1].Env["INTERLOCK_FIXTURE"] = "hang"
	began := time.Now()
	gw := start(t, f, "false")
	// The connect timeout, then the SDK's 5 s for the child to exit once
	// its stdin is closed before it is sent SIGTERM.
	if took := time.Since(began); took > connectTimeout+8*time.Second {
		t.Errorf("Start took %s", took)
	}
	if got := gw.Ready(context.Background()); len(got) != 1 || got[0].Name != "upstream stuck" {
		t.Errorf("Ready = %v", got)
	}
	if res := call(t, client(t, gw, nil), "echo", map[string]any{}); res.IsError {
		t.Errorf("the other upstream does not serve: %+v", body(t, res))
	}
}

// TestUpstreamThatFlaps: a child that dies soon after each start is
// started again ever more slowly, not in a tight loop.
func TestUpstreamThatFlaps(t *testing.T) {
	starts := filepath.Join(t.TempDir(), "starts")
	f := testConfig(t, "", "flaky")
	const lifetime = 200 * time.Millisecond
	f.Upstreams[0].Env["INTERLOCK_FIXTURE_LIFETIME"] = lifetime.String()
	f.Upstreams[0].Env["INTERLOCK_FIXTURE_STARTS"] = starts
	start(t, f, "false")
	// Each child writes when it started. Between two starts the child
	// lived its lifetime and the gateway waited retryDelay(n): a gap can
	// only grow on a loaded machine, never shrink, so the bounds below
	// hold however slow the machine is. Without the growing wait the
	// second gap would be as short as the first.
	var times []time.Time
	eventually(t, "three starts", func() bool {
		b, _ := os.ReadFile(starts)
		times = times[:0]
		for line := range strings.Lines(string(b)) {
			ns, err := strconv.ParseInt(strings.TrimSpace(line), 10, 64)
			if err != nil {
				return false // a line being written
			}
			times = append(times, time.Unix(0, ns))
		}
		return len(times) >= 3
	})
	for n := range 2 {
		gap, least := times[n+1].Sub(times[n]), lifetime+retryDelay(n)
		if gap < least {
			t.Errorf("start %d came %v after start %d, want at least %v", n+2, gap.Round(time.Millisecond), n+1, least)
		}
	}
}

// reconnectingNow reports whether the loop that restores u's shared link runs.
func (u *upstream) reconnectingNow() bool {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.reconnecting
}
