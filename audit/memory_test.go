package audit

import (
	"context"
	"testing"
)

// TestMemory: the memory log keeps records linked as a store keeps them,
// reads them back from a sequence number on, and verifies.
func TestMemory(t *testing.T) {
	m := &Memory{}
	for _, ev := range []string{"call", "auth_refused", "call"} {
		if err := m.Append(context.Background(), true, &Record{Event: ev, Tool: "t"}); err != nil {
			t.Fatal(err)
		}
	}
	var seqs []int64
	for r, err := range m.Records(context.Background(), 2) {
		if err != nil {
			t.Fatal(err)
		}
		seqs = append(seqs, r.Seq)
	}
	if len(seqs) != 2 || seqs[0] != 2 || seqs[1] != 3 {
		t.Errorf("records from 2: %v", seqs)
	}
	if calls := m.Events("call"); len(calls) != 2 || calls[1].Seq != 3 {
		t.Errorf("calls: %v", calls)
	}
	if n, err := Verify(m.Records(context.Background(), 1)); n != 3 || err != nil {
		t.Errorf("Verify = %d, %v", n, err)
	}
}
