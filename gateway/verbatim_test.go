package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http/httptest"
	"strings"
	"sync"
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

// fakeConn is a connection whose reads are given by the test; a closed
// reads channel is a broken connection.
type fakeConn struct {
	mcp.Connection
	reads chan jsonrpc.Message

	mu      sync.Mutex
	written []*jsonrpc.Request
	wrote   chan struct{}
}

func (c *fakeConn) Read(ctx context.Context) (jsonrpc.Message, error) {
	msg, ok := <-c.reads
	if !ok {
		return nil, io.EOF
	}
	return msg, nil
}

func (c *fakeConn) Write(_ context.Context, msg jsonrpc.Message) error {
	c.mu.Lock()
	c.written = append(c.written, msg.(*jsonrpc.Request))
	c.mu.Unlock()
	c.wrote <- struct{}{}
	return nil
}

// TestChildConnCarriesTheGatewaysCalls checks what the wrapped connection
// to a child does with a call of the gateway's own and with what the SDK
// reads: the answer to the call is the caller's alone, as bytes, and
// everything else reaches the SDK.
func TestChildConnCarriesTheGatewaysCalls(t *testing.T) {
	result := json.RawMessage(`{"content":[],"x":1.000000000000000001}`)
	sdkID, _ := jsonrpc.MakeID(float64(7))
	tests := []struct {
		name    string
		answer  func(id jsonrpc.ID) jsonrpc.Message // nil: the connection breaks
		cancel  bool                                // the caller gives up before the answer
		want    string                              // the caller's result, or its error's text
		sdkGets bool                                // the answer reaches the SDK's reader
	}{
		{"answered", func(id jsonrpc.ID) jsonrpc.Message { return &jsonrpc.Response{ID: id, Result: result} }, false, string(result), false},
		{"refused", func(id jsonrpc.ID) jsonrpc.Message {
			return &jsonrpc.Response{ID: id, Error: &jsonrpc.Error{Code: -32000, Message: "no"}}
		}, false, "no", false},
		{"broken", nil, false, mcp.ErrConnectionClosed.Error(), false},
		{"cancelled, then answered", func(id jsonrpc.ID) jsonrpc.Message { return &jsonrpc.Response{ID: id, Result: result} }, true, context.Canceled.Error(), true},
		{"the SDK's own call", func(jsonrpc.ID) jsonrpc.Message { return &jsonrpc.Response{ID: sdkID, Result: result} }, false, "", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			inner := &fakeConn{reads: make(chan jsonrpc.Message, 1), wrote: make(chan struct{}, 2)}
			conn := &childConn{Connection: inner, pending: new(atomic.Int64), caller: new(clientMeta), calls: map[jsonrpc.ID]chan *jsonrpc.Response{}}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			type outcome struct {
				raw json.RawMessage
				err error
			}
			done := make(chan outcome, 1)
			if tt.name != "the SDK's own call" {
				go func() {
					raw, err := conn.call(ctx, &mcp.CallToolParams{Name: "echo", Arguments: json.RawMessage(`{"n":1e400}`)}, false)
					done <- outcome{raw, err}
				}()
				<-inner.wrote
			}
			var id jsonrpc.ID
			inner.mu.Lock()
			if len(inner.written) > 0 {
				id = inner.written[0].ID
				if got := string(inner.written[0].Params); !strings.Contains(got, `"arguments":{"n":1e400}`) {
					t.Errorf("the call was written as %s, not with the arguments as given", got)
				}
			}
			inner.mu.Unlock()
			if tt.cancel {
				cancel()
				o := <-done
				done <- o
				<-inner.wrote // notifications/cancelled
				inner.mu.Lock()
				note := inner.written[1]
				inner.mu.Unlock()
				if note.Method != "notifications/cancelled" || !strings.Contains(string(note.Params), fmt.Sprint(id.Raw())) {
					t.Errorf("the upstream was told %s %s", note.Method, note.Params)
				}
			}
			read := make(chan jsonrpc.Message, 1)
			go func() {
				msg, _ := conn.Read(ctx)
				read <- msg
			}()
			if tt.answer == nil {
				close(inner.reads)
			} else {
				inner.reads <- tt.answer(id)
			}
			if tt.want != "" {
				o := <-done
				got := string(o.raw)
				if o.err != nil {
					got = o.err.Error()
				}
				if !strings.Contains(got, tt.want) {
					t.Errorf("the call got %q, want %q", got, tt.want)
				}
			}
			if tt.answer != nil && !tt.sdkGets {
				// The SDK's reader waits for the next message, not this one.
				inner.reads <- &jsonrpc.Request{Method: "notifications/message"}
			}
			msg := <-read
			if r, isResponse := msg.(*jsonrpc.Response); isResponse != tt.sdkGets {
				t.Errorf("the SDK read %+v", msg)
			} else if isResponse && string(r.Result) != string(result) {
				t.Errorf("the SDK read %s", r.Result)
			}
			if len(conn.calls) != 0 {
				t.Errorf("the connection still waits for %d answers", len(conn.calls))
			}
		})
	}
}
