package sqlite

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/interlock-mcp/interlock/consolestate"
	"github.com/interlock-mcp/interlock/consolestate/consolestatetest"
	"github.com/interlock-mcp/interlock/storetest"
)

func TestConsoleConformance(t *testing.T) {
	consolestatetest.Run(t, storetest.Both(twoStates, func(s *State) consolestate.Store { return s.Console() }))
}

func TestConsoleSignal(t *testing.T) {
	consolestatetest.RunSignal(t, storetest.Both(twoStates, func(s *State) consolestate.Signal { return s.Console() }))
}

// TestConsoleKeepsNoSecret: what the file holds of a session and a link
// is the hash of their secret, never the secret.
func TestConsoleKeepsNoSecret(t *testing.T) {
	ctx := context.Background()
	s := openState(t, filepath.Join(t.TempDir(), "state.db"))
	now := time.Now()
	if err := s.Console().StartSession(ctx, consolestate.Key("the-session-id"), consolestate.Session{Created: now, LastSeen: now}, time.Hour); err != nil {
		t.Fatal(err)
	}
	if err := s.Console().AddLink(ctx, consolestate.Key("the-link-token"), consolestate.Session{}.Who, now.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	var n int
	if err := s.h.db.QueryRowContext(ctx, `SELECT (SELECT count(*) FROM console_sessions WHERE key = 'the-session-id' OR body LIKE '%the-session-id%')
		+ (SELECT count(*) FROM console_once WHERE key = 'the-link-token')`).Scan(&n); err != nil || n != 0 {
		t.Errorf("%d rows hold a secret (%v)", n, err)
	}
}

// TestConsoleAcrossProcesses: two processes on one state file race for a
// link, a challenge and a counter; one wins each time.
func TestConsoleAcrossProcesses(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state.db")
	consolestatetest.AcrossProcesses(t, openState(t, path).Console(), path)
}

// TestConsoleHelperProcess is a gateway process of
// TestConsoleAcrossProcesses; run as a test it does nothing.
func TestConsoleHelperProcess(t *testing.T) {
	consolestatetest.HelperProcess(t, func(t *testing.T, path string) consolestate.Store {
		return openState(t, path).Console()
	})
}
