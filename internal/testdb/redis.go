package testdb

import (
	"fmt"
	"net"
	"os/exec"
	"strconv"
	"testing"
	"time"
)

// Redis is a Redis server of a test's own, on a port of its own, which
// the test may kill and start again (the shared one it must not). It
// appends every write to its file, synced, before answering, so what was
// written before a kill is there after it.
type Redis struct {
	tb   testing.TB
	port int
	dir  string
	cmd  *exec.Cmd
}

// OwnRedis starts a Redis server of tb's own, killed when tb ends.
func OwnRedis(tb testing.TB) *Redis {
	tb.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	r := &Redis{tb: tb, port: l.Addr().(*net.TCPAddr).Port, dir: tb.TempDir()}
	l.Close()
	r.Start()
	tb.Cleanup(r.Kill)
	return r
}

// URL is the server's URL, of its database 0.
func (r *Redis) URL() string { return fmt.Sprintf("redis://127.0.0.1:%d/0", r.port) }

// Start starts the server, on its port and its files, and waits until it
// listens.
func (r *Redis) Start() {
	r.tb.Helper()
	r.cmd = exec.Command("redis-server", "--port", strconv.Itoa(r.port), "--bind", "127.0.0.1", "--dir", r.dir,
		"--appendonly", "yes", "--appendfsync", "always", "--save", "")
	if err := r.cmd.Start(); err != nil {
		r.tb.Fatalf("redis-server must be installed: %v", err)
	}
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		c, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", r.port))
		if err == nil {
			c.Close()
			return
		}
		if time.Now().After(deadline) {
			r.tb.Fatalf("redis-server did not start on port %d", r.port)
		}
	}
}

// Kill ends the server as a crash would.
func (r *Redis) Kill() {
	if r.cmd != nil && r.cmd.Process != nil {
		_ = r.cmd.Process.Kill()
		_ = r.cmd.Wait()
	}
	r.cmd = nil
}
