package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// measureMemory answers two questions about the gateway's memory over
// HTTP with sessions: what an idle session holds, and whether the heap
// stays flat over many calls. It reads the gateway's heap after a forced
// collection from its profiler (--pprof), and its resident set from /proc.
func measureMemory(ctx context.Context, s *setup, w io.Writer, idle, calls, clients int) error {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	profiler := ln.Addr().String()
	ln.Close()
	s.pprof = profiler
	// One principal (anonymous) holds every idle session.
	g, err := s.gatewayHTTP(s.stdioUpstream() + fmt.Sprintf("\nhttp: {max_sessions_per_principal: %d}", idle+clients+1))
	if err != nil {
		return err
	}
	defer g.stop()
	heap := func() (int64, error) { return heapInuse("http://" + profiler) }
	rss := func() int64 { return residentSet(g.pids[0]) }

	// One call first, so that the upstream and the shared paths exist
	// before the baseline.
	cs, err := g.connect(ctx)
	if err != nil {
		return err
	}
	if err := call(ctx, cs, false); err != nil {
		return err
	}
	cs.Close()
	before, err := heap()
	if err != nil {
		return err
	}
	sessions := make([]*mcp.ClientSession, idle)
	for i := range sessions {
		if sessions[i], err = g.connect(ctx); err != nil {
			return fmt.Errorf("idle session %d: %w", i, err)
		}
	}
	after, err := heap()
	if err != nil {
		return err
	}
	for _, cs := range sessions {
		cs.Close()
	}
	fmt.Fprintf(w, "%d idle sessions (protocol %s): heap in use %s before, %s after, %s per session\n\n",
		idle, sessionProtocol, kib(before), kib(after), kib((after-before)/int64(idle)))

	fmt.Fprintf(w, "%d calls from %d clients, each its own session; the gateway's heap in use after a collection, and its resident set:\n\n", calls, clients)
	fmt.Fprintln(w, "| calls | heap in use | resident set |\n|---|---|---|")
	conns := make([]*mcp.ClientSession, clients)
	for i := range conns {
		if conns[i], err = g.connect(ctx); err != nil {
			return err
		}
	}
	defer func() {
		for _, cs := range conns {
			cs.Close()
		}
	}()
	step := max(calls/10, 1)
	for done := 0; done < calls; done += step {
		if err := callConcurrently(ctx, conns, step, false); err != nil {
			return err
		}
		h, err := heap()
		if err != nil {
			return err
		}
		fmt.Fprintf(w, "| %d | %s | %s |\n", done+step, kib(h), kib(rss()))
	}
	return nil
}

var heapInuseLine = regexp.MustCompile(`(?m)^# HeapInuse = (\d+)$`)

// heapInuse forces a collection in the process whose profiler is at base
// and returns its heap in use.
func heapInuse(base string) (int64, error) {
	client := &http.Client{Timeout: 30 * time.Second}
	resp, err := client.Get(base + "/debug/pprof/heap?gc=1&debug=1")
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, err
	}
	m := heapInuseLine.FindSubmatch(b)
	if m == nil {
		return 0, fmt.Errorf("the profiler at %s gave no HeapInuse", base)
	}
	return strconv.ParseInt(string(m[1]), 10, 64)
}

// residentSet is a process's resident set in bytes, from /proc (Linux).
func residentSet(pid int) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			return kb << 10
		}
	}
	return 0
}

func kib(n int64) string { return fmt.Sprintf("%.1f KiB", float64(n)/1024) }
