package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/interlock-mcp/interlock/config"
	"github.com/interlock-mcp/interlock/gateway"
)

// serveConfig serves a gateway without upstreams, configured by yaml, the
// way `interlock serve` does, and returns its address.
func serveConfig(t *testing.T, yaml string) string {
	t.Helper()
	addr, _ := serveLimited(t, yaml)
	return addr
}

// serveLimited is serveConfig that also returns the listener, whose state
// a test may wait for.
func serveLimited(t *testing.T, yaml string) (string, *limitedListener) {
	t.Helper()
	f, err := config.Parse("gateway.yaml", []byte(yaml), func(string) (string, bool) { return "", false })
	if err != nil {
		t.Fatal(err)
	}
	gw, err := gateway.New(f, gateway.Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	if err := gw.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := httpServer(f.HTTP, gw.Handler(false))
	limited := limitListener(ln, f.HTTP.MaxConnections, f.Auth.Configured()).(*limitedListener)
	go srv.Serve(limited)
	t.Cleanup(func() { srv.Close(); gw.Close() })
	return ln.Addr().String(), limited
}

func dial(t *testing.T, addr string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// TestSlowClientsAreCutOff: a client that trickles its request holds a
// connection no longer than the configured read timeouts.
func TestSlowClientsAreCutOff(t *testing.T) {
	addr := serveConfig(t, "http: {read_header_timeout: 300ms, read_timeout: 500ms}\n")
	tests := []struct {
		name    string
		head    string // sent at once
		trickle string // then one byte every 50 ms
	}{
		{"headers", "POST /mcp HTTP/1.1\r\n", "Host: 127.0.0.1\r\nContent-Type: application/json\r\n\r\n"},
		{"MCP body", "POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n" +
			"Accept: application/json, text/event-stream\r\nContent-Length: 200\r\n\r\n",
			`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"slow","version":"1"}}}` + strings.Repeat(" ", 60)},
		{"REST body", "POST /v1/tools/any/call HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n",
			strings.Repeat(" ", 100)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := dial(t, addr)
			if _, err := io.WriteString(c, tt.head); err != nil {
				t.Fatal(err)
			}
			stop := make(chan struct{})
			defer close(stop)
			go func() {
				for i := range len(tt.trickle) {
					select {
					case <-stop:
						return
					case <-time.After(50 * time.Millisecond):
					}
					if _, err := c.Write([]byte{tt.trickle[i]}); err != nil {
						return
					}
				}
			}()
			began := time.Now()
			_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
			_, err := io.ReadAll(c)
			// Cut off is cut off, whether the server closed the connection
			// or reset it.
			if took := time.Since(began); (err != nil && !errors.Is(err, syscall.ECONNRESET)) || took > 2*time.Second {
				t.Errorf("the server held the trickling connection for %s (read: %v)", took, err)
			}
		})
	}
}

// TestConnectionLimit: beyond http.max_connections a connection waits
// until another one closes.
func TestConnectionLimit(t *testing.T) {
	addr := serveConfig(t, "http: {max_connections: 2}\n")
	held := []net.Conn{dial(t, addr), dial(t, addr)}
	// The server has taken both: each answers a request.
	health := "GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
	for _, c := range held {
		fmt.Fprint(c, health)
		_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
		if line, err := bufio.NewReader(c).ReadString('\n'); err != nil || !strings.Contains(line, "200") {
			t.Fatalf("a connection within the limit: %q %v", line, err)
		}
	}
	third := dial(t, addr)
	fmt.Fprint(third, health)
	r := bufio.NewReader(third)
	_ = third.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
	if line, err := r.ReadString('\n'); err == nil {
		t.Fatalf("a third connection was served beyond the limit: %q", line)
	}
	held[0].Close()
	_ = third.SetReadDeadline(time.Now().Add(5 * time.Second))
	if line, err := r.ReadString('\n'); err != nil || !strings.Contains(line, "200") {
		t.Errorf("the waiting connection was not served once a slot freed: %q %v", line, err)
	}
}

// TestUnauthenticatedConnectionsLeaveAShare: connections that never
// carry a credential cannot take the whole connection cap of a gateway
// with API keys: a caller with a key is served during the flood, and its
// kept-alive connection survives a second one.
func TestUnauthenticatedConnectionsLeaveAShare(t *testing.T) {
	addr := serveConfig(t, fmt.Sprintf("http: {max_connections: 8}\nauth:\n  keys:\n    - {sha256: %s, principal: alice}\n", gateway.HashKey("alice-key")))
	flood := func() {
		for range 20 {
			c := dial(t, addr)
			// A request line and no more: the connection waits for
			// headers that never come.
			io.WriteString(c, "GET /v1/tools HTTP/1.1\r\n")
		}
	}
	client := &http.Client{Timeout: 3 * time.Second, Transport: &http.Transport{MaxConnsPerHost: 1}}
	call := func(what string) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodGet, "http://"+addr+"/v1/tools", nil)
		req.Header.Set("Authorization", "Bearer alice-key")
		res, err := client.Do(req)
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		io.Copy(io.Discard, res.Body)
		res.Body.Close()
		if res.StatusCode != http.StatusOK {
			t.Fatalf("%s: %d", what, res.StatusCode)
		}
	}
	flood()
	call("a caller with a key during a flood")
	flood()
	call("the same caller after a second flood")
}

