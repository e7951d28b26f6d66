package pollable_test

import (
	"errors"
	"io"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/interlock-mcp/interlock/internal/pollable"
)

// childEnv names, in a child process of the test binary, how the child
// reads its standard input: "blocking" as it was given, "pollable"
// through Open.
const childEnv = "POLLABLE_TEST_STDIN"

func TestMain(m *testing.M) {
	if how := os.Getenv(childEnv); how != "" {
		echoStopping(how)
		return
	}
	os.Exit(m.Run())
}

// echoStopping answers each read of its standard input with the bytes it
// read, stopping the world between the two, as a stdio server does that
// starts a collection while decoding the request it has just read: the
// goroutine that reads stdin goes back to its read at that moment. Its
// first byte out says whether it reads stdin through the poller: 'p' if
// so, 'b' if not.
func echoStopping(how string) {
	in := os.Stdin
	if how == "pollable" {
		in = pollable.Open(os.Stdin)
	}
	mode := []byte("b")
	if pollable.Polled(in) {
		mode = []byte("p")
	}
	os.Stdout.Write(mode)
	reads := make(chan []byte)
	go func() {
		for {
			buf := make([]byte, 64)
			n, err := in.Read(buf)
			if err != nil {
				close(reads)
				return
			}
			reads <- buf[:n]
		}
	}()
	var ms runtime.MemStats
	for b := range reads {
		runtime.ReadMemStats(&ms)
		os.Stdout.Write(b)
	}
}

// echoer is a child process running echoStopping.
type echoer struct {
	cmd     *exec.Cmd
	in      io.WriteCloser
	answers chan struct{}
	polled  bool // the child reads its stdin through the poller
}

func startEchoer(t *testing.T, how string) *echoer {
	t.Helper()
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), childEnv+"="+how)
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		in.Close()
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	mode := make([]byte, 1)
	if _, err := io.ReadFull(out, mode); err != nil {
		t.Fatalf("the %s child said nothing: %v", how, err)
	}
	e := &echoer{cmd: cmd, in: in, answers: make(chan struct{}, 64), polled: mode[0] == 'p'}
	go func() {
		buf := make([]byte, 64)
		for {
			n, err := out.Read(buf)
			if err != nil {
				close(e.answers)
				return
			}
			for range n {
				e.answers <- struct{}{}
			}
		}
	}()
	return e
}

// A round trip's outcome: answered within patience; answered later
// without being written to again (a loaded machine, not a stall); or not
// answered until written to again, the world stopped meanwhile.
type outcome int

const (
	answered outcome = iota
	slow
	stall
)

// trip sends e one byte and waits for the answer: patience, then confirm
// more before it counts as a stall. A stalled child is woken with another
// byte, and both answers are awaited. trip calls no t.Fatal: it runs on
// goroutines other than the test's.
func (e *echoer) trip(patience, confirm time.Duration) (outcome, error) {
	if _, err := e.in.Write([]byte("x")); err != nil {
		return 0, err
	}
	answer := func(d time.Duration) (bool, error) {
		select {
		case _, ok := <-e.answers:
			if !ok {
				return false, errors.New("the child ended")
			}
			return true, nil
		case <-time.After(d):
			return false, nil
		}
	}
	if ok, err := answer(patience); ok || err != nil {
		return answered, err
	}
	if ok, err := answer(confirm); ok || err != nil {
		return slow, err
	}
	if _, err := e.in.Write([]byte("y")); err != nil {
		return 0, err
	}
	for range 2 {
		if ok, err := answer(10 * time.Second); !ok {
			if err == nil {
				err = errors.New("the stalled child did not answer once written to again")
			}
			return 0, err
		}
	}
	return stall, nil
}

