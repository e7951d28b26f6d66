package gateway

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// TestToolExtrasTravel checks that the fields of an upstream's tool the
// SDK does not model are read from its list, on a child's connection or an
// HTTP upstream's answer (JSON or an event stream), and put back on the
// tool as clients are shown it; modelled fields stay the gate's.
func TestToolExtrasTravel(t *testing.T) {
	// An upstream may also write modelled fields again in another case,
	// which a client that reads JSON without regard to case would take
	// for the gate's view of the tool: they are not extras.
	const list = `{"tools":[{"name":"run","inputSchema":{"type":"object"},"execution":{"taskSupport":"optional"},"x-future":[1,2]},` +
		`{"name":"plain","inputSchema":{"type":"object"},"Annotations":{"readOnlyHint":true},"InputSchema":{},"NAME":"other"}]}`
	for _, tc := range []struct {
		name string
		read func(x *toolExtras)
	}{
		{"a child's tools/list answer", func(x *toolExtras) { x.note(json.RawMessage(list)) }},
		{"an HTTP upstream's JSON answer", func(x *toolExtras) {
			readThrough(t, x, "application/json", `{"jsonrpc":"2.0","id":7,"result":`+list+`}`)
		}},
		{"an HTTP upstream's event stream", func(x *toolExtras) {
			readThrough(t, x, "text/event-stream", "event: message\ndata: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/message\",\"params\":{}}\n\n"+
				"event: message\ndata: {\"jsonrpc\":\"2.0\",\"id\":7,\"result\":"+list+"}\n\n")
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var x toolExtras
			tc.read(&x)
			if got := string(x.of("run")["execution"]); got != `{"taskSupport":"optional"}` {
				t.Errorf("execution = %s", got)
			}
			if x.of("plain") != nil {
				t.Errorf("a tool with nothing unmodelled has extras: %v", x.of("plain"))
			}
			// The gate's view of the tool (here: annotations it added) is
			// kept, the extras are added back, a modelled field is never
			// taken from them.
			res := &toolsWithExtras{
				ListToolsResult: &mcp.ListToolsResult{Tools: []*mcp.Tool{
					{Name: "p.run", InputSchema: map[string]any{"type": "object"}, Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true}},
				}},
				extras: map[string]map[string]json.RawMessage{"p.run": x.of("run")},
			}
			b, err := json.Marshal(res)
			if err != nil {
				t.Fatal(err)
			}
			var out struct {
				Tools []map[string]json.RawMessage `json:"tools"`
			}
			if err := json.Unmarshal(b, &out); err != nil || len(out.Tools) != 1 {
				t.Fatalf("%s: %v", b, err)
			}
			tool := out.Tools[0]
			for k, want := range map[string]string{
				"name": `"p.run"`, "execution": `{"taskSupport":"optional"}`, "x-future": `[1,2]`,
				"annotations": `{"idempotentHint":false,"readOnlyHint":true}`,
			} {
				if string(tool[k]) != want {
					t.Errorf("%s = %s, want %s (tool %s)", k, tool[k], want, b)
				}
			}
		})
	}
}

// readThrough has extrasTrip carry a tools/list request whose answer is
// body, and reads the answer as the SDK would.
func readThrough(t *testing.T, x *toolExtras, contentType, body string) {
	t.Helper()
	trip := extrasTrip{extras: x, next: roundTrip(func(r *http.Request) (*http.Response, error) {
		sent, _ := io.ReadAll(r.Body)
		if !strings.Contains(string(sent), `"tools/list"`) {
			t.Errorf("the request reached the upstream as %q", sent)
		}
		return &http.Response{StatusCode: 200, Header: http.Header{"Content-Type": {contentType}},
			Body: io.NopCloser(strings.NewReader(body))}, nil
	})}
	req, _ := http.NewRequest(http.MethodPost, "http://upstream/mcp", strings.NewReader(`{"jsonrpc":"2.0","id":7,"method":"tools/list"}`))
	resp, err := trip.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	// Read in small pieces, as a stream arrives.
	r := bufio.NewReaderSize(resp.Body, 16)
	var got bytes.Buffer
	if _, err := io.Copy(&got, io.LimitReader(r, 1<<20)); err != nil {
		t.Fatal(err)
	}
	if got.String() != body {
		t.Errorf("the SDK read %q, want the answer as sent", got.String())
	}
}

