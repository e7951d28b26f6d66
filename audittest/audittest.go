// Package audittest checks that an audit store keeps interlock's hash chain:
// every backend runs the same conformance tests against a real database.
package audittest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/interlock-mcp/interlock"
)

// Store is what an audit backend offers.
type Store interface {
	interlock.AuditLog
	interlock.AuditReader
	Head(ctx context.Context) (int64, string, error)
}

// Backend opens fresh, empty stores and runs SQL on them. Each store
// keeps its records in a table named audit with columns seq, hash and
// record (the JSON text).
type Backend struct {
	// Open returns a new empty store; a second call with the same name
	// opens the same log again (another process's view of it).
	Open func(t *testing.T, name string) Store
	// Exec runs one SQL statement against the named store's database.
	Exec func(t *testing.T, name, sql string)
}

func record(i int) *interlock.AuditRecord {
	return &interlock.AuditRecord{
		Time: time.Date(2026, 11, 23, 10, 0, i, 0, time.UTC), Event: "call",
		Tenant: "acme", Principal: "alice", Tool: "refund_invoice", Mode: "token",
		Args:     map[string]any{"invoice_id": fmt.Sprintf("inv_%d", i), "amount": 12.5},
		Decision: interlock.DecisionConfirmed, ConfirmedBy: "token", Outcome: interlock.OutcomeOK, LatencyMS: 1.25,
	}
}

// Run runs the conformance tests.
func Run(t *testing.T, b Backend) {
	ctx := context.Background()

	t.Run("appends verify", func(t *testing.T) {
		s := b.Open(t, "plain")
		for i := range 5 {
			if err := s.Append(ctx, i%2 == 0, record(i)); err != nil {
				t.Fatal(err)
			}
		}
		if err := s.Append(ctx, true, record(5), record(6), record(7)); err != nil {
			t.Fatal(err)
		}
		n, err := interlock.VerifyChain(s.Records(ctx, 1))
		if err != nil || n != 8 {
			t.Fatalf("verify = %d, %v", n, err)
		}
		seq, hash, err := s.Head(ctx)
		if err != nil || seq != 8 || hash == "" {
			t.Errorf("head = %d %q %v", seq, hash, err)
		}
		var got []int64
		for r, err := range s.Records(ctx, 6) {
			if err != nil {
				t.Fatal(err)
			}
			got = append(got, r.Seq)
		}
		if fmt.Sprint(got) != "[6 7 8]" {
			t.Errorf("records from 6 = %v", got)
		}
	})

	t.Run("concurrent writers, two handles", func(t *testing.T) {
		s1, s2 := b.Open(t, "shared"), b.Open(t, "shared")
		var wg sync.WaitGroup
		errs := make(chan error, 16)
		for w := range 8 {
			s := s1
			if w%2 == 1 {
				s = s2
			}
			wg.Go(func() {
				for i := range 25 {
					if err := s.Append(ctx, i%5 == 0, record(w*100+i)); err != nil {
						errs <- err
						return
					}
				}
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
		n, err := interlock.VerifyChain(s1.Records(ctx, 1))
		if err != nil || n != 200 {
			t.Fatalf("verify = %d, %v", n, err)
		}
	})

	tampering := []struct {
		name string
		sql  string
		seq  int64 // the record verify must name
	}{
		{"edited value", `UPDATE audit SET record = replace(record, '"inv_3"', '"inv_9"') WHERE seq = 4`, 4},
		{"edited decision", `UPDATE audit SET record = replace(record, '"confirmed"', '"denied"') WHERE seq = 2`, 2},
		{"added member", `UPDATE audit SET record = replace(record, '"seq":6,', '"seq":6,"note":"x",') WHERE seq = 6`, 6},
		{"deleted", `DELETE FROM audit WHERE seq = 3`, 3},
		{"deleted last-but-one", `DELETE FROM audit WHERE seq = 9`, 9},
		{"reordered", `UPDATE audit SET seq = -5 WHERE seq = 5; UPDATE audit SET seq = 5 WHERE seq = 6; UPDATE audit SET seq = 6 WHERE seq = -5`, 5},
		{"inserted", `UPDATE audit SET seq = seq + 1000 WHERE seq >= 7; INSERT INTO audit (seq, hash, record) SELECT 7, hash, record FROM audit WHERE seq = 6`, 7},
	}
	for _, tt := range tampering {
		t.Run("finds "+tt.name, func(t *testing.T) {
			name := "tamper " + tt.name
			s := b.Open(t, name)
			for i := range 10 {
				if err := s.Append(ctx, false, record(i)); err != nil {
					t.Fatal(err)
				}
			}
			b.Exec(t, name, tt.sql)
			n, err := interlock.VerifyChain(s.Records(ctx, 1))
			var ce *interlock.ChainError
			if !errors.As(err, &ce) || ce.Seq != tt.seq {
				t.Fatalf("verify = %d records, %v; want a break at record %d", n, err, tt.seq)
			}
			if n != tt.seq-1 {
				t.Errorf("verified %d records before the break, want %d", n, tt.seq-1)
			}
		})
	}
}
