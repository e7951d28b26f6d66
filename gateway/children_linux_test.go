package gateway

import (
	"bytes"
	"context"
	"fmt"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// markedProcesses counts the running processes whose environment holds
// mark, which the test gives only to the children it means to count.
func markedProcesses(t *testing.T, mark string) int {
	t.Helper()
	dirs, err := filepath.Glob("/proc/[0-9]*")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
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
			n++
		}
	}
	return n
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
// 2025-11-25, each calling a tool of one stdio upstream: by default they
// share one child; with per_client each has its own, as well as the
// shared one the gateway lists tools on, and a session's child ends with
// the session.
func TestChildrenDoNotGrowWithSessions(t *testing.T) {
	const sessions = 12
	for _, tc := range []struct {
		name          string
		perClient     bool
		while, closed int // children while the sessions are open, and after they close
	}{
		{"shared by default", false, 1, 1},
		{"per_client", true, sessions + 1, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mark := fmt.Sprintf("INTERLOCK_CHILD_MARK=%s-%d", strings.ReplaceAll(t.Name(), "/", "-"), time.Now().UnixNano())
			f := testConfig(t, "", "fx")
			name, value, _ := strings.Cut(mark, "=")
			f.Upstreams[0].Env[name] = value
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
