package gateway

import (
	"context"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// TestStdioReadsAPipeThroughThePoller: a stdin pipe given in blocking
// mode, as a child is given its stdin, is read through the runtime's
// poller from a description of the gateway's own (internal/pollable shows
// why a blocking read can stall the process), the description given stays
// as it was, and the client closing the pipe still ends the session.
func TestStdioReadsAPipeThroughThePoller(t *testing.T) {
	gw := start(t, testConfig(t, "", "fx"), "false")
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	// A descriptor of the pipe in blocking mode, as os/exec hands one to
	// a child: Fd puts the description in blocking mode.
	fd, err := syscall.Dup(int(r.Fd()))
	if err != nil {
		t.Fatal(err)
	}
	r.Close()
	stdin := os.NewFile(uintptr(fd), "stdin")
	defer stdin.Close()
	outR, outW := io.Pipe()
	served := make(chan error, 1)
	go func() {
		served <- gw.ServeStdio(context.Background(), stdin, outW)
		outW.Close()
	}()
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "test"}, nil).Connect(context.Background(),
		&mcp.IOTransport{Reader: outR, Writer: w}, onSession)
	if err != nil {
		t.Fatal(err)
	}
	if res := call(t, cs, "exact", map[string]any{}); res.IsError {
		t.Fatalf("exact: %+v", body(t, res))
	}

	pipe, err := os.Readlink(fmt.Sprintf("/proc/self/fd/%d", fd))
	if err != nil {
		t.Fatal(err)
	}
	// The flags of /proc/self/fdinfo, which are octal: a read end (the
	// client's write end is the same pipe) in non-blocking mode.
	nonblocking := func(fd int) bool {
		b, err := os.ReadFile(fmt.Sprintf("/proc/self/fdinfo/%d", fd))
		if err != nil {
			return false
		}
		for line := range strings.Lines(string(b)) {
			if v, ok := strings.CutPrefix(line, "flags:"); ok {
				flags, _ := strconv.ParseInt(strings.TrimSpace(v), 8, 64)
				return flags&syscall.O_ACCMODE == syscall.O_RDONLY && flags&syscall.O_NONBLOCK != 0
			}
		}
		return false
	}
	readers := func() (polled []int) {
		entries, _ := os.ReadDir("/proc/self/fd")
		for _, e := range entries {
			n, _ := strconv.Atoi(e.Name())
			if link, _ := os.Readlink("/proc/self/fd/" + e.Name()); link == pipe && n != fd && nonblocking(n) {
				polled = append(polled, n)
			}
		}
		return polled
	}
	if got := readers(); len(got) != 1 {
		t.Fatalf("descriptors reading %s non-blocking while serving: %v, want one the gateway opened", pipe, got)
	}
	if nonblocking(fd) {
		t.Error("the description given as stdin was put in non-blocking mode")
	}

	w.Close()
	select {
	case err := <-served:
		if err != nil {
			t.Fatalf("ServeStdio ended with %v once the client closed its pipe", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("ServeStdio went on after the client closed its pipe")
	}
	if got := readers(); len(got) != 0 {
		t.Errorf("descriptors the gateway opened on %s still open after the session: %v", pipe, got)
	}
	cs.Close()
}
