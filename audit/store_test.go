package audit

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"
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

// TestQueuedRecordsLinger checks that a batch of queued records waits up to
// queuedLinger for more to share its commit, and that a record a caller
// waits for is committed at once, with whatever is queued.
func TestQueuedRecordsLinger(t *testing.T) {
	tests := []struct {
		name      string
		second    func(g *GroupCommit) // what joins 1ms after the first queued record
		batches   []int                // the records of each commit
		committed time.Duration        // when the first commit happened
	}{
		{"queued joins queued", func(g *GroupCommit) { _ = g.Queue(func(error) {}, &Record{Tool: "b"}) }, []int{2}, queuedLinger},
		{"appended ends the wait", func(g *GroupCommit) { _ = g.Append(context.Background(), false, &Record{Tool: "b"}) }, []int{2}, time.Millisecond},
		{"nothing joins", func(*GroupCommit) {}, []int{1}, queuedLinger},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				start := time.Now()
				var batches []int
				var first time.Duration
				g := NewGroupCommit(func(_ context.Context, _ bool, recs []*Record) error {
					if batches == nil {
						first = time.Since(start)
					}
					batches = append(batches, len(recs))
					return nil
				})
				if err := g.Queue(func(error) {}, &Record{Tool: "a"}); err != nil {
					t.Fatal(err)
				}
				time.Sleep(time.Millisecond)
				tt.second(g)
				time.Sleep(time.Second)
				g.Close()
				if !slices.Equal(batches, tt.batches) || first != tt.committed {
					t.Errorf("commits of %v records, the first after %s; want %v after %s", batches, first, tt.batches, tt.committed)
				}
			})
		})
	}
}

// TestAppendAlone checks that an append that finds nothing waiting commits
// on its caller's goroutine, that records handed to the committing
// goroutine are committed before a later append, and that Close waits for
// a commit an append began alone.
func TestAppendAlone(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var commits []string
		var mu sync.Mutex
		release := make(chan struct{})
		g := NewGroupCommit(func(_ context.Context, _ bool, recs []*Record) error {
			stack := make([]byte, 4096)
			stack = stack[:runtime.Stack(stack, false)]
			var tools []string
			for _, r := range recs {
				tools = append(tools, r.Tool)
			}
			if tools[0] == "held" {
				<-release
			}
			mu.Lock()
			defer mu.Unlock()
			commits = append(commits, fmt.Sprintf("%v by the goroutine=%v", tools, bytes.Contains(stack, []byte("GroupCommit).loop"))))
			return nil
		})
		if err := g.Append(context.Background(), false, &Record{Tool: "a"}); err != nil {
			t.Fatal(err)
		}
		// Queued records go first: the append after them waits its turn.
		if err := g.Queue(func(error) {}, &Record{Tool: "q"}); err != nil {
			t.Fatal(err)
		}
		if err := g.Append(context.Background(), false, &Record{Tool: "b"}); err != nil {
			t.Fatal(err)
		}
		// Close waits for the commit an append began alone.
		appended := make(chan error, 1)
		go func() { appended <- g.Append(context.Background(), false, &Record{Tool: "held"}) }()
		synctest.Wait()
		closed := make(chan struct{})
		go func() { g.Close(); close(closed) }()
		synctest.Wait()
		select {
		case <-closed:
			t.Fatal("Close returned while a commit was being written")
		default:
		}
		close(release)
		<-closed
		if err := <-appended; err != nil {
			t.Fatal(err)
		}
		if err := g.Append(context.Background(), false, &Record{Tool: "late"}); !errors.Is(err, ErrClosed) {
			t.Errorf("append after close: %v, want ErrClosed", err)
		}
		want := []string{"[a] by the goroutine=false", "[q b] by the goroutine=true", "[held] by the goroutine=false"}
		if !slices.Equal(commits, want) {
			t.Errorf("commits %q, want %q", commits, want)
		}
	})
}
