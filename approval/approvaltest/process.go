package approvaltest

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

	"github.com/interlock-mcp/interlock/approval"
)

// The environment that makes a test binary a gateway process of
// [UsesAcrossProcesses]: the store it dials, the grant it uses and how
// many times it tries.
const (
	storeEnv = "INTERLOCK_APPROVALTEST_STORE"
	grantEnv = "INTERLOCK_APPROVALTEST_GRANT"
	triesEnv = "INTERLOCK_APPROVALTEST_TRIES"
)

// Dial opens, in a process of its own, a handle on the grant store that
// where names.
type Dial func(t *testing.T, where string) approval.GrantStore

// HelperProcess is the body of a test named TestHelperProcess. Started by
// [UsesAcrossProcesses], it dials the store, says it is ready, waits to be
// told to go, uses the grant from several goroutines and prints how many
// uses succeeded. Run as an ordinary test it does nothing.
func HelperProcess(t *testing.T, dial Dial) {
	where := os.Getenv(storeEnv)
	if where == "" {
		return
	}
	ctx := context.Background()
	id := os.Getenv(grantEnv)
	tries, err := strconv.Atoi(os.Getenv(triesEnv))
	if err != nil {
		t.Fatal(err)
	}
	s := dial(t, where)
	fmt.Println("ready")
	if _, err := bufio.NewReader(os.Stdin).ReadString('\n'); err != nil {
		t.Fatal(err)
	}
	var used atomic.Int64
	var wg sync.WaitGroup
	const workers = 8
	for w := range workers {
		wg.Go(func() {
			for i := w; i < tries; i += workers {
				ok, err := s.UseGrant(ctx, id)
				if err != nil {
					t.Error(err)
					return
				}
				if ok {
					used.Add(1)
				}
			}
		})
	}
	wg.Wait()
	fmt.Printf("used %d\n", used.Load())
}

// UsesAcrossProcesses adds a grant of 25 uses to s, then has two gateway
// processes (this test binary again, running TestHelperProcess, which
// calls [HelperProcess]) use it 40 times each at once, through handles of
// their own on the store that where names. Between them exactly 25 uses
// succeed, and the store counts 25.
func UsesAcrossProcesses(t *testing.T, s approval.GrantStore, where string) {
	const uses, tries = 25, 40
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	now := time.Now()
	g := &approval.StandingGrant{ID: "grt_procs", Tool: "refund_invoice", Tenant: "acme", Principal: "alice", GrantedBy: "bob",
		Approvers: []string{"bob"}, CreatedAt: now, ExpiresAt: now.Add(time.Hour), Uses: uses}
	if err := s.AddGrant(ctx, g); err != nil {
		t.Fatal(err)
	}
	type process struct {
		cmd    *exec.Cmd
		stdin  io.WriteCloser
		lines  *bufio.Scanner
		seen   []string
		stderr strings.Builder
	}
	// next returns the process's next line that starts with prefix,
	// keeping the others to show should it fail.
	next := func(p *process, prefix string) string {
		t.Helper()
		for p.lines.Scan() {
			line := p.lines.Text()
			if strings.HasPrefix(line, prefix) {
				return line
			}
			p.seen = append(p.seen, line)
		}
		p.cmd.Wait()
		t.Fatalf("gateway process ended before %q: %v\n%s\n%s", prefix, p.lines.Err(), strings.Join(p.seen, "\n"), p.stderr.String())
		return ""
	}
	var procs []*process
	for range 2 {
		p := &process{cmd: exec.CommandContext(ctx, os.Args[0], "-test.run=^TestHelperProcess$", "-test.count=1")}
		p.cmd.Env = append(os.Environ(), storeEnv+"="+where, grantEnv+"="+g.ID, triesEnv+"="+strconv.Itoa(tries))
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
	// Both processes have dialled the store before either uses the
	// grant, so their uses overlap.
	for _, p := range procs {
		next(p, "ready")
	}
	for _, p := range procs {
		if _, err := io.WriteString(p.stdin, "go\n"); err != nil {
			t.Fatal(err)
		}
	}
	var total int
	for i, p := range procs {
		var n int
		if _, err := fmt.Sscanf(next(p, "used "), "used %d", &n); err != nil {
			t.Fatal(err)
		}
		// The rest of its output (its test verdict) is drained before Wait.
		for p.lines.Scan() {
			p.seen = append(p.seen, p.lines.Text())
		}
		if err := p.cmd.Wait(); err != nil {
			t.Fatalf("gateway process %d: %v\n%s\n%s", i, err, strings.Join(p.seen, "\n"), p.stderr.String())
		}
		t.Logf("gateway process %d used the grant %d times", i, n)
		total += n
	}
	if total != uses {
		t.Errorf("two processes used a grant of %d uses %d times", uses, total)
	}
	if got, err := s.Grant(ctx, g.ID); err != nil || got.Used != uses || got.Live(time.Now()) {
		t.Errorf("the grant after both processes: %+v %v", got, err)
	}
}
