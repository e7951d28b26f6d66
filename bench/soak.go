package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"
)

// soakTimeout is how long a soak call waits for its answer before it
// counts as lost: far above any call's time on a loaded machine, far below
// the gateway's own call timeout, so a lost answer is told from a slow one.
const soakTimeout = 10 * time.Second

// soakResult is what one soak run saw.
type soakResult struct {
	calls, lost, failed int64
	took                time.Duration
	firstFailure        error
}

// soak makes calls through variant v from clients concurrent sessions and
// counts the calls whose answers never came (lost) and those that failed
// otherwise. A session whose answer was lost is replaced, as a client
// would reconnect; the run goes on to the end.
func soak(ctx context.Context, v *variant, calls, clients int) (soakResult, error) {
	sv, err := v.start()
	if err != nil {
		return soakResult{}, fmt.Errorf("%s: %w", v.name, err)
	}
	defer sv.stop()
	var (
		res      soakResult
		next     atomic.Int64
		lost     atomic.Int64
		failed   atomic.Int64
		firstErr sync.Once
		wg       sync.WaitGroup
	)
	start := time.Now()
	for range clients {
		cs, err := sv.connect(ctx)
		if err != nil {
			return res, fmt.Errorf("%s: %w", v.name, err)
		}
		wg.Go(func() {
			defer func() {
				if cs != nil {
					cs.Close()
				}
			}()
			for next.Add(1) <= int64(calls) {
				callCtx, cancel := context.WithTimeout(ctx, soakTimeout)
				err := call(callCtx, cs, v.token)
				cancel()
				switch {
				case err == nil:
				case errors.Is(err, context.DeadlineExceeded):
					lost.Add(1)
					cs.Close()
					var cerr error
					if cs, cerr = sv.connect(ctx); cerr != nil {
						failed.Add(1)
						firstErr.Do(func() { res.firstFailure = cerr })
						cs = nil
						return
					}
				default:
					failed.Add(1)
					firstErr.Do(func() { res.firstFailure = err })
				}
			}
		})
	}
	wg.Wait()
	res.calls, res.lost, res.failed, res.took = int64(calls), lost.Load(), failed.Load(), time.Since(start)
	return res, nil
}

// reportSoak writes one soak run's line.
func reportSoak(w io.Writer, name string, clients int, r soakResult) {
	fmt.Fprintf(w, "| %s | %d | %d | %d | %d | %.0f | %s |\n", name, clients, r.calls, r.lost, r.failed,
		float64(r.calls)/r.took.Seconds(), r.took.Round(time.Second))
	if r.firstFailure != nil {
		fmt.Fprintf(w, "\nfirst failure (%s, %d clients): %v\n\n", name, clients, r.firstFailure)
	}
}