// TestStopTheWorldStallsABlockingStdin shows the runtime's stall the
// package works around, and that a stdin from Open does not stall. Two
// children answer one byte at a time and stop the world between reads:
// one reads its stdin as it was given (a pipe in blocking mode), the
// other reads it through Open. The first stalls, usually within seconds,
// until it is written to again; the second, making at least as many round
// trips (and for three seconds at least), never does. A stall is an
// answer that does not come in five seconds but comes at once when the
// child is written to again: a round trip that is merely slow, as on a
// loaded machine, answers without it, and counts for neither half.
// Should the first stop stalling, a Go release has fixed the runtime and
// Open may go.
func TestStopTheWorldStallsABlockingStdin(t *testing.T) {
	const (
		patience = time.Second      // far above a round trip's time on a loaded machine
		confirm  = 4 * time.Second  // more, before an unanswered trip is a stall
		limit    = 40 * time.Second // to see the blocking child stall
		least    = 3 * time.Second  // of round trips through Open
	)
	blocking, polled := startEchoer(t, "blocking"), startEchoer(t, "pollable")
	if blocking.polled || !polled.polled {
		t.Fatalf("the child given a blocking stdin reads it through the poller: %v; the child reading through Open: %v, want false and true",
			blocking.polled, polled.polled)
	}
	type tally struct {
		trips, slow, stalls int
		err                 error
	}
	results := make(chan tally, 1)
	done := make(chan struct{})
	// need is how many round trips the child reading through Open makes
	// at least: as many as the other made before it stalled.
	var need atomic.Int64
	need.Store(math.MaxInt64)
	go func() {
		var r tally
		defer func() { results <- r }()
		for {
			select {
			case <-done:
				if int64(r.trips) >= need.Load() {
					return
				}
			default:
			}
			o, err := polled.trip(patience, confirm)
			if err != nil {
				r.err = err
				return
			}
			r.trips++
			switch o {
			case slow:
				r.slow++
			case stall:
				r.stalls++
			}
		}
	}()
	start := time.Now()
	trips, slowTrips, stalled := 0, 0, false
	var err error
	for !stalled && err == nil && time.Since(start) < limit {
		var o outcome
		o, err = blocking.trip(patience, confirm)
		trips++
		if o == slow {
			slowTrips++
		}
		stalled = o == stall
	}
	took := time.Since(start)
	if err != nil {
		need.Store(0)
		close(done)
		<-results
		t.Fatalf("the child reading a blocking stdin: %v", err)
	}
	need.Store(int64(trips))
	time.Sleep(least - took)
	close(done)
	p := <-results
	t.Logf("blocking stdin: stalled after %d round trips (%d slow) in %v; stdin from Open: %d stalls in %d round trips (%d slow)",
		trips, slowTrips, took.Round(time.Millisecond), p.stalls, p.trips, p.slow)
	if p.err != nil {
		t.Fatalf("the child reading stdin through Open: %v", p.err)
	}
	if !stalled {
		t.Errorf("a child reading a blocking stdin made %d round trips in %v without a stall: the runtime no longer stalls, and Open may go", trips, limit)
	}
	if p.stalls > 0 {
		t.Errorf("a child reading stdin through Open stalled %d times in %d round trips", p.stalls, p.trips)
	}
	if p.trips < trips {
		t.Errorf("the child reading stdin through Open made %d round trips, fewer than the %d of the other", p.trips, trips)
	}
}

func TestOpen(t *testing.T) {
	blockingPipe := func(t *testing.T) (*os.File, *os.File) {
		r, w, err := os.Pipe()
		if err != nil {
			t.Fatal(err)
		}
		// As a child is given its stdin: Fd puts the pipe in blocking
		// mode, and a file made from a copy of the descriptor is not
		// polled.
		fd, err := syscall.Dup(int(r.Fd()))
		if err != nil {
			t.Fatal(err)
		}
		r.Close()
		b := os.NewFile(uintptr(fd), "stdin")
		t.Cleanup(func() { b.Close(); w.Close() })
		return b, w
	}
	t.Run("a blocking pipe is opened again, polled", func(t *testing.T) {
		r, w := blockingPipe(t)
		if pollable.Polled(r) {
			t.Fatal("the pipe is polled already")
		}
		p := pollable.Open(r)
		if p == r || !pollable.Polled(p) {
			t.Fatalf("Open returned %v (polled %v), want a polled file in place of the blocking pipe", p.Name(), pollable.Polled(p))
		}
		defer p.Close()
		if _, err := w.Write([]byte("line\n")); err != nil {
			t.Fatal(err)
		}
		w.Close()
		got, err := io.ReadAll(p)
		if err != nil || string(got) != "line\n" {
			t.Fatalf("read %q, %v through the reopened pipe, want what was written and then EOF", got, err)
		}
	})
	t.Run("a polled pipe stays", func(t *testing.T) {
		r, w, err := os.Pipe()
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close()
		defer w.Close()
		if p := pollable.Open(r); p != r {
			t.Fatalf("Open returned another file for a polled pipe")
		}
	})
	t.Run("a regular file stays", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "in")
		if err := os.WriteFile(path, []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
		f, err := os.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		if p := pollable.Open(f); p != f {
			t.Fatalf("Open returned %s for a regular file", p.Name())
		}
	})
	t.Run("nil stays nil", func(t *testing.T) {
		if p := pollable.Open(nil); p != nil {
			t.Fatal("Open(nil) returned a file")
		}
	})
}
