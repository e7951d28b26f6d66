package main

import (
	"net"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/interlock-mcp/interlock/config"
	"github.com/interlock-mcp/interlock/gateway"
)

// httpServer is the gateway's HTTP server with the timeouts of the http
// config section. WriteTimeout bounds every response but /mcp's event
// streams, which lift it per request (see gateway.Handler): a stream lasts
// as long as a call or a session. ConnContext lets the gateway tell the
// listener which connections carried an authenticated request.
func httpServer(cfg config.HTTP, h http.Handler) *http.Server {
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: cfg.ReadHeaderTimeout,
		ReadTimeout:       cfg.ReadTimeout,
		WriteTimeout:      cfg.WriteTimeout,
		IdleTimeout:       cfg.IdleTimeout,
		ConnContext:       gateway.ConnContext,
	}
}

// limitedListener accepts at most a fixed number of connections at once;
// further ones wait in the kernel's listen queue until one closes, so a
// flood of connections cannot exhaust the gateway's memory or descriptors.
//
// On a gateway that authenticates its callers, connections that have not
// yet carried an authenticated request (unproven) hold at most
// maxUnproven of the slots: a new connection past that closes the oldest
// unproven one. Whoever opens connections without a credential can then
// never take the whole cap from callers that have one.
type limitedListener struct {
	net.Listener
	slots chan struct{}

	// maxUnproven is 0 when every connection may take any slot.
	maxUnproven int
	mu          sync.Mutex
	// unproven holds the unproven connections, oldest first; proven and
	// closed ones are skipped and dropped as they come up.
	unproven []*limitedConn
	count    int
}

// limitListener limits ln to n connections; with share set, a quarter of
// them is kept for connections that carried an authenticated request.
func limitListener(ln net.Listener, n int, share bool) net.Listener {
	l := &limitedListener{Listener: ln, slots: make(chan struct{}, n)}
	if share && n > 1 {
		l.maxUnproven = n - max(n/4, 1)
	}
	return l
}

func (l *limitedListener) Accept() (net.Conn, error) {
	l.slots <- struct{}{}
	c, err := l.Listener.Accept()
	if err != nil {
		<-l.slots
		return nil, err
	}
	lc := &limitedConn{Conn: c, l: l}
	lc.release = sync.OnceFunc(func() { l.settle(lc); <-l.slots })
	if l.maxUnproven > 0 {
		l.mu.Lock()
		if len(l.unproven) > 2*l.count+64 {
			// Connections that proved themselves or closed leave the
			// queue now and then, so it stays the size of the count.
			l.unproven = slices.DeleteFunc(l.unproven, func(c *limitedConn) bool { return c.settled.Load() })
		}
		l.unproven = append(l.unproven, lc)
		l.count++
		var evict *limitedConn
		for l.count > l.maxUnproven && evict == nil && len(l.unproven) > 0 {
			oldest := l.unproven[0]
			l.unproven = l.unproven[1:]
			if !oldest.proven.Load() && !oldest.closed.Load() {
				evict = oldest
			}
		}
		l.mu.Unlock()
		if evict != nil {
			evict.Close()
		}
	}
	return lc, nil
}

// settle takes c out of the unproven count, once: when it proves itself
// or closes.
func (l *limitedListener) settle(c *limitedConn) {
	if l.maxUnproven == 0 || !c.settled.CompareAndSwap(false, true) {
		return
	}
	l.mu.Lock()
	l.count--
	l.mu.Unlock()
}

// limitedConn gives its slot back once, when it closes.
type limitedConn struct {
	net.Conn
	l       *limitedListener
	release func()
	// proven is set once the connection carried an authenticated
	// request; settled once it left the unproven count.
	proven, closed, settled atomic.Bool
}

func (c *limitedConn) Close() error {
	err := c.Conn.Close()
	c.closed.Store(true)
	c.release()
	return err
}

// Prove implements [gateway.Prover]: the connection carried an
// authenticated request, and no longer counts against the share of
// unproven connections.
func (c *limitedConn) Prove() {
	if c.proven.CompareAndSwap(false, true) {
		c.l.settle(c)
	}
}