// keyedRequest is a request of the REST face with alice's key.
const keyedRequest = "GET /v1/tools HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer alice-key\r\n\r\n"

// idleFlood opens connections to addr that send a request line and no
// more, and counts those the server closes.
type idleFlood struct {
	t      *testing.T
	addr   string
	closed atomic.Int64
}

func (f *idleFlood) open(n int) {
	f.t.Helper()
	for range n {
		c := dial(f.t, f.addr)
		io.WriteString(c, "GET /v1/tools HTTP/1.1\r\n")
		go func() {
			io.Copy(io.Discard, c)
			f.closed.Add(1)
		}()
	}
}

// waitClosed waits until the server closed n of the flood's connections.
func (f *idleFlood) waitClosed(n int) {
	f.t.Helper()
	waitFor(f.t, fmt.Sprintf("the server to close %d idle connections", n), func() bool { return f.closed.Load() >= int64(n) })
}

// readStatus reads the status line of the response on c.
func readStatus(t *testing.T, r *bufio.Reader, c net.Conn) string {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	res, err := http.ReadResponse(r, nil)
	if err != nil {
		return err.Error()
	}
	io.Copy(io.Discard, res.Body)
	res.Body.Close()
	return res.Status
}

// TestKeyedConnectionsOutlastAFlood: with a small http.max_connections,
// floods of idle connections take no connection that carries a valid
// key: not one kept alive after a request whose key was checked, by the
// REST face, /healthz or /readyz, and not a fresh one whose request came
// in with the flood, unread yet when the server took the connections that
// came after it.
func TestKeyedConnectionsOutlastAFlood(t *testing.T) {
	const n = 16 // a quarter of the slots for connections that authenticated
	config := fmt.Sprintf("http: {max_connections: %d}\nauth:\n  keys:\n    - {sha256: %s, principal: alice}\n", n, gateway.HashKey("alice-key"))
	for _, path := range []string{"/v1/tools", "/healthz", "/readyz"} {
		t.Run("kept alive after "+path, func(t *testing.T) {
			addr := serveConfig(t, config)
			c := dial(t, addr)
			r := bufio.NewReader(c)
			request := strings.Replace(keyedRequest, "/v1/tools", path, 1)
			io.WriteString(c, request)
			if got := readStatus(t, r, c); got != "200 OK" {
				t.Fatalf("the first request: %s", got)
			}
			flood := &idleFlood{t: t, addr: addr}
			flood.open(3 * n)
			// All but the share of unauthenticated connections go, and the
			// keyed one is not among them.
			flood.waitClosed(3*n - n*3/4)
			io.WriteString(c, request)
			if got := readStatus(t, r, c); got != "200 OK" {
				t.Errorf("the second request on the kept connection: %s", got)
			}
		})
	}
	t.Run("fresh, during the flood", func(t *testing.T) {
		addr, l := serveLimited(t, config)
		// Callers with a key hold the reserved quarter, and idle
		// connections the rest, so that the connections below wait in
		// the listen queue with their requests sent.
		var holders []net.Conn
		for range n / 4 {
			c := dial(t, addr)
			io.WriteString(c, keyedRequest)
			if got := readStatus(t, bufio.NewReader(c), c); got != "200 OK" {
				t.Fatalf("a holder's request: %s", got)
			}
			holders = append(holders, c)
		}
		flood := &idleFlood{t: t, addr: addr}
		flood.open(n - n/4)
		waitFor(t, "the idle connections to take the rest of the slots", func() bool {
			l.mu.Lock()
			defer l.mu.Unlock()
			return l.count == n-n/4
		})
		keyed := make([]net.Conn, n/4)
		for i := range keyed {
			keyed[i] = dial(t, addr)
			io.WriteString(keyed[i], keyedRequest)
		}
		flood.open(3 * n)
		for _, c := range holders {
			c.Close()
		}
		for i, c := range keyed {
			if got := readStatus(t, bufio.NewReader(c), c); got != "200 OK" {
				t.Errorf("keyed request %d: %s", i, got)
			}
			c.Close()
		}
		// The rest of the flood is served, and all but the share of
		// unauthenticated connections closed.
		flood.waitClosed(3 * n)
	})
}

