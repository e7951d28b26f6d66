package storetest

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/interlock-mcp/interlock"
)

// whereEnv names, to a test binary run as a gateway process of
// [TokensAcrossProcesses] or [BudgetsAcrossProcesses], the stores it
// dials.
const whereEnv = "INTERLOCK_STORETEST_WHERE"

// Dial opens, in a process of its own, handles on the token and budget
// stores that where names.
type Dial func(t *testing.T, where string) (interlock.TokenStore, interlock.BudgetStore)

// HelperProcess is the body of a test named TestStoreHelperProcess.
// Started by [TokensAcrossProcesses] or [BudgetsAcrossProcesses], it dials
// the stores, says it is ready and answers each line of its input with
// one line: "consume BINDING NONCE" with how many of four goroutines
// consumed the token at once, "take KEYS LIMIT TRIES" with how many of
// TRIES takes of the comma-separated KEYS, from eight goroutines each
// taking 5 ms after its last, succeeded. A line starts with the Unix time
// in nanoseconds to start at, the same for every process. Run as an
// ordinary test it does nothing.
func HelperProcess(t *testing.T, dial Dial) {
	where := os.Getenv(whereEnv)
	if where == "" {
		return
	}
	ctx := context.Background()
	tokens, budgets := dial(t, where)
	fmt.Println("ready")
	// together runs fn tries times from n goroutines at once and counts
	// its successes.
	together := func(n, tries int, fn func() (bool, error)) int {
		var ok atomic.Int64
		var wg sync.WaitGroup
		for w := range n {
			wg.Go(func() {
				for i := w; i < tries; i += n {
					won, err := fn()
					if err != nil {
						t.Error(err)
						return
					}
					if won {
						ok.Add(1)
					}
				}
			})
		}
		wg.Wait()
		return int(ok.Load())
	}
	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
		f := strings.Fields(in.Text())
		if len(f) == 0 {
			t.Fatal("empty line")
		}
		at, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil {
			t.Fatalf("bad line %q", in.Text())
		}
		time.Sleep(time.Until(time.Unix(0, at)))
		switch f = f[1:]; {
		case len(f) == 3 && f[0] == "consume":
			fmt.Println("won", together(4, 4, func() (bool, error) { return tokens.Consume(ctx, f[1], f[2]) }))
		case len(f) == 4 && f[0] == "take":
			limit, err1 := strconv.Atoi(f[2])
			tries, err2 := strconv.Atoi(f[3])
			if err1 != nil || err2 != nil {
				t.Fatalf("bad line %q", in.Text())
			}
			fmt.Println("took", together(8, tries, func() (bool, error) {
				ok, _, _, err := budgets.Take(ctx, hourly(f[1], limit))
				// Takes a few milliseconds apart, as calls reach a
				// gateway, leave a store's lock free now and then: a
				// SQLite file taken back to back is seldom found free
				// by the other process, polling in its busy handler.
				time.Sleep(5 * time.Millisecond)
				return ok, err
			}))
		default:
			t.Fatalf("bad line %q", in.Text())
		}
	}
}

// TokensAcrossProcesses has two gateway processes (this test binary
// again, running TestStoreHelperProcess, which calls [HelperProcess])
// race, 20 times, to consume one token issued on s, each from four
// goroutines at once, through handles of their own on the store that
// where names: exactly one of the eight consumes wins each time.
func TokensAcrossProcesses(t *testing.T, s interlock.TokenStore, where string) {
	ctx := context.Background()
	procs := startProcesses(t, where)
	wins := make([]int, len(procs))
	for round := range 20 {
		nonce := fmt.Sprintf("n%d", round)
		if err := s.Issue(ctx, "b", nonce, time.Minute); err != nil {
			t.Fatal(err)
		}
		sendAll(t, procs, "consume b "+nonce)
		won := 0
		for i, p := range procs {
			n := p.number(t, "won")
			wins[i] += n
			won += n
		}
		if won != 1 {
			t.Errorf("round %d: the token was consumed %d times", round, won)
		}
		if ok, err := s.Consume(ctx, "b", nonce); ok || err != nil {
			t.Errorf("round %d: the token consumed again here: %v %v", round, ok, err)
		}
	}
	t.Logf("wins by process: %v", wins)
}

