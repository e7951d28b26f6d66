package sqlite

import (
	"context"
	"database/sql"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/interlock-mcp/interlock/audit"
	"github.com/interlock-mcp/interlock/audit/audittest"
)

func TestAuditConformance(t *testing.T) {
	dir := t.TempDir()
	var mu sync.Mutex
	paths := map[string]string{}
	path := func(name string) string {
		mu.Lock()
		defer mu.Unlock()
		if p, ok := paths[name]; ok {
			return p
		}
		p := filepath.Join(dir, strings.ReplaceAll(name, " ", "_")+".db")
		paths[name] = p
		return p
	}
	audittest.Run(t, audittest.Backend{
		Open: func(t *testing.T, name string) audittest.Store {
			a, err := OpenAudit(context.Background(), path(name))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { a.Close() })
			return a
		},
		Exec: func(t *testing.T, name, stmt string) {
			db, err := sql.Open("sqlite", path(name)+dsnParams)
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			if _, err := db.Exec(stmt); err != nil {
				t.Fatalf("%s: %v", stmt, err)
			}
		},
		Empty: "DELETE FROM audit",
	})
}

// BenchmarkAppend measures one record's append: committed (an allowed
// call's outcome) or flushed (a confirmation), from one writer or eight.
func BenchmarkAppend(b *testing.B) {
	audittest.BenchmarkAppend(b, func(b *testing.B) audit.Log {
		a, err := OpenAudit(context.Background(), filepath.Join(b.TempDir(), "audit.db"))
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { a.Close() })
		return a
	})
}
