package gateway

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// taskServer is an HTTP MCP server of 2025-11-25 that runs its one tool,
// research, as a task of its own, and knows a task only in the session
// that made it, as a server that keeps tasks per session does. It says too
// much: its error messages hold a secret.
func taskServer(t *testing.T) *httptest.Server {
	var mu sync.Mutex
	sessions, madeIn := 0, map[string]string{} // task id → the session that made it
	return handRolledUpstream(t, func(w http.ResponseWriter, r *http.Request, id json.RawMessage, method string, b []byte) {
		var m struct {
			Params struct {
				TaskID string          `json:"taskId"`
				Task   json.RawMessage `json:"task"`
			} `json:"params"`
		}
		_ = json.Unmarshal(b, &m)
		session := r.Header.Get("Mcp-Session-Id")
		answer := func(result string) {
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprintf(w, `{"jsonrpc":"2.0","id":%s,%s}`, id, result)
		}
		mu.Lock()
		defer mu.Unlock()
		task := `{"taskId":"%s","status":"%s","createdAt":"2026-11-29T00:00:00Z","lastUpdatedAt":"2026-11-29T00:00:00Z","ttl":60000}`
		switch {
		case method == "initialize":
			sessions++
			w.Header().Set("Mcp-Session-Id", fmt.Sprintf("up-session-%d", sessions))
			answer(`"result":{"protocolVersion":"2025-11-25","capabilities":{"tools":{},"tasks":{"requests":{"tools":{"call":{}}}}},"serverInfo":{"name":"tasker","version":"1"}}`)
		case method == "tools/list":
			answer(`"result":{"tools":[{"name":"research","inputSchema":{"type":"object"},"annotations":{"readOnlyHint":true},"execution":{"taskSupport":"required"}}]}`)
		case method == "tools/call" && len(m.Params.Task) > 0:
			made := fmt.Sprintf("up-task-%d", len(madeIn)+1)
			madeIn[made] = session
			answer(`"result":{"task":` + fmt.Sprintf(task, made, "working") + `}`)
		case method == "tools/call":
			answer(`"error":{"code":-32602,"message":"research runs only as a task"}`)
		case method == "tasks/get" && madeIn[m.Params.TaskID] == session:
			answer(`"result":` + strings.Replace(fmt.Sprintf(task, m.Params.TaskID, "completed"), `}`,
				`,"_meta":{"io.modelcontextprotocol/related-task":{"taskId":"`+m.Params.TaskID+`"}}}`, 1))
		case method == "tasks/get":
			answer(`"error":{"code":-32602,"message":"no such task in this session"}`)
		case method == "tasks/result":
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
func handRolledUpstream(t *testing.T, answer func(w http.ResponseWriter, r *http.Request, id json.RawMessage, method string, body []byte)) *httptest.Server {
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
		answer(w, r, m.ID, m.Method, b)
	}))
	t.Cleanup(srv.Close)
	return srv
}

// httpGateway starts a gateway in front of the HTTP upstream at url (per
// client or not) with rules, and serves it over HTTP at the returned MCP
// endpoint. alice and bob of acme and alice of tenant other have keys.
func httpGateway(t *testing.T, url string, perClient bool, rules string) (*Gateway, string) {
	gw := start(t, testConfig(t, fmt.Sprintf(`
upstreams:
  - name: up
    url: %s
    per_client: %t
auth:
  keys:
    - {sha256: %s, principal: alice, tenant: acme}
    - {sha256: %s, principal: bob, tenant: acme}
    - {sha256: %s, principal: alice, tenant: other}
%s`, url, perClient, HashKey("alice-key"), HashKey("bob-key"), HashKey("other-alice-key"), rules)), "false")
	srv := httptest.NewServer(gw.Handler(false))
	t.Cleanup(srv.Close)
	return gw, srv.URL + MCPPath
}

// taskerGateway is httpGateway in front of taskServer, whose research
// takes mode (and what follows it in the rule).
func taskerGateway(t *testing.T, perClient bool, mode string) (*Gateway, string) {
	return httpGateway(t, taskServer(t).URL, perClient, `
rules:
  - name: research
    match: {tools: [research]}
    mode: `+mode+"\n")
}

// TestUpstreamTaskOfAHostileServer: a task an HTTP upstream makes reaches
// its client under the gateway's id alone, the server's error words stay
// in the gateway's log, and another identity cannot reach the task.
func TestUpstreamTaskOfAHostileServer(t *testing.T) {
	_, url := taskerGateway(t, false, "allow")
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

// TestApprovedUpstreamTask: a call of an upstream's task tool that waited
// for approval runs once approved, and the task the upstream made of it is
// asked about on the link that made it, also where each client has a link
// of its own (per_client) and the approved run was the gateway's. Two
// tenants' tasks run so at once, on the gateway's one session, and neither
// reaches the other's.
func TestApprovedUpstreamTask(t *testing.T) {
	for _, perClient := range []bool{false, true} {
		t.Run(fmt.Sprintf("per_client %t", perClient), func(t *testing.T) {
			gw, url := taskerGateway(t, perClient, "approval\n    approvers: [bob]")
			rpcOf := func(key string) func(method, params string) (map[string]any, map[string]any) {
				cs := dial(t, nil, url, key, &mcp.ClientSessionOptions{ProtocolVersion: protocolTasks})
				header := http.Header{"Authorization": {"Bearer " + key}, "Mcp-Protocol-Version": {protocolTasks}}
				return func(method, params string) (map[string]any, map[string]any) {
					return answerOf(t, url, cs.ID(), header, method, `{"jsonrpc":"2.0","id":5,"method":"`+method+`","params":{`+params+`}}`)
				}
			}
			tenants := []func(method, params string) (map[string]any, map[string]any){rpcOf("alice-key"), rpcOf("other-alice-key")}
			var ids []string
			for _, rpc := range tenants {
				created, rpcErr := rpc("tools/call", `"name":"research","arguments":{},"task":{"ttl":60000}`)
				task, _ := created["task"].(map[string]any)
				id, _ := task["taskId"].(string)
				if rpcErr != nil || !strings.HasPrefix(id, "tsk_") {
					t.Fatalf("tools/call answered %v %v", created, rpcErr)
				}
				ids = append(ids, id)
			}
			for _, id := range ids {
				approveTask(t, gw, gw, id)
			}
			for i, rpc := range tenants {
				for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
					res, rpcErr := rpc("tasks/get", `"taskId":"`+ids[i]+`"`)
					if rpcErr == nil && res["status"] == "completed" {
						break
					}
					if rpcErr != nil || res["status"] == "failed" || time.Now().After(deadline) {
						t.Fatalf("tasks/get answered %v %v", res, rpcErr)
					}
				}
				_, theirs := rpc("tasks/get", `"taskId":"`+ids[1-i]+`"`)
				_, none := rpc("tasks/get", `"taskId":"tsk_none"`)
				if theirs == nil || fmt.Sprint(theirs) != fmt.Sprint(none) {
					t.Errorf("tasks/get of the other tenant's task answered %v, of no task %v", theirs, none)
				}
			}
		})
	}
}
