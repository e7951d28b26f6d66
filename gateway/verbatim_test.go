package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// TestResultsTravelVerbatim checks on the wire that a child's result
// reaches a client as the child wrote it, on either protocol generation:
// numbers that a decoding into Go values would round come through as
// written.
func TestResultsTravelVerbatim(t *testing.T) {
	gw := start(t, testConfig(t, "", "fx"), "false")
	srv := httptest.NewServer(gw.Handler(false))
	defer srv.Close()
	for _, version := range []string{"2025-11-25", "2026-07-28"} {
		t.Run(version, func(t *testing.T) {
			var wire bytes.Buffer
			transport := &mcp.LoggingTransport{Transport: &mcp.StreamableClientTransport{Endpoint: srv.URL + MCPPath}, Writer: &wire}
			cs, err := mcp.NewClient(&mcp.Implementation{Name: "test"}, nil).Connect(context.Background(), transport,
				&mcp.ClientSessionOptions{ProtocolVersion: version})
			if err != nil {
				t.Fatal(err)
			}
			defer cs.Close()
			res := call(t, cs, "exact", map[string]any{})
			if res.IsError || len(res.Content) != 1 || res.Content[0].(*mcp.TextContent).Text != "exact" {
				t.Fatalf("result = %+v", res)
			}
			if !strings.Contains(wire.String(), exactStructure) {
				t.Errorf("the structured content did not come as the child wrote it; wire:\n%s", wire.String())
			}
			// Other results still go through the gate's reading of them.
			if res := call(t, cs, "wipe", map[string]any{"target": "x", "__confirm": true}); res.IsError {
				t.Errorf("a confirmed call was refused: %+v", body(t, res))
			}
			if b := body(t, call(t, cs, "wipe", map[string]any{"target": "x"})); b.Code == "" {
				t.Errorf("an unconfirmed destructive call ran")
			}
		})
	}
}

// fakeConn is a connection whose reads are given by the test.
type fakeConn struct {
	mcp.Connection
	reads   chan jsonrpc.Message
	written []jsonrpc.Message
}

func (c *fakeConn) Read(ctx context.Context) (jsonrpc.Message, error) { return <-c.reads, nil }

func (c *fakeConn) Write(_ context.Context, msg jsonrpc.Message) error {
	c.written = append(c.written, msg)
	return nil
}

// TestChildConnTakesVerbatimAnswers checks what the wrapped connection to
// a child hands the SDK for each kind of answer to a call.
func TestChildConnTakesVerbatimAnswers(t *testing.T) {
	id, _ := jsonrpc.MakeID(float64(7))
	result := json.RawMessage(`{"content":[],"x":1}`)
	tests := []struct {
		name      string
		verbatim  bool // the call was written as a verbatim one
		endFirst  bool // the attempt ended before the answer came
		answer    *jsonrpc.Response
		taken     bool // the connection kept the result for the call
		sdkGetsIt bool // the SDK reads the answer as it came
	}{
		{"verbatim call answered", true, false, &jsonrpc.Response{ID: id, Result: result}, true, false},
		{"verbatim call failed", true, false, &jsonrpc.Response{ID: id, Error: &jsonrpc.Error{Code: -32000, Message: "no"}}, false, true},
		{"answer after the attempt ended", true, true, &jsonrpc.Response{ID: id, Result: result}, false, true},
		{"ordinary call", false, false, &jsonrpc.Response{ID: id, Result: result}, false, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			inner := &fakeConn{reads: make(chan jsonrpc.Message, 1)}
			conn := &childConn{Connection: inner, pending: new(atomic.Int64), waiting: map[jsonrpc.ID]*verbatim{}}
			v := new(verbatim)
			v.begin()
			ctx := context.Background()
			if tt.verbatim {
				ctx = withState(ctx, func(s *requestState) { s.wire = v })
			}
			if err := conn.Write(ctx, &jsonrpc.Request{ID: id, Method: "tools/call"}); err != nil {
				t.Fatal(err)
			}
			if tt.endFirst {
				v.end()
				if len(conn.waiting) != 0 {
					t.Errorf("the link still waits for %d answers after the attempt ended", len(conn.waiting))
				}
			}
			inner.reads <- tt.answer
			got, err := conn.Read(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if (got == jsonrpc.Message(tt.answer)) != tt.sdkGetsIt {
				t.Errorf("the SDK read %+v", got)
			}
			if r, ok := got.(*jsonrpc.Response); ok && !tt.sdkGetsIt && r.Error != errVerbatim {
				t.Errorf("the SDK read %+v, want errVerbatim in its place", r)
			}
			if raw := v.end(); (raw != nil) != tt.taken || (tt.taken && string(raw) != string(result)) {
				t.Errorf("taken = %s", raw)
			}
			if len(conn.waiting) != 0 {
				t.Errorf("the link still waits for %d answers", len(conn.waiting))
			}
		})
	}
}
