// Command bench measures what interlock adds to a tool call. It starts a
// minimal echo MCP server (this same program, as "bench echo") and calls
// its tool directly and through `interlock serve` on each transport, in
// interleaved rounds, and prints each figure's min, median and max with its
// ratio to the direct call on the same transport.
//
//	go run ./bench [-calls 2000] [-rounds 3] [-clients 1,8,32]
//	go run ./bench -soak 2000000 -clients 8,32 [-only interlock-stdio]
//
// Figures: latency (p50, p90, p99) of sequential calls from one client;
// throughput (calls per second) with N concurrent clients, each with its
// own session; and CPU time per call of the gateway process, from
// /proc/PID/stat. Another proxy joins the run when BENCH_PROXY names its
// binary and BENCH_PROXY_ADAPTER a command that writes its config for an
// HTTP upstream (see proxy.go).
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == "echo" {
		serveEcho(os.Args[2:])
		return
	}
	if len(os.Args) > 1 && os.Args[1] == "sdkproxy" {
		serveSDKProxy(os.Args[2:])
		return
	}
	if err := run(os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

// run measures what the flags in args ask for and writes the table to w.
func run(args []string, w io.Writer) error {
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	calls := fs.Int("calls", 2000, "sequential calls per latency measurement, and calls per throughput measurement")
	rounds := fs.Int("rounds", 3, "rounds; variants are interleaved within each")
	clients := fs.String("clients", "1,8,32", "comma-separated numbers of concurrent clients for throughput")
	interlockBin := fs.String("interlock", "", "interlock binary (default: built from ./cmd/interlock)")
	only := fs.String("only", "", "comma-separated variants to run (default: all)")
	pprof := fs.String("pprof", "", "address for the gateway's profiler (--pprof); run one variant with -only")
	memory := fs.Bool("memory", false, "instead of the table, measure the gateway's memory: an idle session, and the heap over many calls")
	idle := fs.Int("idle", 1000, "with -memory, idle sessions to open")
	memCalls := fs.Int("memory-calls", 1_000_000, "with -memory, calls to make while the heap is watched")
	soakCalls := fs.Int("soak", 0, "instead of the table, make this many calls per variant (-only; default interlock-stdio and interlock-http) at each -clients count, and count the answers that never came")
	allowedCalls := fs.String("allowed-calls", "", "audit.allowed_calls of every gateway: committed or queued (default: the gateway's default, committed)")
	perClient := fs.Bool("per-client", false, "a stdio child per client session (the upstream's per_client) instead of one shared child")
	self := fs.String("self", "", "this program, to run as the echo server (default: the running executable)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *self == "" {
		exe, err := os.Executable()
		if err != nil {
			return err
		}
		*self = exe
	}
	dir, err := os.MkdirTemp("", "interlock-bench")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	bin := *interlockBin
	if bin == "" {
		bin = filepath.Join(dir, "interlock")
		build := exec.Command("go", "build", "-o", bin, "./cmd/interlock")
		build.Stdout, build.Stderr = os.Stderr, os.Stderr
		if err := build.Run(); err != nil {
			return fmt.Errorf("building interlock: %w", err)
		}
	}
	var counts []int
	for _, c := range strings.Split(*clients, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(c))
		if err != nil {
			return fmt.Errorf("-clients: %w", err)
		}
		counts = append(counts, n)
	}
	env := &setup{self: *self, interlock: bin, dir: dir, pprof: *pprof, allowedCalls: *allowedCalls, perClient: *perClient}
	if *memory {
		return measureMemory(context.Background(), env, w, *idle, *memCalls, 8)
	}
	variants := env.variants()
	if *soakCalls > 0 && *only == "" {
		*only = "interlock-stdio,interlock-http"
	}
	if *only != "" {
		// Each variant's ratios need its direct variant, which runs too.
		keep := strings.Split(*only, ",")
		for _, v := range variants {
			if slices.Contains(keep, v.name) {
				keep = append(keep, v.base)
			}
		}
		variants = slices.DeleteFunc(variants, func(v *variant) bool { return !slices.Contains(keep, v.name) })
	}
	ctx := context.Background()
	if *soakCalls > 0 {
		fmt.Fprintf(w, "| variant | clients | calls | lost (no answer in %s) | failed | calls/s | took | RSS at start | RSS at end | RSS peak |\n|---|---|---|---|---|---|---|---|---|---|\n", soakTimeout)
		for _, v := range variants {
			if !slices.Contains(strings.Split(*only, ","), v.name) {
				continue // a direct variant kept for ratios
			}
			for _, n := range counts {
				r, err := soak(ctx, v, *soakCalls, n)
				if err != nil {
					return err
				}
				reportSoak(w, v.name, n, r)
			}
		}
		return nil
	}
	results := map[string]*figures{}
	for round := 1; round <= *rounds; round++ {
		fmt.Fprintf(os.Stderr, "round %d of %d\n", round, *rounds)
		for _, v := range variants {
			f := results[v.name]
			if f == nil {
				f = &figures{}
				results[v.name] = f
			}
			if err := measure(ctx, v, *calls, counts, f); err != nil {
				return err
			}
		}
	}
	report(w, variants, results, counts, *calls, *rounds)
	return nil
}

func check(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}
