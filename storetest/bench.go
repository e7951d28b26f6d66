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
