// Package testproc runs a test binary again as several processes at once,
// for the tests of what a store must keep across processes (two gateways
// on one Redis, one database, one SQLite file). The parent starts them,
// each running one named test with the environment it is given; the
// children dial the store, say "ready", and then answer each line the
// parent sends with lines of their own. Every line starts at a moment the
// parent names, the same for every child, so their work overlaps instead
// of the first finishing before the second has read its line. A race
// within one process ([AtOnce]) starts its tries at one moment too.
package testproc

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"iter"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Process is a child process of the running test binary.
type Process struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	lines  *bufio.Scanner
	seen   []string
	stderr strings.Builder
}

// Start starts n processes of this test binary, each running only the
// test named test with env added to its environment, and returns once
// every one has said it is ready. They end with the test: their input is
// closed, their output drained and their exit checked.
func Start(t *testing.T, n int, test string, env ...string) []*Process {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	var procs []*Process
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
				t.Errorf("process %d: %v\n%s\n%s", i, err, strings.Join(p.seen, "\n"), p.stderr.String())
			}
		}
	})
	for range n {
		p := &Process{cmd: exec.CommandContext(ctx, os.Args[0], "-test.run=^"+test+"$", "-test.count=1")}
		p.cmd.Env = append(os.Environ(), env...)
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
		p.Next(t, "ready")
	}
	return procs
}

// SendAll has every process start on line at once: a little later than
// now, so that every process has read it by then.
func SendAll(t *testing.T, procs []*Process, line string) {
	t.Helper()
	at := time.Now().Add(20 * time.Millisecond).UnixNano()
	for _, p := range procs {
		if _, err := fmt.Fprintf(p.stdin, "%d %s\n", at, line); err != nil {
			t.Fatal(err)
		}
	}
}

// Next returns the process's next line that starts with prefix, keeping
// the others to show should it fail.
func (p *Process) Next(t *testing.T, prefix string) string {
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
	t.Fatalf("process ended before %q: %v\n%s", prefix, p.lines.Err(), strings.Join(p.seen, "\n"))
	return ""
}

// Number reads the process's next answer "word N" and returns N.
func (p *Process) Number(t *testing.T, word string) int {
	t.Helper()
	n, err := strconv.Atoi(strings.TrimPrefix(p.Next(t, word+" "), word+" "))
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// Ready is the child's side: it says it is ready, then yields the fields
// of each line the parent sends, at the moment the line names.
func Ready(t *testing.T) iter.Seq[[]string] {
	fmt.Println("ready")
	return func(yield func([]string) bool) {
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
			if !yield(f[1:]) {
				return
			}
		}
	}
}

// AtOnce makes n tries at once, alternately on two handles of one store,
// and returns how many succeeded; try is told its number. Every try waits
// for the others to be started, so they overlap however slowly the
// machine starts them.
func AtOnce[S any](t *testing.T, n int, one, other S, try func(h S, i int) (bool, error)) int {
	var won atomic.Int64
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range n {
		h := one
		if i%2 == 1 {
			h = other
		}
		wg.Go(func() {
			<-start
			ok, err := try(h, i)
			if err != nil {
				t.Error(err)
			}
			if ok {
				won.Add(1)
			}
		})
	}
	close(start)
	wg.Wait()
	return int(won.Load())
}

// Together runs fn tries times in all from n goroutines at once and
// returns how many of its runs succeeded.
func Together(t *testing.T, n, tries int, fn func() (bool, error)) int {
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
