package postgres

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/interlock-mcp/interlock/audit"
	"github.com/interlock-mcp/interlock/audit/audittest"
)

// testURL is the real PostgreSQL server the tests use.
const testURL = "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"

// schemaURL returns a URL for a fresh schema of its own, dropped after the
// test.
func schemaURL(t testing.TB) (string, string) {
	t.Helper()
	b := make([]byte, 6)
	rand.Read(b)
	name := "interlock_test_" + hex.EncodeToString(b)
	exec(t, testURL, "CREATE SCHEMA "+name)
	t.Cleanup(func() { exec(t, testURL, "DROP SCHEMA "+name+" CASCADE") })
	return testURL + "&search_path=" + name, name
}

func exec(t testing.TB, url, stmt string) {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatalf("PostgreSQL at 127.0.0.1:5432: %v", err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, stmt); err != nil {
		t.Fatalf("%s: %v", stmt, err)
	}
}

func TestAuditConformance(t *testing.T) {
	var mu sync.Mutex
	urls := map[string]string{}
	url := func(t *testing.T, name string) string {
		mu.Lock()
		defer mu.Unlock()
		if u, ok := urls[name]; ok {
			return u
		}
		u, _ := schemaURL(t)
		urls[name] = u
		return u
	}
	audittest.Run(t, audittest.Backend{
		Open: func(t *testing.T, name string) audittest.Store {
			a, err := OpenAudit(context.Background(), url(t, name))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { a.Close() })
			return a
		},
		Exec: func(t *testing.T, name, stmt string) {
			// PostgreSQL's replace() is the same function as SQLite's.
			exec(t, url(t, name), strings.TrimSpace(stmt))
		},
		Empty: "DELETE FROM audit; UPDATE audit_head SET seq = 0, hash = ''",
	})
}

// BenchmarkAppend measures one record's append: committed without waiting
// for the server's flush (an allowed call's outcome) or flushed (a
// confirmation), from one writer or eight.
func BenchmarkAppend(b *testing.B) {
	audittest.BenchmarkAppend(b, func(b *testing.B) audit.Log {
		url, _ := schemaURL(b)
		a, err := OpenAudit(context.Background(), url)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { a.Close() })
		return a
	})
}
