package sqlite

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/interlock-mcp/interlock"
	"github.com/interlock-mcp/interlock/approval"
	"github.com/interlock-mcp/interlock/seal"
)

func openState(t testing.TB, path string) *State {
	s, err := OpenState(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Error(err)
		}
	})
	return s
}

// TestStateSharesOneFile opens the state file of a data directory whose
// approvals a process opened alone: the approvals are shared, the tokens
// and budgets work beside them, and once the state is closed none of its
// stores changes anything.
func TestStateSharesOneFile(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "state.db")
	alone := openApprovals(t, path)
	st, err := OpenState(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	a := &approval.Approval{ID: "apr_1", Key: "k1", Tenant: "acme", Principal: "alice", Tool: "refund_invoice",
		Approvers: []string{"bob"}, Quorum: 1, CreatedAt: now, ExpiresAt: now.Add(time.Minute)}
	if _, err := alone.Request(ctx, a); err != nil {
		t.Fatal(err)
	}
	if list, err := st.Approvals().List(ctx); err != nil || len(list) != 1 || list[0].ID != a.ID {
		t.Errorf("the state lists %v %v", list, err)
	}
	if err := st.Tokens().Issue(ctx, "b", "n", time.Minute); err != nil {
		t.Fatal(err)
	}
	if ok, err := st.Tokens().Consume(ctx, "b", "n"); !ok || err != nil {
		t.Errorf("Consume = %v, %v", ok, err)
	}
	if ok, _, _, err := st.Budgets().Take(ctx, one("k", 1, time.Hour)); !ok || err != nil {
		t.Errorf("Take = %v, %v", ok, err)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	if err := st.Tokens().Issue(ctx, "b", "n2", time.Minute); err == nil {
		t.Error("a closed state issued a token")
	}
	if ok, _, _, err := st.Budgets().Take(ctx, one("k2", 1, time.Hour)); ok || err == nil {
		t.Errorf("a closed state took %v, %v", ok, err)
	}
	if _, err := st.Approvals().Request(ctx, &approval.Approval{ID: "apr_2", Key: "k2", CreatedAt: now, ExpiresAt: now.Add(time.Minute)}); err == nil {
		t.Error("a closed state stored an approval")
	}
	if _, err := alone.Get(ctx, "apr_2"); err == nil {
		t.Error("the approval was stored")
	}
}

// TestTokens issues on one handle and consumes on another, as two
// gateways on one data directory would.
func TestTokens(t *testing.T) {
	ctx := context.Background()
	tests := []struct {
		name string
		run  func(issuer, redeemer *Tokens) (bool, error)
		want bool
	}{
		{"issued token consumes", func(s, r *Tokens) (bool, error) {
			s.Issue(ctx, "b", "n1", time.Minute)
			return r.Consume(ctx, "b", "n1")
		}, true},
		{"consumes on the issuing handle", func(s, _ *Tokens) (bool, error) {
			s.Issue(ctx, "b", "n1", time.Minute)
			return s.Consume(ctx, "b", "n1")
		}, true},
		{"second consume fails", func(s, r *Tokens) (bool, error) {
			s.Issue(ctx, "b", "n1", time.Minute)
			r.Consume(ctx, "b", "n1")
			return s.Consume(ctx, "b", "n1")
		}, false},
		{"superseded nonce fails", func(s, r *Tokens) (bool, error) {
			s.Issue(ctx, "b", "n1", time.Minute)
			r.Issue(ctx, "b", "n2", time.Minute)
			return s.Consume(ctx, "b", "n1")
		}, false},
		{"a failed consume leaves the live token", func(s, r *Tokens) (bool, error) {
			s.Issue(ctx, "b", "n2", time.Minute)
			r.Consume(ctx, "b", "n1")
			return r.Consume(ctx, "b", "n2")
		}, true},
		{"other binding", func(s, r *Tokens) (bool, error) {
			s.Issue(ctx, "b", "n1", time.Minute)
			return r.Consume(ctx, "c", "n1")
		}, false},
		{"live until its expiry", func(s, r *Tokens) (bool, error) {
			s.Issue(ctx, "b", "n1", time.Minute)
			time.Sleep(time.Minute - time.Nanosecond)
			return r.Consume(ctx, "b", "n1")
		}, true},
		{"expired", func(s, r *Tokens) (bool, error) {
			s.Issue(ctx, "b", "n1", time.Minute)
			time.Sleep(time.Minute)
			return r.Consume(ctx, "b", "n1")
		}, false},
		{"a reissue restarts the time", func(s, r *Tokens) (bool, error) {
			s.Issue(ctx, "b", "n1", time.Minute)
			time.Sleep(50 * time.Second)
			s.Issue(ctx, "b", "n1", time.Minute)
			time.Sleep(50 * time.Second)
			return r.Consume(ctx, "b", "n1")
		}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "state.db")
			// The handles live in the bubble, whose clock the cases
			// advance.
			synctest.Test(t, func(t *testing.T) {
				got, err := tt.run(openState(t, path).Tokens(), openState(t, path).Tokens())
				if err != nil {
					t.Fatal(err)
				}
				if got != tt.want {
					t.Errorf("Consume = %v, want %v", got, tt.want)
				}
			})
		})
	}
}

