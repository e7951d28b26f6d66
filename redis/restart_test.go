package redis_test

import (
	"context"
	"fmt"
	"net"
	"os/exec"
	"strconv"
	"testing"
	"time"

	"github.com/interlock-mcp/interlock/approval"
	"github.com/interlock-mcp/interlock/consolestate"
	"github.com/interlock-mcp/interlock/consolestate/consolestatetest"
	"github.com/interlock-mcp/interlock/redis"
)

// ownServer is a Redis server of the test's own, on a port of its own,
// which the test may stop and start again (the shared one it must not):
// appendonly with fsync always, so what was written before a stop is
// there after it.
type ownServer struct {
	t    *testing.T
	port int
	dir  string
	cmd  *exec.Cmd
}

func newOwnServer(t *testing.T) *ownServer {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	s := &ownServer{t: t, port: port, dir: t.TempDir()}
	s.start()
	t.Cleanup(s.stop)
	return s
}

func (s *ownServer) url() string { return fmt.Sprintf("redis://127.0.0.1:%d/0", s.port) }

func (s *ownServer) start() {
	s.t.Helper()
	s.cmd = exec.Command("redis-server", "--port", strconv.Itoa(s.port), "--bind", "127.0.0.1", "--dir", s.dir,
		"--appendonly", "yes", "--appendfsync", "always", "--save", "")
	if err := s.cmd.Start(); err != nil {
		s.t.Fatalf("redis-server must be installed: %v", err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		c, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", s.port))
		if err == nil {
			c.Close()
			return
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("redis-server did not start on port %d", s.port)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// stop kills the server, as a crash would.
func (s *ownServer) stop() {
	if s.cmd != nil && s.cmd.Process != nil {
		s.cmd.Process.Kill()
		s.cmd.Wait()
		s.cmd = nil
	}
}

// TestConsoleAfterARestart: while Redis is away the console's state
// answers with errors, never with a session; once it is back, the
// sessions written before are there, and a listener of the signal hears
// again, after a word that says it may have missed some.
func TestConsoleAfterARestart(t *testing.T) {
	srv := newOwnServer(t)
	ctx := context.Background()
	s, err := redis.Open(ctx, srv.url(), "interlock-test:restart:")
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	c := s.Console()
	lctx, stopListening := context.WithCancel(ctx)
	defer stopListening()
	heard, err := c.Listen(lctx)
	if err != nil {
		t.Fatal(err)
	}
	key := "a-session-key"
	now := time.Now()
	if err := c.StartSession(ctx, key, sessionAt(now), time.Hour); err != nil {
		t.Fatal(err)
	}

	srv.stop()
	if _, err := c.Session(ctx, key, now, time.Hour, true); err == nil {
		t.Fatal("a session was read while Redis was away")
	}
	srv.start()

	if got, err := waitFor(func() (bool, error) {
		_, err := c.Session(ctx, key, now, time.Hour, true)
		return err == nil, nil
	}); !got || err != nil {
		t.Fatalf("the session written before the restart: %v", err)
	}
	// The listener says it may have missed words, then hears new ones.
	consolestatetest.HearsAfterGap(t, c, heard, 10*time.Second)
}

func waitFor(cond func() (bool, error)) (bool, error) {
	deadline := time.Now().Add(10 * time.Second)
	for {
		ok, err := cond()
		if ok || err != nil || time.Now().After(deadline) {
			return ok, err
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func sessionAt(at time.Time) consolestate.Session {
	return consolestate.Session{Who: approval.Identity{Tenant: "acme", Principal: "bob"}, CSRF: "csrf", Created: at, LastSeen: at}
}