// TestEvictionWaitsForTheRequest plays the server over the listener: a
// connection is closed for a newer one only while the server waits on its
// client, not while what the client sent is unread, nor from the moment
// its request's headers are read until the gateway has said whether it
// authenticated. Once it did not, it goes first again as the oldest.
func TestEvictionWaitsForTheRequest(t *testing.T) {
	const n = 8 // 6 slots for unproven connections
	waiting := func(c *limitedConn) bool {
		c.l.mu.Lock()
		defer c.l.mu.Unlock()
		return c.waiting || c.settled
	}
	// readHeaders reads the request on c as the server does: its headers,
	// then a read in the background that waits for the client.
	readHeaders := func(t *testing.T, c *limitedConn) {
		if _, err := http.ReadRequest(bufio.NewReader(c)); err != nil {
			t.Fatal(err)
		}
		connState(c, http.StateActive)
		go c.Read(make([]byte, 1))
		waitFor(t, "the server to wait on the client", func() bool { return waiting(c) })
	}
	tests := []struct {
		name  string
		serve func(*testing.T, *limitedConn)
		kept  bool
	}{
		{"sent, not read yet", func(*testing.T, *limitedConn) {}, true},
		{"headers read, being decided", readHeaders, true},
		{"authenticated", func(t *testing.T, c *limitedConn) { readHeaders(t, c); c.Prove() }, true},
		{"did not authenticate", func(t *testing.T, c *limitedConn) { readHeaders(t, c); c.Unproven() }, false},
		{"idle after its response", func(t *testing.T, c *limitedConn) { readHeaders(t, c); connState(c, http.StateIdle) }, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			l := limitListener(ln, n, true).(*limitedListener)
			t.Cleanup(func() { l.Close() })
			accept := func() *limitedConn {
				c, err := l.Accept()
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { c.Close() })
				return c.(*limitedConn)
			}
			var idle []*limitedConn
			// flood opens k idle connections, and waits until the server
			// waits on each (or closed it), when the listener has done
			// all it would.
			flood := func(k int) {
				for range k {
					io.WriteString(dial(t, ln.Addr().String()), "GET /v1/tools HTTP/1.1\r\n")
					c := accept()
					go io.Copy(io.Discard, c)
					idle = append(idle, c)
				}
				waitFor(t, "the server to wait on the idle connections", func() bool {
					return !slices.ContainsFunc(idle, func(c *limitedConn) bool { return !waiting(c) })
				})
			}
			flood(n)
			client := dial(t, ln.Addr().String())
			io.WriteString(client, keyedRequest)
			c := accept()
			tt.serve(t, c)
			// As many as the slots take even if none of the older ones
			// could go: more than the older ones that may.
			flood(n - 1)

			l.mu.Lock()
			kept := !c.settled || c.proven.Load()
			l.mu.Unlock()
			if kept != tt.kept {
				t.Fatalf("kept = %v, want %v", kept, tt.kept)
			}
			if !kept {
				if got := readStatus(t, bufio.NewReader(client), client); !strings.Contains(got, "EOF") && !strings.Contains(got, "reset") {
					t.Errorf("the client of a connection closed read %s", got)
				}
				return
			}
			// Once the request authenticated, the flood goes on past it.
			c.Prove()
			flood(3 * n)
			l.mu.Lock()
			within := l.count <= l.maxUnproven
			l.mu.Unlock()
			if !within {
				t.Errorf("%d unproven connections after the flood", l.count)
			}
			io.WriteString(c, "HTTP/1.1 204 No Content\r\n\r\n")
			if got := readStatus(t, bufio.NewReader(client), client); got != "204 No Content" {
				t.Errorf("the kept connection's response: %s", got)
			}
		})
	}
}