// TestTokensDropExpired checks that a handle's first issue drops the
// tokens that expired, and nothing live.
func TestTokensDropExpired(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "state.db")
	s := openState(t, path).Tokens()
	for i, ttl := range []time.Duration{-time.Second, -time.Nanosecond, time.Hour} {
		if err := s.Issue(ctx, fmt.Sprintf("b%d", i), "n", ttl); err != nil {
			t.Fatal(err)
		}
	}
	if err := openState(t, path).Tokens().Issue(ctx, "new", "n", time.Hour); err != nil {
		t.Fatal(err)
	}
	rows, err := s.db.QueryContext(ctx, "SELECT binding FROM tokens ORDER BY binding")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var kept []string
	for rows.Next() {
		var b string
		if err := rows.Scan(&b); err != nil {
			t.Fatal(err)
		}
		kept = append(kept, b)
	}
	if strings.Join(kept, " ") != "b2 new" {
		t.Errorf("kept %v, want the live b2 and new", kept)
	}
}

// TestTokensExactlyOnceAcrossHandles issues a token on one gate and
// redeems it 1,000 times at once on two gates, each with its own handle
// on one file and the same sealing key.
func TestTokensExactlyOnceAcrossHandles(t *testing.T) {
	sealer, err := seal.New([]byte(strings.Repeat("s", seal.MinKeyLength)))
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "state.db")
	newReplica := func() *interlock.Gate {
		g, err := interlock.NewGate(interlock.ByAnnotations{Mode: interlock.ModeToken}, &interlock.GateOptions{
			Getenv: func(k string) string { return map[string]string{"MCP_DRY_RUN": "false"}[k] },
			Logger: slog.New(slog.DiscardHandler), Sealer: sealer, Tokens: openState(t, path).Tokens(),
		})
		if err != nil {
			t.Fatal(err)
		}
		return g
	}
	replicas := []*interlock.Gate{newReplica(), newReplica()}
	tool, _ := interlock.NewTool("refund_invoice", "", interlock.HintsOf(nil), nil)
	id := interlock.Identity{Principal: "alice", Tenant: "acme"}
	var runs atomic.Int64
	call := func(g *interlock.Gate, args string) interlock.Body {
		return interlock.BodyOfResult(g.Call(context.Background(), tool, id, json.RawMessage(args), func(context.Context, json.RawMessage) (*mcp.CallToolResult, error) {
			runs.Add(1)
			return &mcp.CallToolResult{Content: []mcp.Content{}}, nil
		}))
	}
	body := call(replicas[0], `{"invoice_id":"inv_1003","amount":5}`)
	if body.Code != interlock.CodeConfirmationRequired {
		t.Fatalf("describe: %+v", body)
	}
	redeem := fmt.Sprintf(`{"invoice_id":"inv_1003","amount":5,"__confirm_token":%q}`, body.ConfirmToken)

	var wg sync.WaitGroup
	var invalid atomic.Int64
	start := make(chan struct{})
	for i := range 1000 {
		wg.Go(func() {
			<-start
			if body := call(replicas[i%2], redeem); body.Code == interlock.CodeConsentTokenInvalid {
				invalid.Add(1)
			}
		})
	}
	close(start)
	wg.Wait()
	if runs.Load() != 1 || invalid.Load() != 999 {
		t.Errorf("runs %d, CONSENT_TOKEN_INVALID %d; want 1 and 999", runs.Load(), invalid.Load())
	}
}

// TestTokensAcrossProcesses has two gateway processes race, 20 times, to
// consume one token issued here, each from four goroutines at once:
// exactly one of the eight consumes wins each time.
func TestTokensAcrossProcesses(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "state.db")
	s := openState(t, path).Tokens()
	procs := startProcesses(t, "tokens", path)
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

