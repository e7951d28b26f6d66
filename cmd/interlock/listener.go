package main

import (
	"net"
	"net/http"
	"sync"
	"sync/atomic"

	"github.com/interlock-mcp/interlock/config"
	"github.com/interlock-mcp/interlock/gateway"
)

// httpServer is the gateway's HTTP server with the timeouts of the http
// config section. WriteTimeout bounds every response but /mcp's event
// streams, which lift it per request (see gateway.Handler): a stream lasts
// as long as a call or a session. ConnContext lets the gateway tell the
// listener which connections carried an authenticated request, and
// ConnState tells it when a request's headers have been read.
func httpServer(cfg config.HTTP, h http.Handler) *http.Server {
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: cfg.ReadHeaderTimeout,
		ReadTimeout:       cfg.ReadTimeout,
		WriteTimeout:      cfg.WriteTimeout,
		IdleTimeout:       cfg.IdleTimeout,
		ConnContext:       gateway.ConnContext,
		ConnState:         connState,
	}
}

// limitedListener accepts at most a fixed number of connections at once;
// further ones wait in the kernel's listen queue until one closes, so a
// flood of connections cannot exhaust the gateway's memory or descriptors.
//
// On a gateway that authenticates its callers, connections that have not
// yet carried an authenticated request (unproven) hold at most
// maxUnproven of the slots: past that, the oldest unproven connection is
// closed. Whoever opens connections without a credential can then never
// take the whole cap from callers that have one.
//
// A connection is closed for a newer one only while the server waits on
// it for bytes its client has not sent: never while what came is unread
// (a request with a key may be there), and never from the moment its
// request's headers are read until the gateway has said whether it
// authenticated (Prove or Unproven). So a caller that sends its request
// with a valid key is not closed as unauthenticated, however fast other
// connections arrive.
type limitedListener struct {
	net.Listener
	slots chan struct{}

	// maxUnproven is 0 when every connection may take any slot.
	maxUnproven int
	mu          sync.Mutex
	// unproven holds the unproven connections, oldest first; settled ones
	// are dropped as a pass comes by them.
	unproven []*limitedConn
	// count is the number of unproven connections not yet settled.
	count int
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
		l.unproven = append(l.unproven, lc)
		l.count++
		victims := l.evictLocked()
		l.mu.Unlock()
		closeAll(victims)
	}
	return lc, nil
}

// evictLocked picks, oldest first, the unproven connections to close
// until the unproven ones are back within their share, and drops settled
// ones from the queue. The oldest goes first, and only once the server
// waits on it: while it is unread or being served, nothing younger goes
// in its place (the server reads every connection it takes at once, so
// this does not last). A request being decided is passed over, since
// checking a credential may take a round trip to the issuer. It is called
// with l.mu held; the victims, already settled, are to be closed once it
// is released.
func (l *limitedListener) evictLocked() []*limitedConn {
	// Settled connections leave the queue now and then, so it stays the
	// size of the count.
	if l.count <= l.maxUnproven && len(l.unproven) <= 2*l.count+64 {
		return nil
	}
	var victims []*limitedConn
	stalled := false
	kept := l.unproven[:0]
	for _, c := range l.unproven {
		switch {
		case c.settled:
			continue
		case stalled || c.deciding || l.count <= l.maxUnproven:
		case !c.waiting:
			stalled = true
		default:
			c.settled = true
			l.count--
			victims = append(victims, c)
			continue
		}
		kept = append(kept, c)
	}
	clear(l.unproven[len(kept):])
	l.unproven = kept
	return victims
}

func closeAll(cs []*limitedConn) {
	for _, c := range cs {
		c.Close()
	}
}

// settle takes c out of the unproven count, once: when it proves itself,
// closes or is picked to be closed. The connections after it may go now.
func (l *limitedListener) settle(c *limitedConn) {
	if l.maxUnproven == 0 {
		return
	}
	l.set(c, func() {
		if !c.settled {
			c.settled = true
			l.count--
		}
	})
}

// set changes what the server is doing with c, under l.mu, and closes the
// connections that become victims by it (c among them, possibly).
func (l *limitedListener) set(c *limitedConn, change func()) {
	l.mu.Lock()
	change()
	victims := l.evictLocked()
	l.mu.Unlock()
	closeAll(victims)
}

// limitedConn gives its slot back once, when it closes.
type limitedConn struct {
	net.Conn
	l       *limitedListener
	release func()
	// proven is set once the connection carried an authenticated request.
	proven atomic.Bool

	// Under l.mu: settled once the connection left the unproven count;
	// waiting while the server waits on a read from it and nothing its
	// client sent is left unread; deciding from the moment a request's
	// headers are read until the gateway has said whether the request
	// authenticated.
	settled, waiting, deciding bool
}

func (c *limitedConn) Read(p []byte) (int, error) {
	if c.l.maxUnproven == 0 || c.proven.Load() {
		return c.Conn.Read(p)
	}
	// Whether the client's bytes are there is asked before the read: a
	// connection is never counted as waiting while something its client
	// sent is still unread.
	waits := !pending(c.Conn)
	if waits {
		c.l.set(c, func() { c.waiting = true })
	}
	n, err := c.Conn.Read(p)
	if waits {
		c.l.set(c, func() { c.waiting = false })
	}
	return n, err
}

func (c *limitedConn) Close() error {
	err := c.Conn.Close()
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

// Unproven implements [gateway.Prover]: the request did not authenticate,
// and the connection may be closed for a newer one again while the server
// waits on it.
func (c *limitedConn) Unproven() {
	if c.l.maxUnproven > 0 && !c.proven.Load() {
		c.l.set(c, func() { c.deciding = false })
	}
}

// connState is the server's ConnState hook: once a request's headers are
// read, its connection waits for the gateway to say whether it
// authenticated; once its response is written, the connection is idle.
func connState(nc net.Conn, s http.ConnState) {
	c, ok := nc.(*limitedConn)
	if !ok || c.l.maxUnproven == 0 || c.proven.Load() {
		return
	}
	switch s {
	case http.StateActive:
		c.l.set(c, func() { c.deciding = true })
	case http.StateIdle:
		c.l.set(c, func() { c.deciding = false })
	}
}
