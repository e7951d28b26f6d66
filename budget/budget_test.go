package budget_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/interlock-mcp/interlock/budget"
)

// BenchmarkMemory measures takes with room of one budget and of
// two, and a take of two the second refuses.
func BenchmarkMemory(b *testing.B) {
	ctx := context.Background()
	keys := make([]string, 64)
	for i := range keys {
		keys[i] = fmt.Sprintf("k%d", i)
	}
	b.Run("Take", func(b *testing.B) {
		m := budget.NewMemory()
		i := 0
		for b.Loop() {
			if ok, _, _, err := m.Take(ctx, []budget.Take{{keys[i%64], 1_000_000, time.Hour}}); !ok || err != nil {
				b.Fatal(ok, err)
			}
			i++
		}
	})
	b.Run("Take two", func(b *testing.B) {
		m := budget.NewMemory()
		i := 0
		for b.Loop() {
			takes := []budget.Take{{keys[i%64], 1_000_000, time.Hour}, {keys[(i+1)%64], 1_000_000, time.Hour}}
			if ok, _, _, err := m.Take(ctx, takes); !ok || err != nil {
				b.Fatal(ok, err)
			}
			i++
		}
	})
	b.Run("Take two refused", func(b *testing.B) {
		m := budget.NewMemory()
		m.Take(ctx, []budget.Take{{"b", 1, time.Hour}})
		takes := []budget.Take{{"a", 10, time.Hour}, {"b", 1, time.Hour}}
		for b.Loop() {
			if ok, _, _, err := m.Take(ctx, takes); ok || err != nil {
				b.Fatal(ok, err)
			}
		}
	})
}