// BudgetsAcrossProcesses has two gateway processes take 75 times each,
// from eight goroutines, under one limit of 50, six times over. In every
// other round each take is of two keys, the second holding 20 calls
// already: between them exactly 50 takes succeed in a round of one key,
// exactly 30 in a round of two, and the first key then holds that many.
func BudgetsAcrossProcesses(t *testing.T, s interlock.BudgetStore, where string) {
	ctx := context.Background()
	const limit, tries, held = 50, 75, 20
	procs := startProcesses(t, where)
	for round := range 6 {
		keys, want := fmt.Sprintf("k%d", round), limit
		if round%2 == 1 {
			keys, want = fmt.Sprintf("k%d,full%d", round, round), limit-held
			for range held {
				if ok, _, _, err := s.Take(ctx, one(fmt.Sprintf("full%d", round), limit, time.Hour)); !ok || err != nil {
					t.Fatal(ok, err)
				}
			}
		}
		sendAll(t, procs, fmt.Sprintf("take %s %d %d", keys, limit, tries))
		took := make([]int, len(procs))
		total := 0
		for i, p := range procs {
			took[i] = p.number(t, "took")
			total += took[i]
		}
		if total != want {
			t.Errorf("round %d: two processes took %v over %s under a limit of %d; want %d in all", round, took, keys, limit, want)
		}
		if n := count(t, s, fmt.Sprintf("k%d", round), time.Hour); n != want {
			t.Errorf("round %d: k%d holds %d calls, want %d", round, round, n, want)
		}
		if ok, wait, _, err := s.Take(ctx, hourly(keys, limit)); ok || wait <= 0 || err != nil {
			t.Errorf("round %d: a take after both processes = %v, %v, %v; want a refusal", round, ok, wait, err)
		}
		t.Logf("round %d: takes by process %v", round, took)
	}
}

// hourly returns the takes of the comma-separated keys, each under limit
// per hour.
func hourly(keys string, limit int) []interlock.BudgetTake {
	var specs []spec
	for k := range strings.SplitSeq(keys, ",") {
		specs = append(specs, spec{k, limit, 1})
	}
	return takesOf(specs, time.Hour)
}

// process is a gateway process running TestStoreHelperProcess.
type process struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	lines  *bufio.Scanner
	seen   []string
	stderr strings.Builder
}

// startProcesses starts two gateway processes on the stores where names,
// and returns once both have dialled them. They end with the test.
func startProcesses(t *testing.T, where string) []*process {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	var procs []*process
	t.Cleanup(func() {
		defer cancel()
		for i, p := range procs {
			p.stdin.Close()
			// The rest of its output (its test verdict) is drained
			// before Wait.
			for p.lines.Scan() {
				p.seen = append(p.seen, p.lines.Text())
			}
			if err := p.cmd.Wait(); err != nil {
				t.Errorf("gateway process %d: %v\n%s\n%s", i, err, strings.Join(p.seen, "\n"), p.stderr.String())
			}
		}
	})
	for range 2 {
		p := &process{cmd: exec.CommandContext(ctx, os.Args[0], "-test.run=^TestStoreHelperProcess$", "-test.count=1")}
		p.cmd.Env = append(os.Environ(), whereEnv+"="+where)
		p.cmd.Stderr = &p.stderr
		stdout, err := p.cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if p.stdin, err = p.cmd.StdinPipe(); err != nil {
			t.Fatal(err)
		}
		p.lines = bufio.NewScanner(stdout)
		if err := p.cmd.Start(); err != nil {
			t.Fatal(err)
		}
		procs = append(procs, p)
	}
	for _, p := range procs {
		p.next(t, "ready")
	}
	return procs
}

// sendAll has every process start on line at once: a little later, so
// that every process has read it, rather than each as it reads it, which
// would let the first finish before the second starts.
func sendAll(t *testing.T, procs []*process, line string) {
	t.Helper()
	at := time.Now().Add(20 * time.Millisecond).UnixNano()
	for _, p := range procs {
		if _, err := fmt.Fprintf(p.stdin, "%d %s\n", at, line); err != nil {
			t.Fatal(err)
		}
	}
}

// next returns the process's next line that starts with prefix, keeping
// the others to show should it fail.
func (p *process) next(t *testing.T, prefix string) string {
	t.Helper()
	for p.lines.Scan() {
		line := p.lines.Text()
		if strings.HasPrefix(line, prefix) {
			return line
		}
		p.seen = append(p.seen, line)
	}
	// Its error and what it wrote to stderr are shown as it is waited
	// for.
	t.Fatalf("gateway process ended before %q: %v\n%s", prefix, p.lines.Err(), strings.Join(p.seen, "\n"))
	return ""
}

// number reads the process's next answer "word N" and returns N.
func (p *process) number(t *testing.T, word string) int {
	t.Helper()
	n, err := strconv.Atoi(strings.TrimPrefix(p.next(t, word+" "), word+" "))
	if err != nil {
		t.Fatal(err)
	}
	return n
}
