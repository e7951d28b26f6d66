package main

import (
	"net"
	"net/http"
	"sync"

	"github.com/interlock-mcp/interlock/policy"
)

// httpServer is the gateway's HTTP server with the timeouts of the http
// config section. WriteTimeout bounds every response but /mcp's event
// streams, which lift it per request (see gateway.Handler): a stream lasts
// as long as a call or a session.
func httpServer(cfg policy.HTTP, h http.Handler) *http.Server {
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: cfg.ReadHeaderTimeout,
		ReadTimeout:       cfg.ReadTimeout,
		WriteTimeout:      cfg.WriteTimeout,
		IdleTimeout:       cfg.IdleTimeout,
	}
}

// limitedListener accepts at most a fixed number of connections at once;
// further ones wait in the kernel's listen queue until one closes, so a
// flood of connections cannot exhaust the gateway's memory or descriptors.
type limitedListener struct {
	net.Listener
	slots chan struct{}
}

func limitListener(ln net.Listener, n int) net.Listener {
	return &limitedListener{Listener: ln, slots: make(chan struct{}, n)}
}

func (l *limitedListener) Accept() (net.Conn, error) {
	l.slots <- struct{}{}
	c, err := l.Listener.Accept()
	if err != nil {
		<-l.slots
		return nil, err
	}
	return &limitedConn{Conn: c, release: sync.OnceFunc(func() { <-l.slots })}, nil
}

// limitedConn gives its slot back once, when it closes.
type limitedConn struct {
	net.Conn
	release func()
}

func (c *limitedConn) Close() error {
	err := c.Conn.Close()
	c.release()
	return err
}
