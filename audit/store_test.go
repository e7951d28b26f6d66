package audit

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
)

// TestGroupCommitQueue checks that queued records are committed in the
// order they were queued among appended ones, that done hears each
// commit's result, and that Close commits what is still queued.
func TestGroupCommitQueue(t *testing.T) {
	failed := errors.New("disk full")
	tests := []struct {
		name      string
		commitErr error
	}{
		{"committed", nil},
		{"failed", failed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var mu sync.Mutex
			var committed []string
			gate := make(chan struct{})
			g := NewGroupCommit(func(_ context.Context, _ bool, recs []*Record) error {
				<-gate
				mu.Lock()
				defer mu.Unlock()
				for _, r := range recs {
					committed = append(committed, r.Tool)
				}
				return tt.commitErr
			})
			var heard []error
			var heardMu sync.Mutex
			done := func(err error) {
				heardMu.Lock()
				heard = append(heard, err)
				heardMu.Unlock()
			}
			// The first queue returns before its commit, which is held.
			if err := g.Queue(done, &Record{Tool: "a"}); err != nil {
				t.Fatal(err)
			}
			if err := g.Queue(done, &Record{Tool: "b"}, &Record{Tool: "c"}); err != nil {
				t.Fatal(err)
			}
			appended := make(chan error, 1)
			go func() { appended <- g.Append(context.Background(), true, &Record{Tool: "d"}) }()
			close(gate)
			if err := <-appended; !errors.Is(err, tt.commitErr) {
				t.Errorf("append: %v, want %v", err, tt.commitErr)
			}
			if err := g.Queue(done, &Record{Tool: "e"}); err != nil {
				t.Fatal(err)
			}
			g.Close()
			if want := []string{"a", "b", "c", "d", "e"}; !slices.Equal(committed, want) {
				t.Errorf("committed %v, want %v", committed, want)
			}
			if len(heard) != 3 {
				t.Fatalf("done heard %d commits, want 3", len(heard))
			}
			for _, err := range heard {
				if !errors.Is(err, tt.commitErr) {
					t.Errorf("done heard %v, want %v", err, tt.commitErr)
				}
			}
			if err := g.Queue(done, &Record{Tool: "f"}); !errors.Is(err, ErrClosed) {
				t.Errorf("queue after close: %v, want ErrClosed", err)
			}
		})
	}
}
