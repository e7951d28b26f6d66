package storetest

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/interlock-mcp/interlock"
	"github.com/interlock-mcp/interlock/internal/testproc"
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
	for f := range testproc.Ready(t) {
		switch {
		case len(f) == 3 && f[0] == "consume":
			fmt.Println("won", testproc.Together(t, 4, 4, func() (bool, error) { return tokens.Consume(ctx, f[1], f[2]) }))
		case len(f) == 4 && f[0] == "take":
			limit, err1 := strconv.Atoi(f[2])
			tries, err2 := strconv.Atoi(f[3])
			if err1 != nil || err2 != nil {
				t.Fatalf("bad line %q", strings.Join(f, " "))
			}
			fmt.Println("took", testproc.Together(t, 8, tries, func() (bool, error) {
				ok, _, _, err := budgets.Take(ctx, hourly(f[1], limit))
				// Takes a few milliseconds apart, as calls reach a
				// gateway, leave a store's lock free now and then: a
				// SQLite file taken back to back is seldom found free
				// by the other process, polling in its busy handler.
				time.Sleep(5 * time.Millisecond)
				return ok, err
			}))
		default:
			t.Fatalf("bad line %q", strings.Join(f, " "))
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
	procs := testproc.Start(t, 2, "TestStoreHelperProcess", whereEnv+"="+where)
	wins := make([]int, len(procs))
	for round := range 20 {
		nonce := fmt.Sprintf("n%d", round)
		if err := s.Issue(ctx, "b", nonce, time.Minute); err != nil {
			t.Fatal(err)
		}
		testproc.SendAll(t, procs, "consume b "+nonce)
		won := 0
		for i, p := range procs {
			n := p.Number(t, "won")
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
	procs := testproc.Start(t, 2, "TestStoreHelperProcess", whereEnv+"="+where)
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
		testproc.SendAll(t, procs, fmt.Sprintf("take %s %d %d", keys, limit, tries))
		took := make([]int, len(procs))
		total := 0
		for i, p := range procs {
			took[i] = p.Number(t, "took")
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
