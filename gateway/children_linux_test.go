package gateway

import (
	"bytes"
	"context"
	"fmt"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// markedProcesses counts the running processes whose environment holds
// mark, which the test gives only to the children it means to count.
func markedProcesses(t testing.TB, mark string) int {
	return len(markedPIDs(t, mark))
}

// markedPIDs lists the /proc directories of the running processes whose
// environment holds mark.
func markedPIDs(t testing.TB, mark string) []string {
	t.Helper()
	dirs, err := filepath.Glob("/proc/[0-9]*")
	if err != nil {
		t.Fatal(err)
	}
	var found []string
	for _, d := range dirs {
		env, err := os.ReadFile(filepath.Join(d, "environ"))
		if err != nil {
			continue // gone, or not ours to read
		}
		stat, _ := os.ReadFile(filepath.Join(d, "stat"))
		if zombie := bytes.Contains(stat, []byte(") Z ")); zombie {
			continue
		}
		if bytes.Contains(env, []byte("\x00"+mark+"\x00")) || bytes.HasPrefix(env, []byte(mark+"\x00")) {
			found = append(found, d)
		}
	}
	return found
}

// cpuTicks is the CPU time (user and system, in clock ticks) the
// processes of dirs have used so far.
func cpuTicks(dirs []string) int64 {
	var total int64
	for _, d := range dirs {
		stat, err := os.ReadFile(filepath.Join(d, "stat"))
		if err != nil {
			continue
		}
		// The fields after the command's closing parenthesis; utime and
		// stime are the 12th and 13th of them.
		i := bytes.LastIndexByte(stat, ')')
		fields := strings.Fields(string(stat[i+1:]))
		if len(fields) < 13 {
			continue
		}
		for _, f := range fields[11:13] {
			n, _ := strconv.ParseInt(f, 10, 64)
			total += n
		}
	}
	return total
}

// clockTick is the length of a clock tick of /proc's CPU times (USER_HZ,
// 100 on Linux).
const clockTick = 10 * time.Millisecond

// BenchmarkSessionChildren measures what 8 HTTP sessions of clients of
// 2025-11-25 calling one stdio upstream cost the upstream's children: the
// CPU they spend per call, the children there are, and the first call of
// a session, which with a child per session waits for it to start.
func BenchmarkSessionChildren(b *testing.B) {
	const sessions = 8
	for _, perClient := range []bool{true, false} {
		b.Run(map[bool]string{true: "per_client", false: "shared"}[perClient], func(b *testing.B) {
			mark := fmt.Sprintf("INTERLOCK_CHILD_MARK=bench-%v-%d", perClient, time.Now().UnixNano())
			f := testConfig(b, "", "fx")
			name, value, _ := strings.Cut(mark, "=")
			f.Upstreams[0].Env[name] = value
			f.Upstreams[0].Env["INTERLOCK_FIXTURE"] = "legacy"
			f.Upstreams[0].PerClient = perClient
			gw, err := New(f, Options{Version: "bench", Logger: quiet, Getenv: testEnv("false")})
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { gw.Close() })
			if err := gw.Start(context.Background()); err != nil {
				b.Fatal(err)
			}
			srv := httptest.NewServer(gw.Handler(false))
			b.Cleanup(srv.Close)
			ctx := context.Background()
			var open []*mcp.ClientSession
			var firstCall time.Duration
			for i := range sessions {
				cs, err := mcp.NewClient(&mcp.Implementation{Name: fmt.Sprintf("c%d", i)}, nil).Connect(ctx,
					&mcp.StreamableClientTransport{Endpoint: srv.URL + MCPPath}, &mcp.ClientSessionOptions{ProtocolVersion: "2025-11-25"})
				if err != nil {
					b.Fatal(err)
				}
				b.Cleanup(func() { cs.Close() })
				open = append(open, cs)
				began := time.Now()
				if _, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"i": i}}); err != nil {
					b.Fatal(err)
				}
				firstCall += time.Since(began)
			}
			pids := markedPIDs(b, mark)
			before := cpuTicks(pids)
			b.ResetTimer()
			for i := range b.N {
				if _, err := open[i%sessions].CallTool(ctx, &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"i": i}}); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			spent := time.Duration(cpuTicks(pids)-before) * clockTick
			b.ReportMetric(float64(spent.Microseconds())/float64(b.N), "child-cpu-µs/call")
			b.ReportMetric(float64(len(pids)), "children")
			b.ReportMetric(float64(firstCall.Milliseconds())/sessions, "first-call-ms")
		})
	}
}

