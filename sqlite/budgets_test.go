package sqlite

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/interlock-mcp/interlock"
	"github.com/interlock-mcp/interlock/storetest"
)

// one is the take of a single budget under key.
func one(key string, limit int, window time.Duration) []interlock.BudgetTake {
	return []interlock.BudgetTake{{Key: key, Limit: limit, Window: window}}
}

// TestBudgetsWaitWithinWindow checks that a call counted after the time a
// peek read, as a take on another handle can be, or under a clock that
// then stepped back, makes no wait longer than the window.
func TestBudgetsWaitWithinWindow(t *testing.T) {
	ctx := context.Background()
	b := openState(t, filepath.Join(t.TempDir(), "state.db")).Budgets()
	later := time.Now().Add(time.Minute)
	if _, err := b.db.ExecContext(ctx, "INSERT INTO budget_runs (key, ran_at, ends_at) VALUES ('k', ?, ?)",
		later.UnixNano(), later.Add(time.Hour).UnixNano()); err != nil {
		t.Fatal(err)
	}
	if ok, wait, _, err := b.Peek(ctx, one("k", 1, time.Hour)); ok || wait != time.Hour || err != nil {
		t.Errorf("Peek = %v, %v, %v; want the window, 1h", ok, wait, err)
	}
	if ok, wait, _, err := b.Take(ctx, one("k", 1, time.Hour)); ok || wait != time.Hour || err != nil {
		t.Errorf("Take = %v, %v, %v; want a refusal for the window, 1h", ok, wait, err)
	}
}

// TestBudgetsDropIdle checks that a handle's first take drops the keys
// whose calls all left the window they were last counted under, and a
// take the calls of its own key that left the window.
func TestBudgetsDropIdle(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state.db")
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		s := openState(t, path).Budgets()
		takes := []struct {
			key    string
			window time.Duration
		}{
			{"idle", time.Minute}, {"idle", time.Minute},
			{"long", time.Hour},
			// A window made longer keeps the calls counted under the
			// shorter one.
			{"grown", time.Minute}, {"grown", time.Hour},
			{"busy", time.Minute}, {"busy", time.Minute},
		}
		for _, tk := range takes {
			if ok, _, _, err := s.Take(ctx, one(tk.key, 10, tk.window)); !ok || err != nil {
				t.Fatal(tk.key, ok, err)
			}
			time.Sleep(time.Second)
		}
		time.Sleep(2 * time.Minute)
		if ok, _, _, err := s.Take(ctx, one("busy", 10, time.Minute)); !ok || err != nil {
			t.Fatal(ok, err)
		}
		if ok, _, _, err := openState(t, path).Budgets().Take(ctx, one("new", 10, time.Minute)); !ok || err != nil {
			t.Fatal(ok, err)
		}
		kept := column(t, s.db, "SELECT key || ' ' || count(*) FROM budget_runs GROUP BY key ORDER BY key")
		if got, want := fmt.Sprint(kept), "[busy 1 grown 2 long 1 new 1]"; got != want {
			t.Errorf("kept %s, want %s", got, want)
		}
	})
}

// takesOf returns the takes of the comma-separated keys, each under limit
// per hour.
func takesOf(keys string, limit int) []interlock.BudgetTake {
	var takes []interlock.BudgetTake
	for k := range strings.SplitSeq(keys, ",") {
		takes = append(takes, interlock.BudgetTake{Key: k, Limit: limit, Window: time.Hour})
	}
	return takes
}

// BenchmarkBudgets measures a peek, takes of one budget and of two, with
// room and refused, and takes of one with room from several goroutines on
// two handles on one file.
func BenchmarkBudgets(b *testing.B) {
	ctx := context.Background()
	b.Run("Peek", func(b *testing.B) {
		s := openState(b, filepath.Join(b.TempDir(), "state.db")).Budgets()
		for range 10 {
			s.Take(ctx, one("k", 10, time.Hour))
		}
		for b.Loop() {
			if _, wait, _, err := s.Peek(ctx, one("k", 10, time.Hour)); wait == 0 || err != nil {
				b.Fatal(wait, err)
			}
		}
	})
	storetest.BenchTakes(b, func(b *testing.B) interlock.BudgetStore {
		return openState(b, filepath.Join(b.TempDir(), "state.db")).Budgets()
	})
	b.Run("Take two refused", func(b *testing.B) {
		s := openState(b, filepath.Join(b.TempDir(), "state.db")).Budgets()
		for range 10 {
			s.Take(ctx, one("b", 10, time.Hour))
		}
		for b.Loop() {
			if ok, _, _, err := s.Take(ctx, takesOf("a,b", 10)); ok || err != nil {
				b.Fatal(ok, err)
			}
		}
	})
	b.Run("Take refused", func(b *testing.B) {
		s := openState(b, filepath.Join(b.TempDir(), "state.db")).Budgets()
		for range 10 {
			s.Take(ctx, one("k", 10, time.Hour))
		}
		for b.Loop() {
			if ok, _, _, err := s.Take(ctx, one("k", 10, time.Hour)); ok || err != nil {
				b.Fatal(ok, err)
			}
		}
	})
	b.Run("Take two handles", func(b *testing.B) {
		path := filepath.Join(b.TempDir(), "state.db")
		handles := []*Budgets{openState(b, path).Budgets(), openState(b, path).Budgets()}
		var n atomic.Int64
		b.SetParallelism(4)
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				i := n.Add(1)
				if ok, _, _, err := handles[i%2].Take(ctx, one(fmt.Sprintf("k%d", i%64), 1_000_000, time.Hour)); !ok || err != nil {
					b.Error(ok, err)
					return
				}
			}
		})
	})
}