type roundTrip func(*http.Request) (*http.Response, error)

func (f roundTrip) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// TestTaskCallsOfEarlierClients: a tools/call that asks to run as a task
// (params.task) is a task for a client of 2025-11-25, whose tasks/result
// gives the call's result, and is refused, with an error that says so,
// to a client of an earlier protocol; a null task is no task.
func TestTaskCallsOfEarlierClients(t *testing.T) {
	gw := start(t, testConfig(t, "", "fx"), "false")
	session := func(t *testing.T, protocol string) (send func(string), answer func(string) map[string]json.RawMessage) {
		in, out := stdioClient(t, gw)
		lines := bufio.NewScanner(out)
		send = func(msg string) {
			if _, err := io.WriteString(in, msg+"\n"); err != nil {
				t.Fatal(err)
			}
		}
		answer = func(id string) map[string]json.RawMessage {
			for lines.Scan() {
				var m map[string]json.RawMessage
				if json.Unmarshal(lines.Bytes(), &m) == nil && string(m["id"]) == id {
					return m
				}
			}
			t.Fatalf("no answer to %s", id)
			return nil
		}
		send(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"` + protocol + `","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`)
		init := answer("1")
		if offers := strings.Contains(string(init["result"]), `"tasks":{"list":{},"cancel":{},"requests":{"tools":{"call":{}}}}`); offers != (protocol == "2025-11-25") {
			t.Errorf("initialize of %s offers tasks: %t: %s", protocol, offers, init["result"])
		}
		send(`{"jsonrpc":"2.0","method":"notifications/initialized","params":{}}`)
		return send, answer
	}
	for _, tc := range []struct {
		name, protocol, params string
		want                   string // what the answer holds: "task", "refused" or "result"
	}{
		{"as a task, 2025-11-25", "2025-11-25", `{"name":"echo","arguments":{},"task":{"ttl":60000}}`, "task"},
		{"as a task, 2025-06-18", "2025-06-18", `{"name":"echo","arguments":{},"task":{"ttl":60000}}`, "refused"},
		{"with a null task", "2025-11-25", `{"name":"echo","arguments":{},"task":null}`, "result"},
		{"plain", "2025-11-25", `{"name":"echo","arguments":{}}`, "result"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			send, answer := session(t, tc.protocol)
			send(`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":` + tc.params + `}`)
			m := answer("2")
			var rpcErr struct {
				Code    int    `json:"code"`
				Message string `json:"message"`
			}
			_ = json.Unmarshal(m["error"], &rpcErr)
			var res struct {
				Task struct {
					TaskID string `json:"taskId"`
					Status string `json:"status"`
				} `json:"task"`
				Content json.RawMessage `json:"content"`
			}
			_ = json.Unmarshal(m["result"], &res)
			switch tc.want {
			case "refused":
				if rpcErr.Code != -32602 || !strings.Contains(rpcErr.Message, "task") {
					t.Errorf("answer %s, want invalid params that name tasks", m)
				}
			case "result":
				if m["error"] != nil || res.Content == nil || res.Task.TaskID != "" {
					t.Errorf("answer %s, want the call's result", m)
				}
			case "task":
				if res.Task.Status != "completed" || !strings.HasPrefix(res.Task.TaskID, "tsk_") {
					t.Fatalf("answer %s, want a completed task", m)
				}
				send(`{"jsonrpc":"2.0","id":3,"method":"tasks/result","params":{"taskId":"` + res.Task.TaskID + `"}}`)
				if got := answer("3"); !strings.Contains(string(got["result"]), `"content"`) || !strings.Contains(string(got["result"]), res.Task.TaskID) {
					t.Errorf("tasks/result: %s", got)
				}
			}
		})
	}
}