// settles waits up to 10 s for count() to be want, and returns what it
// was last.
func settles(want int, count func() int) int {
	deadline := time.Now().Add(10 * time.Second)
	for {
		got := count()
		if got == want || time.Now().After(deadline) {
			return got
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestChildrenDoNotGrowWithSessions opens 12 HTTP sessions of clients of
// 2025-11-25, each calling a tool of one stdio upstream. By default they
// share one child; an upstream of 2026-07-28 has a second one for them,
// of the earlier protocol, beside the one the gateway lists tools on. With
// per_client each session has its own, as well as the shared one, and a
// session's child ends with the session.
func TestChildrenDoNotGrowWithSessions(t *testing.T) {
	const sessions = 12
	for _, tc := range []struct {
		name          string
		legacy        bool // the upstream speaks only 2025-11-25
		perClient     bool
		while, closed int // children while the sessions are open, and after they close
	}{
		{"shared by default", true, false, 1, 1},
		{"shared, an upstream of 2026-07-28", false, false, 2, 2},
		{"per_client", true, true, sessions + 1, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mark := fmt.Sprintf("INTERLOCK_CHILD_MARK=%s-%d", strings.ReplaceAll(t.Name(), "/", "-"), time.Now().UnixNano())
			f := testConfig(t, "", "fx")
			name, value, _ := strings.Cut(mark, "=")
			f.Upstreams[0].Env[name] = value
			if tc.legacy {
				f.Upstreams[0].Env["INTERLOCK_FIXTURE"] = "legacy"
			}
			f.Upstreams[0].PerClient = tc.perClient
			gw := start(t, f, "false")
			srv := httptest.NewServer(gw.Handler(false))
			defer srv.Close()
			var open []*mcp.ClientSession
			for i := range sessions {
				cs, err := mcp.NewClient(&mcp.Implementation{Name: fmt.Sprintf("client-%d", i)}, nil).Connect(context.Background(),
					&mcp.StreamableClientTransport{Endpoint: srv.URL + MCPPath}, &mcp.ClientSessionOptions{ProtocolVersion: "2025-11-25"})
				if err != nil {
					t.Fatal(err)
				}
				open = append(open, cs)
				if res := call(t, cs, "echo", map[string]any{"i": i}); res.IsError {
					t.Fatalf("session %d: echo failed: %+v", i, res)
				}
			}
			if got := settles(tc.while, func() int { return markedProcesses(t, mark) }); got != tc.while {
				t.Errorf("%d sessions: %d children, want %d", sessions, got, tc.while)
			}
			for _, cs := range open {
				cs.Close()
			}
			if got := settles(tc.closed, func() int { return markedProcesses(t, mark) }); got != tc.closed {
				t.Errorf("sessions closed: %d children, want %d", got, tc.closed)
			}
			gw.Close()
			if got := settles(0, func() int { return markedProcesses(t, mark) }); got != 0 {
				t.Errorf("gateway closed: %d children left", got)
			}
		})
	}
}

// TestChildGroupStops starts the upstream through a wrapper that, as `npm
// exec` does, runs the server as a child of its own and leaves another
// process behind it: closing the gateway stops all of them.
func TestChildGroupStops(t *testing.T) {
	mark := fmt.Sprintf("INTERLOCK_CHILD_MARK=group-%d", time.Now().UnixNano())
	f := testConfig(t, "", "fx")
	name, value, _ := strings.Cut(mark, "=")
	f.Upstreams[0].Env[name] = value
	// The wrapper shell starts a long sleep that neither reads stdin nor
	// hears the wrapper's end, then the server, and waits for it.
	f.Upstreams[0].Command = append([]string{"/bin/sh", "-c", `sleep 300 & "$@"; wait`, "wrapper"}, f.Upstreams[0].Command...)
	gw := start(t, f, "false")
	cs := client(t, gw, nil)
	if res := call(t, cs, "echo", map[string]any{}); res.IsError {
		t.Fatalf("echo failed: %+v", res)
	}
	// The wrapper, the sleep and the server.
	if got := settles(3, func() int { return markedProcesses(t, mark) }); got != 3 {
		t.Fatalf("%d processes under the wrapper, want 3", got)
	}
	gw.Close()
	if got := settles(0, func() int { return markedProcesses(t, mark) }); got != 0 {
		t.Errorf("gateway closed: %d processes of the child's group left", got)
	}
}
