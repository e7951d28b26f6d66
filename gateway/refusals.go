package gateway

import (
	"fmt"
	"net/netip"
	"strings"
	"sync"
	"time"
)

// How many auth_refused records one source can have written: anyone who
// reaches the gateway can be refused, and every record stays in the audit
// chain for good.
const (
	// refusalBurst refusals of a source are recorded in a refusalWindow;
	// the others are counted, and the count goes into the detail of the
	// source's next record.
	refusalBurst  = 10
	refusalWindow = time.Minute
	// maxRefusalSources bounds the sources tracked at once; refusals of a
	// source that finds the table full are counted without one.
	maxRefusalSources = 10_000
)

// refusals decides which refusals are recorded one by one.
type refusals struct {
	mu      sync.Mutex
	sources map[string]*refusalCount
	// others counts the refusals not recorded of sources no longer
	// tracked, or not tracked for want of room; the next record of any
	// source says how many.
	others int
}

// refusalCount is one source's refusals in the window that began at
// start.
type refusalCount struct {
	start             time.Time
	recorded, counted int
}

// admit returns whether a refusal of a request from remote (as
// http.Request.RemoteAddr gives it) is recorded, and when it is, what its
// detail adds of the refusals before it that were only counted.
func (f *refusals) admit(remote string) (bool, string) {
	now := time.Now()
	src := refusalSource(remote)
	f.mu.Lock()
	defer f.mu.Unlock()
	c := f.sources[src]
	if c == nil {
		if len(f.sources) >= maxRefusalSources {
			f.forget(now)
		}
		if len(f.sources) >= maxRefusalSources {
			f.others++
			return false, ""
		}
		if f.sources == nil {
			f.sources = make(map[string]*refusalCount)
		}
		c = &refusalCount{start: now}
		f.sources[src] = c
	}
	var notes []string
	if now.Sub(c.start) >= refusalWindow {
		if c.counted > 0 {
			notes = append(notes, fmt.Sprintf("%d more refusals from %s since %s were counted, not recorded",
				c.counted, src, c.start.UTC().Format(time.RFC3339)))
		}
		*c = refusalCount{start: now}
	}
	if c.recorded >= refusalBurst {
		c.counted++
		return false, ""
	}
	c.recorded++
	if f.others > 0 {
		notes = append(notes, fmt.Sprintf("%d refusals from other sources were counted, not recorded", f.others))
		f.others = 0
	}
	return true, strings.Join(notes, "; ")
}

// forget drops the sources whose window has ended, keeping their counts
// in others.
func (f *refusals) forget(now time.Time) {
	for src, c := range f.sources {
		if now.Sub(c.start) >= refusalWindow {
			f.others += c.counted
			delete(f.sources, src)
		}
	}
}

// refusalSource is the source a remote address counts as: its IP
// address, or for IPv6 its /64, which one host commonly holds whole.
func refusalSource(remote string) string {
	ap, err := netip.ParseAddrPort(remote)
	if err != nil {
		return remote
	}
	a := ap.Addr().Unmap()
	if a.Is4() {
		return a.String()
	}
	p, _ := a.WithZone("").Prefix(64) // an IPv6 address always has a /64
	return p.String()
}
