// Package rawhttp sends tests' requests as they go on the wire, for the
// requests net/http will not write: paths and headers with bytes that are
// not UTF-8, control characters, or more than a server accepts.
package rawhttp

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"testing"
)

// Status sends request, a request line and headers as they go on the
// wire, on a connection of its own to addr, and returns the status
// answered.
func Status(t testing.TB, addr, request string) int {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := io.WriteString(conn, request+"Host: "+addr+"\r\nConnection: close\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	res, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	return res.StatusCode
}
