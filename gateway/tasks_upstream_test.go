package gateway

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// taskServer is an HTTP MCP server of 2025-11-25 that runs its one tool,
// research, as a task of its own, and says too much: its error messages
// hold a secret, and it answers about a task under whatever id it likes.
func taskServer(t *testing.T) *httptest.Server {
	return handRolledUpstream(t, func(w http.ResponseWriter, id json.RawMessage, method string, b []byte) {
		var m struct {
			Method string `json:"method"`
			Params struct {
				TaskID string          `json:"taskId"`
				Task   json.RawMessage `json:"task"`
			} `json:"params"`
		}
		_ = json.Unmarshal(b, &m)
		answer := func(result string) {
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprintf(w, `{"jsonrpc":"2.0","id":%s,%s}`, id, result)
		}
		task := `{"taskId":"up-task-1","status":"%s","createdAt":"2026-11-29T00:00:00Z","lastUpdatedAt":"2026-11-29T00:00:00Z","ttl":60000}`
		switch {
		case m.Method == "initialize":
			w.Header().Set("Mcp-Session-Id", "up-session")
			answer(`"result":{"protocolVersion":"2025-11-25","capabilities":{"tools":{},"tasks":{"requests":{"tools":{"call":{}}}}},"serverInfo":{"name":"tasker","version":"1"}}`)
		case m.Method == "tools/list":
			answer(`"result":{"tools":[{"name":"research","inputSchema":{"type":"object"},"annotations":{"readOnlyHint":true},"execution":{"taskSupport":"required"}}]}`)
		case m.Method == "tools/call" && len(m.Params.Task) > 0:
			answer(`"result":{"task":` + fmt.Sprintf(task, "working") + `}`)
		case m.Method == "tools/call":
			answer(`"error":{"code":-32602,"message":"research runs only as a task"}`)
		case m.Method == "tasks/get" && m.Params.TaskID == "up-task-1":
			answer(`"result":` + strings.Replace(fmt.Sprintf(task, "completed"), `}`,
				`,"_meta":{"io.modelcontextprotocol/related-task":{"taskId":"up-task-1"}}}`, 1))
		case m.Method == "tasks/result":
			answer(`"error":{"code":-32603,"message":"database password hunter2 at 10.0.0.5"}`)
		default:
			answer(`"result":{}`)
		}
	})
}

// handRolledUpstream serves an MCP server written by hand over streamable
// HTTP, as a server the SDK did not write may behave: it refuses a GET
// stream, takes every notification and answer, and hands each request to
// answer with its id, its method and its whole body.
func handRolledUpstream(t *testing.T, answer func(w http.ResponseWriter, id json.RawMessage, method string, body []byte)) *httptest.Server {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			http.Error(w, "no stream here", http.StatusMethodNotAllowed)
			return
		}
		b, _ := io.ReadAll(r.Body)
		var m struct {
			ID     json.RawMessage `json:"id"`
			Method string          `json:"method"`
		}
		if json.Unmarshal(b, &m) != nil || len(m.ID) == 0 {
			w.WriteHeader(http.StatusAccepted)
			return
		}
		answer(w, m.ID, m.Method, b)
	}))
	t.Cleanup(srv.Close)
	return srv
}

// TestUpstreamTaskOfAHostileServer: a task an HTTP upstream makes reaches
// its client under the gateway's id alone, the server's error words stay
// in the gateway's log, and another identity cannot reach the task.
func TestUpstreamTaskOfAHostileServer(t *testing.T) {
	up := taskServer(t)
	f := testConfig(t, fmt.Sprintf(`
upstreams:
  - name: tasker
    url: %s
auth:
  keys:
    - {sha256: %s, principal: alice, tenant: acme}
    - {sha256: %s, principal: alice, tenant: other}
rules:
  - name: research-runs
    match: {tools: [research]}
    mode: allow
`, up.URL, HashKey("alice-key"), HashKey("other-alice-key")))
	gw := start(t, f, "false")
	srv := httptest.NewServer(gw.Handler(false))
	t.Cleanup(srv.Close)
	url := srv.URL + MCPPath
	session := func(key string) func(method, params string) string {
		cs := dial(t, nil, url, key, &mcp.ClientSessionOptions{ProtocolVersion: protocolTasks})
		return func(method, params string) string {
			t.Helper()
			header := http.Header{"Authorization": {"Bearer " + key}, "Mcp-Protocol-Version": {protocolTasks}}
			status, b, _ := rawMCPType(t, url, cs.ID(), header, `{"jsonrpc":"2.0","id":5,"method":"`+method+`","params":{`+params+`}}`)
			if status != http.StatusOK {
				t.Fatalf("%s: %d %s", method, status, b)
			}
			if strings.Contains(b, "up-task-1") || strings.Contains(b, "hunter2") {
				t.Errorf("%s told the client what only the gateway may know: %s", method, b)
			}
			return b
		}
	}
	alice, other := session("alice-key"), session("other-alice-key")
	created := alice("tools/call", `"name":"research","arguments":{},"task":{"ttl":60000}`)
	_, rest, _ := strings.Cut(created, `"taskId":"`)
	id, _, _ := strings.Cut(rest, `"`)
	if !strings.HasPrefix(id, "tsk_") || !strings.Contains(created, `"status":"working"`) {
		t.Fatalf("tools/call answered %s", created)
	}
	if got := alice("tasks/get", `"taskId":"`+id+`"`); !strings.Contains(got, `"status":"completed"`) ||
		strings.Count(got, id) != 2 {
		t.Errorf("tasks/get answered %s; want the task completed, named by the gateway's id in it and in its related task", got)
	}
	if res := alice("tasks/result", `"taskId":"`+id+`"`); !strings.Contains(res, `"code":-32603`) || !strings.Contains(res, "gateway's log") {
		t.Errorf("tasks/result answered %s; want the server's code, its words left in the log", res)
	}
	for _, method := range []string{"tasks/get", "tasks/result", "tasks/cancel"} {
		theirs, none := other(method, `"taskId":"`+id+`"`), other(method, `"taskId":"tsk_none"`)
		if !strings.Contains(theirs, "no task with this id") || theirs != none {
			t.Errorf("%s of alice's task by alice of another tenant: %s; of no task: %s", method, theirs, none)
		}
	}
}
