package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// startAndWait starts a server that prints nothing useful and waits until
// an MCP session with url can be opened.
func startAndWait(cmd *exec.Cmd, url string) (*httpServed, error) {
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	hs := &httpServed{url: url, served: &served{pids: []int{cmd.Process.Pid}, stop: func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }}}
	hs.connect = connectHTTP(url, sessionProtocol)
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if cs, err := hs.connect(context.Background()); err == nil {
			cs.Close()
			return hs, nil
		}
	}
	hs.stop()
	return nil, fmt.Errorf("%s did not answer at %s", cmd.Path, url)
}

// figures are one variant's measurements, one value per round.
type figures struct {
	p50, p90, p99 []time.Duration
	// rate holds calls per second by number of clients.
	rate map[int][]float64
	// cpu is the server's CPU time per call at the largest client count
	// up to 8; child is its children's (a gateway's stdio upstream), client
	// the clients' (this process's), and machine every core's, whatever ran
	// on it.
	cpu, child, client, machine []time.Duration
}

func call(ctx context.Context, cs *mcp.ClientSession, token bool) error {
	if !token {
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"text": "hello"}})
		if err == nil && res.IsError {
			err = fmt.Errorf("echo answered an error: %s", errorText(res))
		}
		return err
	}
	args := map[string]any{"text": "hello"}
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "echo_write", Arguments: args})
	if err != nil {
		return err
	}
	body, _ := res.StructuredContent.(map[string]any)
	confirmToken, _ := body["confirm_token"].(string)
	if confirmToken == "" {
		return fmt.Errorf("echo_write gave no confirm token: %v", body)
	}
	res, err = cs.CallTool(ctx, &mcp.CallToolParams{Name: "echo_write", Arguments: map[string]any{"text": "hello", "__confirm_token": confirmToken}})
	if err == nil && res.IsError {
		err = fmt.Errorf("redeeming the token failed: %v", res.StructuredContent)
	}
	return err
}

func measure(ctx context.Context, v *variant, calls int, clients []int, f *figures) error {
	sv, err := v.start()
	if err != nil {
		return fmt.Errorf("%s: %w", v.name, err)
	}
	defer sv.stop()

	cs, err := sv.connect(ctx)
	if err != nil {
		return fmt.Errorf("%s: %w", v.name, err)
	}
	for range min(calls/10, 200) { // warm up
		if err := call(ctx, cs, v.token); err != nil {
			return fmt.Errorf("%s: %w", v.name, err)
		}
	}
	lat := make([]time.Duration, calls)
	for i := range lat {
		start := time.Now()
		if err := call(ctx, cs, v.token); err != nil {
			return fmt.Errorf("%s: %w", v.name, err)
		}
		lat[i] = time.Since(start)
	}
	cs.Close()
	slices.Sort(lat)
	pct := func(p float64) time.Duration { return lat[min(len(lat)-1, int(p*float64(len(lat))))] }
	f.p50, f.p90, f.p99 = append(f.p50, pct(0.5)), append(f.p90, pct(0.9)), append(f.p99, pct(0.99))

	if f.rate == nil {
		f.rate = map[int][]float64{}
	}
	cpuAt := 0
	for _, n := range clients {
		if n <= 8 {
			cpuAt = n
		}
	}
	for _, n := range clients {
		sessions := make([]*mcp.ClientSession, n)
		for i := range sessions {
			if sessions[i], err = sv.connect(ctx); err != nil {
				return fmt.Errorf("%s: session %d: %w", v.name, i, err)
			}
		}
		kids := children(sv.pids)
		cpu0, child0, client0, machine0 := cpuTime(sv.pids), cpuTime(kids), cpuTime([]int{os.Getpid()}), machineCPU()
		start := time.Now()
		err := callConcurrently(ctx, sessions, calls, v.token)
		took := time.Since(start)
		cpu, child, client, machine := cpuTime(sv.pids)-cpu0, cpuTime(kids)-child0, cpuTime([]int{os.Getpid()})-client0, machineCPU()-machine0
		for _, s := range sessions {
			s.Close()
		}
		if err != nil {
			return fmt.Errorf("%s: %d clients: %w", v.name, n, err)
		}
		f.rate[n] = append(f.rate[n], float64(calls)/took.Seconds())
		if n == cpuAt {
			f.cpu = append(f.cpu, cpu/time.Duration(calls))
			f.child = append(f.child, child/time.Duration(calls))
			f.client = append(f.client, client/time.Duration(calls))
			f.machine = append(f.machine, machine/time.Duration(calls))
		}
	}
	return nil
}

