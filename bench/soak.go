package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
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
	// rss is the resident set of the variant's server processes (the
	// gateways, or the echo servers of a direct variant), summed, once
	// every client is connected and at each rssEvery after.
	rss []int64
}

// rssEvery is how often a soak samples the resident set.
const rssEvery = 10 * time.Second

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
		openMu   sync.Mutex
		open     []*mcp.ClientSession
	)
	start := time.Now()
	for range clients {
		cs, err := sv.connect(ctx)
		if err != nil {
			return res, fmt.Errorf("%s: %w", v.name, err)
		}
		wg.Go(func() {
			// Closed after the last sample of the resident set: a stdio
			// session's gateway exits with it.
			defer func() {
				if cs != nil {
					openMu.Lock()
					open = append(open, cs)
					openMu.Unlock()
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
	pids := slices.Clone(sv.pids) // sessions replaced later add theirs; the first ones are watched
	sample := func() {
		var sum int64
		for _, pid := range pids {
			sum += residentSet(pid)
		}
		res.rss = append(res.rss, sum)
		fmt.Fprintf(os.Stderr, "%s: %d calls made, resident set %s\n", v.name, min(next.Load(), int64(calls)), mib(sum))
	}
	sample()
	sampled := make(chan struct{})
	stop := make(chan struct{})
	go func() {
		defer close(sampled)
		tick := time.NewTicker(rssEvery)
		defer tick.Stop()
		for {
			select {
			case <-tick.C:
				sample()
			case <-stop:
				sample()
				return
			}
		}
	}()
	wg.Wait()
	close(stop)
	<-sampled
	for _, cs := range open {
		cs.Close()
	}
	res.calls, res.lost, res.failed, res.took = int64(calls), lost.Load(), failed.Load(), time.Since(start)
	return res, nil
}

// reportSoak writes one soak run's line.
func reportSoak(w io.Writer, name string, clients int, r soakResult) {
	first, last, peak := int64(0), int64(0), int64(0)
	if len(r.rss) > 0 {
		first, last, peak = r.rss[0], r.rss[len(r.rss)-1], slices.Max(r.rss)
	}
	fmt.Fprintf(w, "| %s | %d | %d | %d | %d | %.0f | %s | %s | %s | %s |\n", name, clients, r.calls, r.lost, r.failed,
		float64(r.calls)/r.took.Seconds(), r.took.Round(time.Second), mib(first), mib(last), mib(peak))
	if r.firstFailure != nil {
		fmt.Fprintf(w, "\nfirst failure (%s, %d clients): %v\n\n", name, clients, r.firstFailure)
	}
}

func mib(n int64) string { return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20)) }
