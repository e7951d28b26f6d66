// Package audittest checks that an audit store keeps interlock's hash chain:
// every backend runs the same conformance tests against a real database.
package audittest

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/interlock-mcp/interlock/audit"
)

// Store is what an audit backend offers.
type Store interface {
	audit.Log
	audit.Reader
	audit.CheckpointStore
	Head(ctx context.Context) (int64, string, error)
}

// Backend opens fresh, empty stores and runs SQL on them. Each store
// keeps its records in a table named audit with columns seq, hash and
// record (the JSON text).
type Backend struct {
	// Open returns a new empty store; a second call with the same name
	// opens the same log again (another process's view of it).
	Open func(t *testing.T, name string) Store
	// Exec runs SQL statements against the named store's database.
	Exec func(t *testing.T, name, sql string)
	// Empty is the SQL that deletes every record and resets the head, as
	// someone with write access who rewrites the log would.
	Empty string
}

func record(i int) *audit.Record {
	return &audit.Record{
		Time: time.Date(2026, 11, 23, 10, 0, i, 0, time.UTC), Event: "call",
		Tenant: "acme", Principal: "alice", Tool: "refund_invoice", Mode: "token",
		Args:     map[string]any{"invoice_id": fmt.Sprintf("inv_%d", i), "amount": 12.5},
		Decision: audit.DecisionConfirmed, ConfirmedBy: "token", Outcome: audit.OutcomeOK, LatencyMS: 1.25,
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
		n, err := audit.Verify(s.Records(ctx, 1))
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

	// A batch of any size is written whole and in order: a store may
	// write a batch in statements of several rows (SQLite's of 64, 16, 4
	// and 1), and these sizes take each of them and every remainder.
	t.Run("batches of every size", func(t *testing.T) {
		s := b.Open(t, "batches")
		n := 0
		for _, size := range []int{1, 3, 4, 5, 16, 21, 63, 64, 85, 150} {
			recs := make([]*audit.Record, size)
			for i := range recs {
				recs[i] = record(n + i)
			}
			if err := s.Append(ctx, size%2 == 0, recs...); err != nil {
				t.Fatalf("a batch of %d: %v", size, err)
			}
			n += size
		}
		i := 0
		for r, err := range s.Records(ctx, 1) {
			if err != nil {
				t.Fatal(err)
			}
			if r.Seq != int64(i+1) || r.Args["invoice_id"] != fmt.Sprintf("inv_%d", i) {
				t.Fatalf("record %d reads back as seq %d, %v", i+1, r.Seq, r.Args)
			}
			i++
		}
		if v, err := audit.Verify(s.Records(ctx, 1)); err != nil || v != int64(n) || i != n {
			t.Errorf("verify = %d, read %d, of %d: %v", v, i, n, err)
		}
	})

	// Text from outside is stored as Link bounds it: valid UTF-8, NUL
	// and controls escaped in the JSON, cut to size; it reads back as it
	// was left and the chain verifies.
	t.Run("text from outside reads back and verifies", func(t *testing.T) {
		s := b.Open(t, "outside text")
		long := strings.Repeat("\xff", 60_000)
		var recs []*audit.Record
		for i, text := range []string{"/v1/tools/\xff", "\xc0\xaf", "\xed\xa0\x80", "a\x00b\x1b[2J", "\u2028<&>\\\"", "\ufffd", long} {
			r := record(i)
			r.Event, r.Detail, r.Tool, r.Principal = "auth_refused", "GET "+text, text, text
			r.Args = map[string]any{text: []any{text, map[string]any{"k": text}}}
			recs = append(recs, r)
		}
		if err := s.Append(ctx, true, recs...); err != nil {
			t.Fatal(err)
		}
		i := 0
		for r, err := range s.Records(ctx, 1) {
			if err != nil {
				t.Fatal(err)
			}
			want, _ := recs[i].Encode()
			if got, _ := r.Encode(); string(got) != string(want) {
				t.Errorf("record %d reads back as\n%.300s\nstored\n%.300s", r.Seq, got, want)
			}
			i++
		}
		if n, err := audit.Verify(s.Records(ctx, 1)); err != nil || n != int64(len(recs)) || i != len(recs) {
			t.Errorf("verify = %d of %d, %v", n, i, err)
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
		n, err := audit.Verify(s1.Records(ctx, 1))
		if err != nil || n != 200 {
			t.Fatalf("verify = %d, %v", n, err)
		}
	})

	t.Run("checkpoints find a rewritten or shortened chain", func(t *testing.T) {
		_, key, err := ed25519.GenerateKey(rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		pub := key.Public().(ed25519.PublicKey)
		for _, attack := range []string{"rewrite", "cut"} {
			name := "checkpoints " + attack
			s := b.Open(t, name)
			for i := range 5 {
				if err := s.Append(ctx, false, record(i)); err != nil {
					t.Fatal(err)
				}
			}
			var sunk []audit.Checkpoint
			cp := &audit.Checkpointer{Head: s.Head, Store: s, Key: key, Sink: func(c audit.Checkpoint) error { sunk = append(sunk, c); return nil }}
			if err := cp.Checkpoint(ctx); err != nil {
				t.Fatal(err)
			}
			if err := cp.Checkpoint(ctx); err != nil { // the head did not move: nothing new
				t.Fatal(err)
			}
			if cps, err := s.Checkpoints(ctx); err != nil || len(cps) != 1 || len(sunk) != 1 || cps[0].Seq != 5 {
				t.Fatalf("checkpoints = %+v, %v; sunk %d", cps, err, len(sunk))
			}
			switch attack {
			case "rewrite":
				// A chain written anew from the start verifies alone: as a
				// writer opened after the log was emptied writes it.
				b.Exec(t, name, b.Empty)
				w := b.Open(t, name)
				for i := range 5 {
					r := record(i)
					r.Decision = audit.DecisionDenied
					if err := w.Append(ctx, false, r); err != nil {
						t.Fatal(err)
					}
				}
			case "cut":
				b.Exec(t, name, "DELETE FROM audit WHERE seq = 5")
			}
			if _, err := audit.Verify(s.Records(ctx, 1)); err != nil {
				t.Fatalf("%s: the chain alone should still verify: %v", attack, err)
			}
			hashes := map[int64]string{}
			for r, err := range s.Records(ctx, 1) {
				if err != nil {
					t.Fatal(err)
				}
				hashes[r.Seq] = r.Hash
			}
			cps, _ := s.Checkpoints(ctx)
			var ce *audit.ChainError
			if err := audit.CheckCheckpoints(cps, pub, hashes); !errors.As(err, &ce) || ce.Seq != 5 {
				t.Errorf("%s: checkpoints = %v, want a break at record 5", attack, err)
			}
			other, _, _ := ed25519.GenerateKey(rand.Reader)
			if err := audit.CheckCheckpoints(cps, other, hashes); err == nil || !strings.Contains(err.Error(), "does not verify") {
				t.Errorf("%s: another key's view = %v", attack, err)
			}
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
			n, err := audit.Verify(s.Records(ctx, 1))
			var ce *audit.ChainError
			if !errors.As(err, &ce) || ce.Seq != tt.seq {
				t.Fatalf("verify = %d records, %v; want a break at record %d", n, err, tt.seq)
			}
			if n != tt.seq-1 {
				t.Errorf("verified %d records before the break, want %d", n, tt.seq-1)
			}
		})
	}
}

// BenchmarkAppend measures one record's append to the store open makes:
// committed (an allowed call's outcome) or flushed (a confirmation), from
// one writer or eight.
func BenchmarkAppend(b *testing.B, open func(b *testing.B) audit.Log) {
	for _, durable := range []bool{false, true} {
		for _, writers := range []int{1, 8} {
			b.Run(fmt.Sprintf("durable=%v/writers=%d", durable, writers), func(b *testing.B) {
				a := open(b)
				// RunParallel starts parallelism × GOMAXPROCS goroutines.
				b.SetParallelism(max(writers/runtime.GOMAXPROCS(0), 1))
				b.RunParallel(func(pb *testing.PB) {
					for pb.Next() {
						r := &audit.Record{Time: time.Now(), Event: "call", Tool: "get_customer", Decision: "allowed", Outcome: "ok",
							Args: map[string]any{"id": "acct_9931"}}
						if err := a.Append(context.Background(), durable, r); err != nil {
							b.Fatal(err)
						}
					}
				})
			})
		}
	}
	// Queued: eight writers that do not wait for the commit of their
	// records (audit.allowed_calls: queued), the whole queue committed.
	b.Run("queued/writers=8", func(b *testing.B) {
		q, ok := open(b).(audit.Queuer)
		if !ok {
			b.Skip("the store cannot queue records")
		}
		var committed sync.WaitGroup
		done := func(err error) {
			if err != nil {
				b.Error(err)
			}
			committed.Done()
		}
		b.SetParallelism(max(8/runtime.GOMAXPROCS(0), 1))
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				r := &audit.Record{Time: time.Now(), Event: "call", Tool: "get_customer", Decision: "allowed", Outcome: "ok",
					Args: map[string]any{"id": "acct_9931"}}
				committed.Add(1)
				if err := q.Queue(done, r); err != nil {
					b.Fatal(err)
				}
			}
		})
		committed.Wait()
	})
}