// callConcurrently makes calls in all, shared among the sessions, each
// session calling in a goroutine of its own.
func callConcurrently(ctx context.Context, sessions []*mcp.ClientSession, calls int, token bool) error {
	var wg sync.WaitGroup
	errs := make(chan error, len(sessions))
	for i, s := range sessions {
		share := calls / len(sessions)
		if i < calls%len(sessions) {
			share++
		}
		wg.Go(func() {
			for range share {
				if err := call(ctx, s, token); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	return <-errs
}

// cpuTime is the user and system CPU time the processes have used, from
// /proc (Linux); zero elsewhere.
func cpuTime(pids []int) time.Duration {
	var total time.Duration
	for _, pid := range pids {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			continue
		}
		// Fields after the command name, which is in parentheses and may
		// hold spaces: utime and stime are the 12th and 13th.
		rest := string(b[strings.LastIndexByte(string(b), ')')+2:])
		fields := strings.Fields(rest)
		if len(fields) < 13 {
			continue
		}
		u, _ := strconv.ParseInt(fields[11], 10, 64)
		s, _ := strconv.ParseInt(fields[12], 10, 64)
		total += time.Duration(u+s) * time.Second / clockTicks
	}
	return total
}

// children are the processes the processes pids started, from /proc
// (Linux); none elsewhere.
func children(pids []int) []int {
	var out []int
	for _, pid := range pids {
		tasks, _ := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
		for _, task := range tasks {
			b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/children", pid, task.Name()))
			for _, f := range strings.Fields(string(b)) {
				if n, err := strconv.Atoi(f); err == nil {
					out = append(out, n)
				}
			}
		}
	}
	return out
}

// machineCPU is the time every core of the machine has spent busy, from
// /proc/stat (Linux); zero elsewhere.
func machineCPU() time.Duration {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0
	}
	line, _, _ := strings.Cut(string(b), "\n")
	fields := strings.Fields(line) // cpu user nice system idle iowait irq softirq steal ...
	var busy int64
	for i, f := range fields {
		if i == 0 || i == 4 || i == 5 || i > 8 {
			continue // the label, idle and iowait, and guests (counted in user)
		}
		n, _ := strconv.ParseInt(f, 10, 64)
		busy += n
	}
	return time.Duration(busy) * time.Second / clockTicks
}

// clockTicks is USER_HZ, the unit of /proc/PID/stat times on Linux.
const clockTicks = 100

func stats[T int64 | float64 | time.Duration](xs []T) (lo, mid, hi T) {
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[0], s[len(s)/2], s[len(s)-1]
}

func report(w io.Writer, variants []*variant, res map[string]*figures, clients []int, calls, rounds int) {
	fmt.Fprintf(w, "%d calls per figure, %d rounds, variants interleaved; min / median / max, and the median's ratio to the direct call on the same transport\n\n", calls, rounds)
	fmt.Fprintf(w, "| variant | p50 | p90 | p99 | p50 − direct |")
	for _, n := range clients {
		fmt.Fprintf(w, " calls/s, %d clients |", n)
	}
	fmt.Fprintf(w, " server CPU per call | its children's | client CPU per call | machine CPU per call |\n|---|---|---|---|---|")
	for range clients {
		fmt.Fprint(w, "---|")
	}
	fmt.Fprintln(w, "---|---|---|---|")
	dur := func(xs []time.Duration) string {
		lo, mid, hi := stats(xs)
		return fmt.Sprintf("%s / **%s** / %s", round(lo), round(mid), round(hi))
	}
	for _, v := range variants {
		f, base := res[v.name], res[v.base]
		_, mid, _ := stats(f.p50)
		_, bmid, _ := stats(base.p50)
		fmt.Fprintf(w, "| %s | %s | %s | %s | %+.0f µs |", v.name, dur(f.p50), dur(f.p90), dur(f.p99), float64(mid-bmid)/1e3)
		for _, n := range clients {
			lo, m, hi := stats(f.rate[n])
			_, bm, _ := stats(base.rate[n])
			fmt.Fprintf(w, " %.0f / **%.0f** / %.0f (%.2f×) |", lo, m, hi, m/bm)
		}
		if len(f.cpu) > 0 {
			fmt.Fprintf(w, " %s | %s | %s | %s |\n", dur(f.cpu), dur(f.child), dur(f.client), dur(f.machine))
		} else {
			fmt.Fprintln(w, " – | – | – | – |")
		}
	}
}

func round(d time.Duration) string {
	switch {
	case d >= time.Millisecond:
		return fmt.Sprintf("%.2f ms", float64(d)/1e6)
	default:
		return fmt.Sprintf("%.0f µs", float64(d)/1e3)
	}
}

// errorText is what an error result says, for the harness's own message.
func errorText(res *mcp.CallToolResult) string {
	if b, err := json.Marshal(res.StructuredContent); err == nil && res.StructuredContent != nil {
		return string(b)
	}
	for _, c := range res.Content {
		if t, ok := c.(*mcp.TextContent); ok {
			return t.Text
		}
	}
	return "(no text)"
}
