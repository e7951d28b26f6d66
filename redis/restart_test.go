package redis_test

import (
	"context"
	"testing"
	"time"

	"github.com/interlock-mcp/interlock/approval"
	"github.com/interlock-mcp/interlock/consolestate"
	"github.com/interlock-mcp/interlock/consolestate/consolestatetest"
	"github.com/interlock-mcp/interlock/internal/testdb"
	"github.com/interlock-mcp/interlock/redis"
)

// TestConsoleAfterARestart: while Redis is away the console's state
// answers with errors, never with a session; once it is back, the
// sessions written before are there, and a listener of the signal hears
// again, after a word that says it may have missed some.
func TestConsoleAfterARestart(t *testing.T) {
	srv := testdb.OwnRedis(t)
	ctx := context.Background()
	s, err := redis.Open(ctx, srv.URL(), "interlock-test:restart:")
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	c := s.Console()
	lctx, stopListening := context.WithCancel(ctx)
	defer stopListening()
	heard, err := c.Listen(lctx)
	if err != nil {
		t.Fatal(err)
	}
	key := "a-session-key"
	now := time.Now()
	if err := c.StartSession(ctx, key, sessionAt(now), time.Hour); err != nil {
		t.Fatal(err)
	}

	srv.Kill()
	if _, err := c.Session(ctx, key, now, time.Hour, true); err == nil {
		t.Fatal("a session was read while Redis was away")
	}
	srv.Start()

	if got, err := waitFor(func() (bool, error) {
		_, err := c.Session(ctx, key, now, time.Hour, true)
		return err == nil, nil
	}); !got || err != nil {
		t.Fatalf("the session written before the restart: %v", err)
	}
	// The listener says it may have missed words, then hears new ones.
	consolestatetest.HearsAfterGap(t, c, heard, 10*time.Second)
}

func waitFor(cond func() (bool, error)) (bool, error) {
	deadline := time.Now().Add(10 * time.Second)
	for {
		ok, err := cond()
		if ok || err != nil || time.Now().After(deadline) {
			return ok, err
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func sessionAt(at time.Time) consolestate.Session {
	return consolestate.Session{Who: approval.Identity{Tenant: "acme", Principal: "bob"}, CSRF: "csrf", Created: at, LastSeen: at}
}
