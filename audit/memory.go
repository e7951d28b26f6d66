package audit

import (
	"context"
	"iter"
	"sync"
)

// Memory is an audit log kept in memory, each record linked and kept as
// its canonical bytes, as a store keeps it, so that what is read back and
// verified is what a store would hold. It serves tests and programs that
// keep no log on disk; a restart loses it.
type Memory struct {
	mu     sync.Mutex
	stored [][]byte
	prev   string
}

// Append implements [Log].
func (m *Memory) Append(_ context.Context, _ bool, recs ...*Record) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, r := range recs {
		b, err := r.Link(int64(len(m.stored)+1), m.prev)
		if err != nil {
			return err
		}
		m.stored, m.prev = append(m.stored, b), r.Hash
	}
	return nil
}

// Records implements [Reader].
func (m *Memory) Records(_ context.Context, from int64) iter.Seq2[*Record, error] {
	return func(yield func(*Record, error) bool) {
		m.mu.Lock()
		stored := append([][]byte(nil), m.stored...)
		m.mu.Unlock()
		for i, b := range stored {
			if int64(i+1) < from {
				continue
			}
			if !yield(Decode(b)) {
				return
			}
		}
	}
}

// Events returns the records of the event named, in order; a record that
// does not read back is left out (Records reports it).
func (m *Memory) Events(name string) []*Record {
	var out []*Record
	for r, err := range m.Records(context.Background(), 1) {
		if err == nil && r.Event == name {
			out = append(out, r)
		}
	}
	return out
}

// Interface guards.
var (
	_ Log    = (*Memory)(nil)
	_ Reader = (*Memory)(nil)
)