// BenchmarkTokens measures an issue, an issue and its consumption, and
// the same pair from several goroutines on two handles on one file.
func BenchmarkTokens(b *testing.B) {
	ctx := context.Background()
	b.Run("Issue", func(b *testing.B) {
		s := openState(b, filepath.Join(b.TempDir(), "state.db")).Tokens()
		i := 0
		for b.Loop() {
			if err := s.Issue(ctx, fmt.Sprintf("b%d", i%64), "n", time.Minute); err != nil {
				b.Fatal(err)
			}
			i++
		}
	})
	b.Run("Issue and Consume", func(b *testing.B) {
		s := openState(b, filepath.Join(b.TempDir(), "state.db")).Tokens()
		i := 0
		for b.Loop() {
			binding := fmt.Sprintf("b%d", i%64)
			i++
			if err := s.Issue(ctx, binding, "n", time.Minute); err != nil {
				b.Fatal(err)
			}
			if ok, err := s.Consume(ctx, binding, "n"); err != nil || !ok {
				b.Fatal("consume failed", err)
			}
		}
	})
	b.Run("Issue and Consume two handles", func(b *testing.B) {
		path := filepath.Join(b.TempDir(), "state.db")
		handles := []*Tokens{openState(b, path).Tokens(), openState(b, path).Tokens()}
		var n atomic.Int64
		b.SetParallelism(4)
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				i := n.Add(1)
				s, binding := handles[i%2], fmt.Sprintf("p%d", i)
				if err := s.Issue(ctx, binding, "n", time.Minute); err != nil {
					b.Error(err)
					return
				}
				if ok, err := s.Consume(ctx, binding, "n"); err != nil || !ok {
					b.Error("consume failed", err)
					return
				}
			}
		})
	})
}

// The environment that makes a test binary a gateway process of the
// tests across processes: the store it opens and the file.
const (
	processStoreEnv = "INTERLOCK_SQLITETEST_STORE"
	processPathEnv  = "INTERLOCK_SQLITETEST_PATH"
)

// TestStateHelperProcess is a gateway process of TestTokensAcrossProcesses
// or TestBudgetsAcrossProcesses. It opens its store, says it is ready and
// answers each line of its input with one line: "consume BINDING NONCE"
// with how many of four goroutines consumed the token at once, "take KEY
// LIMIT TRIES" with how many of TRIES takes, from eight goroutines each
// taking 5 ms after its last, succeeded. A line starts with the Unix time
// in nanoseconds to start at, the same for every process. Run as a test
// it does nothing.
func TestStateHelperProcess(t *testing.T) {
	store, path := os.Getenv(processStoreEnv), os.Getenv(processPathEnv)
	if store == "" {
		return
	}
	ctx := context.Background()
	var tokens *Tokens
	var budgets *Budgets
	switch store {
	case "tokens":
		tokens = openState(t, path).Tokens()
	case "budgets":
		budgets = openState(t, path).Budgets()
	default:
		t.Fatalf("no store %q", store)
	}
	fmt.Println("ready")
	// together runs fn from n goroutines at once and counts its successes.
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
		case len(f) == 3 && f[0] == "consume" && tokens != nil:
			fmt.Println("won", together(4, 4, func() (bool, error) { return tokens.Consume(ctx, f[1], f[2]) }))
		case len(f) == 4 && f[0] == "take" && budgets != nil:
			limit, err1 := strconv.Atoi(f[2])
			tries, err2 := strconv.Atoi(f[3])
			if err1 != nil || err2 != nil {
				t.Fatalf("bad line %q", in.Text())
			}
			fmt.Println("took", together(8, tries, func() (bool, error) {
				ok, _, _, err := budgets.Take(ctx, takesOf(f[1], limit))
				// Takes a few milliseconds apart, as calls reach a
				// gateway, leave the file unlocked now and then: takes
				// back to back hold it, and the other process, polling
				// in SQLite's busy handler, seldom finds it free.
				time.Sleep(5 * time.Millisecond)
				return ok, err
			}))
		default:
			t.Fatalf("bad line %q", in.Text())
		}
	}
}

// process is a gateway process running TestStateHelperProcess.
type process struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	lines  *bufio.Scanner
	seen   []string
	stderr strings.Builder
}

// startProcesses starts two gateway processes on the store of the file at
// path, and returns once both have opened it. They end with the test.
func startProcesses(t *testing.T, store, path string) []*process {
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
		p := &process{cmd: exec.CommandContext(ctx, os.Args[0], "-test.run=^TestStateHelperProcess$", "-test.count=1")}
		p.cmd.Env = append(os.Environ(), processStoreEnv+"="+store, processPathEnv+"="+path)
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
