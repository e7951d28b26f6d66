package audit

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"
)

// GroupCommit batches appends for an audit store: one goroutine commits
// every record waiting at the time in one transaction, so concurrent
// callers share the cost of a commit (and of a flush, when any of them
// needs one). An append that finds nothing waiting and nothing being
// written commits its records itself, on its own goroutine: handing them
// to the committing goroutine and hearing back would cost two wake-ups
// and their latency, for a batch that could hold no one else's records.
type GroupCommit struct {
	requests chan *commitRequest
	commit   func(ctx context.Context, durable bool, recs []*Record) error
	done     chan struct{}

	// writing holds a token while somebody commits: the goroutine, or an
	// append that commits alone. waiting counts the requests handed to the
	// goroutine and not yet committed, so that an append never commits
	// before records queued ahead of it.
	writing chan struct{}
	waiting atomic.Int64

	mu     sync.RWMutex
	closed bool
}

type commitRequest struct {
	recs    []*Record
	durable bool
	// result hears the commit of an appended request; done, of a queued
	// one.
	result chan error
	done   func(error)
}

// maxBatch bounds the records of one transaction.
const maxBatch = 256

// NewGroupCommit starts the committing goroutine. commit writes a batch in
// one transaction and returns only once it is committed (and flushed when
// durable is set).
func NewGroupCommit(commit func(ctx context.Context, durable bool, recs []*Record) error) *GroupCommit {
	g := &GroupCommit{requests: make(chan *commitRequest, maxBatch), commit: commit, done: make(chan struct{}),
		writing: make(chan struct{}, 1)}
	go g.loop()
	return g
}

// ErrClosed is returned by appends after the log was closed.
var ErrClosed = errors.New("audit: log is closed")

// Append implements [Log].
func (g *GroupCommit) Append(ctx context.Context, durable bool, recs ...*Record) error {
	if len(recs) == 0 {
		return nil
	}
	if alone, err := g.alone(durable, recs); alone {
		return err
	}
	req := &commitRequest{recs: recs, durable: durable, result: make(chan error, 1)}
	if err := g.enqueue(ctx, req); err != nil {
		return err
	}
	// Once queued, the records are written whatever the caller's context
	// says: a call must not run on a confirmation whose record may or may
	// not exist.
	return <-req.result
}

// Queue implements [Queuer].
func (g *GroupCommit) Queue(done func(error), recs ...*Record) error {
	if len(recs) == 0 {
		done(nil)
		return nil
	}
	return g.enqueue(context.Background(), &commitRequest{recs: recs, done: done})
}

// alone commits recs on the caller's goroutine when no request waits for
// the committing goroutine and nobody is writing. It reports whether it
// did (or found the log closed), and the commit's error.
func (g *GroupCommit) alone(durable bool, recs []*Record) (bool, error) {
	g.mu.RLock()
	if g.closed {
		g.mu.RUnlock()
		return true, ErrClosed
	}
	// Close waits for writing once it has closed the log, and it cannot
	// close it while this holds the read lock: a commit begun here ends
	// before Close returns.
	select {
	case g.writing <- struct{}{}:
		g.mu.RUnlock()
	default:
		g.mu.RUnlock()
		return false, nil
	}
	defer func() { <-g.writing }()
	if g.waiting.Load() > 0 {
		// Records handed to the goroutine go first.
		return false, nil
	}
	return true, g.commit(context.Background(), durable, recs)
}

// enqueue hands req to the committing goroutine, waiting while the queue
// is full.
func (g *GroupCommit) enqueue(ctx context.Context, req *commitRequest) error {
	g.mu.RLock()
	if g.closed {
		g.mu.RUnlock()
		return ErrClosed
	}
	g.waiting.Add(1)
	select {
	case g.requests <- req:
		g.mu.RUnlock()
	case <-ctx.Done():
		g.waiting.Add(-1)
		g.mu.RUnlock()
		return ctx.Err()
	}
	return nil
}

func (g *GroupCommit) loop() {
	for {
		first, ok := <-g.requests
		if !ok {
			close(g.done)
			return
		}
		g.writing <- struct{}{}
		// A batch gathers what is already waiting; it never waits for more.
		batch := []*commitRequest{first}
		n := len(first.recs)
	drain:
		for n < maxBatch {
			select {
			case r, ok := <-g.requests:
				if !ok {
					break drain
				}
				batch = append(batch, r)
				n += len(r.recs)
			default:
				break drain
			}
		}
		if n < maxBatch && !waitedOn(batch) {
			batch, n = g.linger(batch, n)
		}
		durable := false
		recs := make([]*Record, 0, n)
		for _, r := range batch {
			durable = durable || r.durable
			recs = append(recs, r.recs...)
		}
		err := g.commit(context.Background(), durable, recs)
		g.waiting.Add(-int64(len(batch)))
		<-g.writing
		for _, r := range batch {
			if r.done != nil {
				r.done(err)
			} else {
				r.result <- err
			}
		}
	}
}

// queuedLinger is how long a batch of queued records alone waits for
// more to join it: nobody waits for their commit, and the larger a batch,
// the less each of its records costs.
const queuedLinger = 2 * time.Millisecond

// waitedOn reports whether a caller waits for the commit of batch.
func waitedOn(batch []*commitRequest) bool {
	for _, r := range batch {
		if r.done == nil {
			return true
		}
	}
	return false
}

// linger lets more requests join a batch of queued records for up to
// queuedLinger, and no longer once one that a caller waits for joins.
func (g *GroupCommit) linger(batch []*commitRequest, n int) ([]*commitRequest, int) {
	t := time.NewTimer(queuedLinger)
	defer t.Stop()
	for n < maxBatch {
		select {
		case r, ok := <-g.requests:
			if !ok {
				return batch, n
			}
			batch = append(batch, r)
			n += len(r.recs)
			if r.done == nil {
				return batch, n
			}
		case <-t.C:
			return batch, n
		}
	}
	return batch, n
}

// Close stops accepting records and returns once those already queued are
// written.
func (g *GroupCommit) Close() {
	g.mu.Lock()
	if !g.closed {
		g.closed = true
		close(g.requests)
	}
	g.mu.Unlock()
	<-g.done
	// An append committing alone began before the log closed.
	g.writing <- struct{}{}
	<-g.writing
}

// Rows is what the rows of database/sql and of pgx have in common.
type Rows interface {
	Next() bool
	Scan(dest ...any) error
	Err() error
}

// YieldRecords decodes rows of one column, a stored record's text, and
// yields them until yield asks to stop or a row fails; wrap names the
// store in errors.
func YieldRecords(rows Rows, wrap func(error) error, yield func(*Record, error) bool) {
	for rows.Next() {
		var text string
		if err := rows.Scan(&text); err != nil {
			yield(nil, wrap(err))
			return
		}
		r, err := Decode([]byte(text))
		if !yield(r, err) || err != nil {
			return
		}
	}
	if err := rows.Err(); err != nil {
		yield(nil, wrap(err))
	}
}
