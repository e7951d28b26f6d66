package consolestatetest

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/interlock-mcp/interlock/consolestate"
	"github.com/interlock-mcp/interlock/internal/testproc"
)

// whereEnv names, to a test binary run as a gateway process of
// [AcrossProcesses], the store it dials.
const whereEnv = "INTERLOCK_CONSOLESTATETEST_WHERE"

// Dial opens, in a process of its own, a handle on the store where names.
type Dial func(t *testing.T, where string) consolestate.Store

// The session and passkey the processes race for.
const (
	raceSession = "session-of-the-race"
	racePasskey = "passkey-of-the-race"
)

// HelperProcess is the body of a test named TestConsoleHelperProcess.
// Started by [AcrossProcesses], it dials the store, says it is ready and
// answers each line with how many of four goroutines at once won: "spend
// KEY" spends a link, "take" takes the race session's registration
// challenge, "swap REV" moves the race passkey from revision REV. Run as
// an ordinary test it does nothing.
func HelperProcess(t *testing.T, dial Dial) {
	where := os.Getenv(whereEnv)
	if where == "" {
		return
	}
	ctx := context.Background()
	s := dial(t, where)
	owner := consolestate.OwnerOf(bob)
	for f := range testproc.Ready(t) {
		var won int
		switch {
		case len(f) == 2 && f[0] == "spend":
			won = testproc.Together(t, 4, 4, func() (bool, error) {
				_, ok, err := s.SpendLink(ctx, f[1], time.Now())
				return ok, err
			})
		case len(f) == 1 && f[0] == "take":
			won = testproc.Together(t, 4, 4, func() (bool, error) {
				v, err := s.Take(ctx, consolestate.Key(raceSession), consolestate.Registration)
				return v != nil, err
			})
		case len(f) == 2 && f[0] == "swap":
			rev, err := strconv.ParseInt(f[1], 10, 64)
			if err != nil {
				t.Fatalf("bad line %q", strings.Join(f, " "))
			}
			won = testproc.Together(t, 4, 4, func() (bool, error) {
				return s.SwapPasskey(ctx, owner, consolestate.Passkey{ID: []byte(racePasskey), Credential: []byte(`{}`), Rev: rev})
			})
		default:
			t.Fatalf("bad line %q", strings.Join(f, " "))
		}
		fmt.Println("won", won)
	}
}

// AcrossProcesses has two gateway processes (this test binary again,
// running TestConsoleHelperProcess, which calls [HelperProcess]) race, 20
// times each, through handles of their own on the store where names: to
// spend one link, to take one registration challenge, and to move one
// passkey's signature counter from one revision, each from four
// goroutines at once. Of the eight, exactly one wins each time.
func AcrossProcesses(t *testing.T, s consolestate.Store, where string) {
	ctx := context.Background()
	now := time.Now()
	key := consolestate.Key(raceSession)
	if err := s.StartSession(ctx, key, session(bob, now), time.Hour); err != nil {
		t.Fatal(err)
	}
	owner := consolestate.OwnerOf(bob)
	if err := s.AddPasskey(ctx, owner, consolestate.Passkey{ID: []byte(racePasskey), Credential: []byte(`{}`)}); err != nil {
		t.Fatal(err)
	}
	procs := testproc.Start(t, 2, "TestConsoleHelperProcess", whereEnv+"="+where)
	races := []struct {
		name    string
		prepare func(round int) string
	}{
		{"a link spent", func(round int) string {
			link := consolestate.Key(fmt.Sprint("race link ", round))
			if err := s.AddLink(ctx, link, bob, time.Now().Add(time.Hour)); err != nil {
				t.Fatal(err)
			}
			return "spend " + link
		}},
		{"a registration challenge taken", func(round int) string {
			if err := s.Put(ctx, key, consolestate.Registration, []byte(fmt.Sprint("challenge ", round))); err != nil {
				t.Fatal(err)
			}
			return "take"
		}},
		{"a signature counter moved", func(int) string {
			keys, err := s.Passkeys(ctx, owner)
			if err != nil || len(keys) != 1 {
				t.Fatalf("the race passkey: %v %v", keys, err)
			}
			return fmt.Sprint("swap ", keys[0].Rev)
		}},
	}
	for _, race := range races {
		t.Run(race.name, func(t *testing.T) {
			for round := range 20 {
				testproc.SendAll(t, procs, race.prepare(round))
				won := 0
				for _, p := range procs {
					won += p.Number(t, "won")
				}
				if won != 1 {
					t.Fatalf("round %d: %d of eight won across two processes", round, won)
				}
			}
		})
	}
}
