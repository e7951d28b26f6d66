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
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/interlock-mcp/interlock"
	"github.com/interlock-mcp/interlock/config"
	"github.com/interlock-mcp/interlock/gateway"
)

// serveConfig serves a gateway without upstreams, configured by yaml, the
// way `interlock serve` does, and returns its address.
func serveConfig(t *testing.T, yaml string) string {
	t.Helper()
	f, err := config.Parse("gateway.yaml", []byte(yaml), func(string) (string, bool) { return "", false })
	if err != nil {
		t.Fatal(err)
	}
	gw, err := gateway.New(f, gateway.Options{Gate: interlock.GateOptions{Logger: slog.New(slog.DiscardHandler)}})
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
	go srv.Serve(limitListener(ln, f.HTTP.MaxConnections, f.Auth.Configured()))
	t.Cleanup(func() { srv.Close(); gw.Close() })
	return ln.Addr().String()
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
