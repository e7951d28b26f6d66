package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/interlock-mcp/interlock/config"
)

// TestHTTPSessionRequest drives the gateway's own requests on an HTTP
// upstream's session against upstreams that answer well and badly: the
// answer is found in a JSON body or on the request's event stream past
// what comes before it, a question on the stream that belongs to no one
// is answered cancel, and every way of not answering is an error, never a
// result.
func TestHTTPSessionRequest(t *testing.T) {
	for _, c := range []struct {
		name string
		// answer writes the upstream's answer to the request whose id is id.
		answer  func(w http.ResponseWriter, id string)
		want    string // the result, when one is wanted
		wantErr string // what the error says, otherwise
	}{
		{"JSON body", func(w http.ResponseWriter, id string) {
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprintf(w, `{"jsonrpc":"2.0","id":%s,"result":{"ok":1}}`, id)
		}, `{"ok":1}`, ""},
		{"event stream past a notification and another id", func(w http.ResponseWriter, id string) {
			w.Header().Set("Content-Type", "text/event-stream")
			fmt.Fprint(w, "event: message\ndata: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/message\",\"params\":{\"level\":\"info\",\"data\":\"x\"}}\n\n")
			fmt.Fprint(w, "data: {\"jsonrpc\":\"2.0\",\"id\":\"someone-else\",\"result\":{\"no\":1}}\n\n")
			fmt.Fprint(w, "data: not json\n\n")
			fmt.Fprintf(w, "data: {\"jsonrpc\":\"2.0\",\"id\":%s,\"result\":{\"ok\":2}}\n\n", id)
		}, `{"ok":2}`, ""},
		{"JSON-RPC error", func(w http.ResponseWriter, id string) {
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprintf(w, `{"jsonrpc":"2.0","id":%s,"error":{"code":-32602,"message":"no such task"}}`, id)
		}, "", "no such task"},
		{"stream that ends without the answer", func(w http.ResponseWriter, id string) {
			w.Header().Set("Content-Type", "text/event-stream")
			fmt.Fprint(w, "data: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\",\"params\":{}}\n\n")
		}, "", "ended without its answer"},
		{"answer to another request", func(w http.ResponseWriter, id string) {
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprint(w, `{"jsonrpc":"2.0","id":"interlock-0","result":{}}`)
		}, "", "not the answer to the request"},
		{"not JSON-RPC", func(w http.ResponseWriter, id string) {
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprint(w, `<html>`)
		}, "", "not a JSON-RPC message"},
		{"HTTP error", func(w http.ResponseWriter, id string) {
			http.Error(w, "boom", http.StatusInternalServerError)
		}, "", "HTTP 500"},
		{"message larger than the bound", func(w http.ResponseWriter, id string) {
			w.Header().Set("Content-Type", "text/event-stream")
			fmt.Fprintf(w, "data: {\"jsonrpc\":\"2.0\",\"id\":%s,\"result\":{\"big\":\"%s\"}}\n\n", id, strings.Repeat("x", maxUpstreamMessage))
		}, "", "ended without its answer"},
	} {
		t.Run(c.name, func(t *testing.T) {
			var headers http.Header
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				headers = r.Header.Clone()
				var m struct {
					ID json.RawMessage `json:"id"`
				}
				b, _ := io.ReadAll(r.Body)
				_ = json.Unmarshal(b, &m)
				c.answer(w, string(m.ID))
			}))
			defer srv.Close()
			h := &httpSession{u: &upstream{cfg: &config.Upstream{Name: "h", URL: srv.URL}}, id: "s-1", protocol: "2025-11-25"}
			res, err := h.request(context.Background(), "tasks/get", json.RawMessage(`{"taskId":"u-1"}`))
			if c.wantErr == "" {
				if err != nil || string(res) != c.want {
					t.Fatalf("request = %s, %v; want %s", res, err, c.want)
				}
			} else if err == nil || !strings.Contains(err.Error(), c.wantErr) {
				t.Fatalf("request = %s, %v; want an error saying %q", res, err, c.wantErr)
			}
			if headers.Get(sessionIDHeader) != "s-1" || headers.Get(protocolVersionHeader) != "2025-11-25" {
				t.Errorf("headers %v; want the session's id and protocol version", headers)
			}
		})
	}
	t.Run("a question on the stream that belongs to no one is answered cancel", func(t *testing.T) {
		replied := make(chan *jsonrpc.Response, 1)
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			b, _ := io.ReadAll(r.Body)
			m, err := jsonrpc.DecodeMessage(b)
			if err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			if resp, ok := m.(*jsonrpc.Response); ok {
				replied <- resp
				w.WriteHeader(http.StatusAccepted)
				return
			}
			id, _ := json.Marshal(m.(*jsonrpc.Request).ID.Raw())
			w.Header().Set("Content-Type", "text/event-stream")
			fmt.Fprint(w, "data: {\"jsonrpc\":\"2.0\",\"id\":7,\"method\":\"elicitation/create\",\"params\":{\"message\":\"which?\",\"requestedSchema\":{\"type\":\"object\"}}}\n\n")
			w.(http.Flusher).Flush()
			// The answer comes once the question was answered.
			reply := <-replied
			replied <- reply
			fmt.Fprintf(w, "data: {\"jsonrpc\":\"2.0\",\"id\":%s,\"result\":{\"ok\":3}}\n\n", id)
		}))
		defer srv.Close()
		h := &httpSession{u: &upstream{cfg: &config.Upstream{Name: "h", URL: srv.URL}}}
		res, err := h.request(context.Background(), "tasks/result", json.RawMessage(`{"taskId":"u-1"}`))
		if err != nil || string(res) != `{"ok":3}` {
			t.Fatalf("request = %s, %v", res, err)
		}
		reply := <-replied
		var answer mcp.ElicitResult
		if reply.Error != nil || json.Unmarshal(reply.Result, &answer) != nil || answer.Action != "cancel" {
			t.Fatalf("the question was answered %+v; want cancel", reply)
		}
		if id, _ := reply.ID.Raw().(int64); id != 7 {
			t.Errorf("the answer names request %v; want 7", reply.ID.Raw())
		}
	})
	t.Run("a request the gateway does not carry there", func(t *testing.T) {
		replied := make(chan *jsonrpc.Response, 1)
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			b, _ := io.ReadAll(r.Body)
			m, _ := jsonrpc.DecodeMessage(b)
			if resp, ok := m.(*jsonrpc.Response); ok {
				if bytes.Contains(b, []byte(`"result"`)) {
					t.Errorf("an error answer with a result: %s", b)
				}
				replied <- resp
				w.WriteHeader(http.StatusAccepted)
				return
			}
			w.Header().Set("Content-Type", "text/event-stream")
			fmt.Fprint(w, "data: {\"jsonrpc\":\"2.0\",\"id\":8,\"method\":\"tasks/list\",\"params\":{}}\n\n")
			w.(http.Flusher).Flush()
		}))
		defer srv.Close()
		h := &httpSession{u: &upstream{cfg: &config.Upstream{Name: "h", URL: srv.URL}}}
		_, err := h.request(context.Background(), "tasks/result", json.RawMessage(`{"taskId":"u-1"}`))
		if !errors.Is(err, mcp.ErrConnectionClosed) {
			t.Fatalf("request: %v; want the stream's end", err)
		}
		got := <-replied
		if rpcErr, ok := errors.AsType[*jsonrpc.Error](got.Error); !ok || rpcErr.Code != jsonrpc.CodeMethodNotFound {
			t.Fatalf("the request was answered %+v; want method not found", got)
		}
	})
}
