package pollable_test

import (
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
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
// goroutine that reads stdin goes back to its read at that moment.
func echoStopping(how string) {
	in := os.Stdin
	if how == "pollable" {
		in = pollable.Open(os.Stdin)
	}
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
	e := &echoer{cmd: cmd, in: in, answers: make(chan struct{}, 64)}
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
	t.Cleanup(func() {
		in.Close()
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	return e
}

// stalled sends e one byte and reports whether its answer took longer
// than patience, the child's every goroutine stopped meanwhile. A stalled
// child is woken with another byte, and both answers are awaited.
func (e *echoer) stalled(t *testing.T, patience time.Duration) bool {
	t.Helper()
	if _, err := e.in.Write([]byte("x")); err != nil {
		t.Fatal(err)
	}
	select {
	case _, ok := <-e.answers:
		if !ok {
			t.Fatal("the child ended")
		}
		return false
	case <-time.After(patience):
	}
	if _, err := e.in.Write([]byte("y")); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		select {
		case <-e.answers:
		case <-time.After(10 * time.Second):
			t.Fatal("the stalled child did not answer once written to again")
		}
	}
	return true
}

// TestStopTheWorldStallsABlockingStdin shows the runtime's stall the
// package works around, and that a stdin from Open does not stall. Two
// children answer one byte at a time and stop the world between reads:
// one reads its stdin as it was given (a pipe in blocking mode), the
// other reads it through Open. The first stalls, usually within seconds,
// until it is written to again; the second, making round trips as fast
// over the same time (three seconds at least), never does. Should the first stop stalling, a Go
// release has fixed the runtime and Open may go.
func TestStopTheWorldStallsABlockingStdin(t *testing.T) {
	const (
		patience = time.Second      // far above a round trip's time on a loaded machine
		limit    = 40 * time.Second // to see the blocking child stall
		least    = 3 * time.Second  // of round trips through Open
	)
	blocking, polled := startEchoer(t, "blocking"), startEchoer(t, "pollable")
	type tally struct{ trips, stalls int }
	results := make(chan tally, 1)
	done := make(chan struct{})
	go func() {
		var r tally
		for {
			select {
			case <-done:
				results <- r
				return
			default:
			}
			r.trips++
			if polled.stalled(t, patience) {
				r.stalls++
			}
		}
	}()
	start := time.Now()
	trips, stalled := 0, false
	for !stalled && time.Since(start) < limit {
		trips++
		stalled = blocking.stalled(t, patience)
	}
	took := time.Since(start)
	time.Sleep(least - took)
	close(done)
	p := <-results
	t.Logf("blocking stdin: stalled after %d round trips in %v; stdin from Open: %d stalls in %d round trips",
		trips, took.Round(time.Millisecond), p.stalls, p.trips)
	if !stalled {
		t.Errorf("a child reading a blocking stdin made %d round trips in %v without a stall: the runtime no longer stalls, and Open may go", trips, limit)
	}
	if p.stalls > 0 {
		t.Errorf("a child reading stdin through Open stalled %d times in %d round trips", p.stalls, p.trips)
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
