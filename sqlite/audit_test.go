package sqlite

import (
	"context"
	"database/sql"
	"errors"
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

// TestWriterKeepsItsHead: a running writer links its next record after the
// last one it wrote, not after what is left when someone deletes records
// under it, so the deletion shows in the chain itself.
func TestWriterKeepsItsHead(t *testing.T) {
	for _, tt := range []struct {
		name, sql string
		seq       int64 // the record verify must name
	}{
		{"emptied", "DELETE FROM audit", 1},
		{"last record deleted", "DELETE FROM audit WHERE seq = 3", 3},
	} {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "audit.db")
			a, err := OpenAudit(t.Context(), path)
			if err != nil {
				t.Fatal(err)
			}
			defer a.Close()
			add := func() {
				if err := a.Append(t.Context(), false, &audit.Record{Event: "call", Tool: "refund_invoice", Decision: "allowed"}); err != nil {
					t.Fatal(err)
				}
			}
			for range 3 {
				add()
			}
			db, err := sql.Open("sqlite", path+dsnParams)
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			if _, err := db.Exec(tt.sql); err != nil {
				t.Fatal(err)
			}
			add()
			_, err = audit.Verify(a.Records(t.Context(), 1))
			if ce, ok := errors.AsType[*audit.ChainError](err); !ok || ce.Seq != tt.seq {
				t.Fatalf("verify = %v, want a break at record %d", err, tt.seq)
			}
		})
	}
}
