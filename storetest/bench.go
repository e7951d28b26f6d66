package storetest

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/interlock-mcp/interlock"
)

// BenchIssueConsume measures an issue and the consume of what it issued,
// as a confirmed call spends its token, one pair after another.
func BenchIssueConsume(b *testing.B, s interlock.TokenStore) {
	ctx := context.Background()
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
}

// BenchIssueConsumeParallel is BenchIssueConsume from parallelism times
// GOMAXPROCS goroutines at once, as a busy gateway consumes, each pair on
// the next of handles in turn.
func BenchIssueConsumeParallel(b *testing.B, parallelism int, handles ...interlock.TokenStore) {
	ctx := context.Background()
	var n atomic.Int64
	b.SetParallelism(parallelism)
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			i := n.Add(1)
			s, binding := handles[int(i)%len(handles)], fmt.Sprintf("p%d", i)
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
}

// BenchTakes measures takes with room of one budget ("Take") and of two
// ("Take two"), each on a fresh store of open.
func BenchTakes(b *testing.B, open func(b *testing.B) interlock.BudgetStore) {
	ctx := context.Background()
	b.Run("Take", func(b *testing.B) {
		s := open(b)
		i := 0
		for b.Loop() {
			take := []interlock.BudgetTake{{Key: fmt.Sprintf("k%d", i%64), Limit: 1_000_000, Window: time.Hour}}
			if ok, _, _, err := s.Take(ctx, take); !ok || err != nil {
				b.Fatal(ok, err)
			}
			i++
		}
	})
	b.Run("Take two", func(b *testing.B) {
		s := open(b)
		i := 0
		for b.Loop() {
			takes := []interlock.BudgetTake{
				{Key: fmt.Sprintf("a%d", i%64), Limit: 1_000_000, Window: time.Hour},
				{Key: fmt.Sprintf("b%d", i%64), Limit: 1_000_000, Window: time.Hour},
			}
			if ok, _, _, err := s.Take(ctx, takes); !ok || err != nil {
				b.Fatal(ok, err)
			}
			i++
		}
	})
}
