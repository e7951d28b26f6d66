package gateway

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/interlock-mcp/interlock"
	"github.com/interlock-mcp/interlock/approval"
	"github.com/interlock-mcp/interlock/audit"
	"github.com/interlock-mcp/interlock/internal/testdb"
	"github.com/interlock-mcp/interlock/postgres"
	"github.com/interlock-mcp/interlock/redis"
	"github.com/interlock-mcp/interlock/sqlite"
	"github.com/interlock-mcp/interlock/task"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// taskRules is the configuration of the task tests: alice of acme calls,
// bob approves her wipes, and her counts wait a second for him; alice of
// tenant other and mallory of acme are others.
var taskRules = fmt.Sprintf(`
auth:
  keys:
    - {sha256: %s, principal: alice, tenant: acme}
    - {sha256: %s, principal: bob, tenant: acme}
    - {sha256: %s, principal: alice, tenant: other}
    - {sha256: %s, principal: mallory, tenant: acme}
rules:
  - name: wipes-need-approval
    match: {tools: [wipe]}
    mode: approval
    approvers: [bob]
  - name: counts-wait-a-second
    match: {tools: [count]}
    mode: approval
    approvers: [bob]
    timeout: 1s
`, HashKey("alice-key"), HashKey("bob-key"), HashKey("other-alice-key"), HashKey("mallory-key"))

// taskClient speaks 2026-07-28 to a gateway over streamable HTTP with an
// API key, declaring the tasks extension.
type taskClient struct {
	t   *testing.T
	url string
	key string
}

// latestMetaTasks is the _meta of a request of 2026-07-28 whose client
// declares the tasks extension, and forms.
const latestMetaTasks = `"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28",` +
	`"io.modelcontextprotocol/clientCapabilities":{"elicitation":{"form":{}},"extensions":{"io.modelcontextprotocol/tasks":{}}},` +
	`"io.modelcontextprotocol/clientInfo":{"name":"raw","version":"1"}}`

// taskGateway starts a gateway with rules in front of the fixture, serves
// it over HTTP for the test, and returns it with alice's task client.
func taskGateway(t *testing.T, rules string) (*Gateway, taskClient) {
	gw := start(t, testConfig(t, rules, "fx"), "false")
	srv := httptest.NewServer(gw.Handler(false))
	t.Cleanup(srv.Close)
	return gw, taskClient{t, srv.URL + "/mcp", "alice-key"}
}

// rpc sends method with params (an object's members, without _meta) and
// returns the answer's result or error.
func (c taskClient) rpc(method, name, params string) (result, rpcErr map[string]any) {
	c.t.Helper()
	if params != "" {
		params += ","
	}
	body := fmt.Sprintf(`{"jsonrpc":"2.0","id":1,"method":%q,"params":{%s%s}}`, method, params, latestMetaTasks)
	header := http.Header{"Mcp-Protocol-Version": {"2026-07-28"}, "Mcp-Method": {method}, "Mcp-Name": {name},
		"Authorization": {"Bearer " + c.key}}
	return answerOf(c.t, c.url, "", header, method, body)
}

// firstMessage posts body to the gateway at url (in session, unless it
// is "") and returns the answer's content type and the first message it
// holds: the JSON body, or the first event of a stream.
func firstMessage(t *testing.T, url, session string, header http.Header, body string) (contentType, msg string) {
	t.Helper()
	status, b, contentType := rawMCPType(t, url, session, header, body)
	if status != http.StatusOK {
		t.Fatalf("status %d: %s", status, b)
	}
	if strings.HasPrefix(contentType, "text/event-stream") {
		_, data, _ := strings.Cut(b, "data: ")
		b, _, _ = strings.Cut(data, "\n")
	}
	return contentType, b
}

// answerOf posts body, a request of method, to the gateway at url (in
// session, unless it is "") and returns its answer's result or error, read
// from a JSON body or from the first event of a stream.
func answerOf(t *testing.T, url, session string, header http.Header, method, body string) (result, rpcErr map[string]any) {
	t.Helper()
	_, b := firstMessage(t, url, session, header, body)
	var answer struct {
		Result map[string]any `json:"result"`
		Error  map[string]any `json:"error"`
	}
	if err := json.Unmarshal([]byte(b), &answer); err != nil {
		t.Fatalf("%s: %v: %s", method, err, b)
	}
	return answer.Result, answer.Error
}

// call calls wipe on target, asking for a task.
func (c taskClient) call(target string) map[string]any {
	c.t.Helper()
	res, rpcErr := c.rpc("tools/call", "wipe", fmt.Sprintf(`"name":"wipe","arguments":{"target":%q}`, target))
	if rpcErr != nil {
		c.t.Fatalf("tools/call: %v", rpcErr)
	}
	return res
}

// poll reads task id until its status is not working, or a while passed.
func (c taskClient) poll(id string) (map[string]any, map[string]any) {
	c.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		res, rpcErr := c.rpc("tasks/get", id, fmt.Sprintf(`"taskId":%q`, id))
		if rpcErr != nil || res["status"] != "working" || time.Now().After(deadline) {
			return res, rpcErr
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestApprovalAsTask: a client that declares the tasks extension gets a
// task for a call that waits for approval, and its polls see the call run
// once approved (the approval consumed), answered DECLINED once denied,
// and cancelled with its approval withdrawn; the task is its owner's
// alone, and an allowed call is answered at once.
func TestApprovalAsTask(t *testing.T) {
	gw, alice := taskGateway(t, taskRules)
	bob := interlock.Identity{Tenant: "acme", Principal: "bob"}

	tests := []struct {
		name   string
		decide func(t *testing.T, id, approvalID string)
		status string
		check  func(t *testing.T, res map[string]any, a *approval.Approval)
	}{
		{"approved", func(t *testing.T, _, approvalID string) {
			if _, err := gw.approvals.Decide(t.Context(), approvalID, bob, approval.Approve, "ok"); err != nil {
				t.Fatal(err)
			}
		}, "completed", func(t *testing.T, res map[string]any, a *approval.Approval) {
			result, _ := res["result"].(map[string]any)
			if !a.Consumed || result["resultType"] != "complete" || !strings.Contains(fmt.Sprint(result["content"]), "wiped") {
				t.Errorf("approval consumed %t, result %v", a.Consumed, result)
			}
		}},
		{"denied", func(t *testing.T, _, approvalID string) {
			if _, err := gw.approvals.Decide(t.Context(), approvalID, bob, approval.Deny, "not today"); err != nil {
				t.Fatal(err)
			}
		}, "completed", func(t *testing.T, res map[string]any, _ *approval.Approval) {
			result, _ := res["result"].(map[string]any)
			if result["isError"] != true || !strings.Contains(fmt.Sprint(result["structuredContent"]), "DECLINED") {
				t.Errorf("result %v", result)
			}
		}},
		{"cancelled by its caller", func(t *testing.T, id, _ string) {
			if res, rpcErr := alice.rpc("tasks/cancel", id, fmt.Sprintf(`"taskId":%q`, id)); rpcErr != nil || res["resultType"] != "complete" {
				t.Fatalf("tasks/cancel: %v %v", res, rpcErr)
			}
		}, "cancelled", func(t *testing.T, res map[string]any, a *approval.Approval) {
			if a.State(time.Now()) != approval.Denied || a.Denial.Principal != "alice" || res["result"] != nil {
				t.Errorf("approval %s by %+v, task %v", a.State(time.Now()), a.Denial, res)
			}
		}},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			created := alice.call(fmt.Sprintf("disk-%d", i))
			id, _ := created["taskId"].(string)
			if created["resultType"] != "task" || created["status"] != "working" || !strings.HasPrefix(id, "tsk_") ||
				!strings.Contains(fmt.Sprint(created["statusMessage"]), "waits for approval by bob") {
				t.Fatalf("tools/call answered %v", created)
			}
			stored, err := gw.tasks.store.Get(t.Context(), id)
			if err != nil || strings.Contains(string(stored.Call), "disk-") {
				t.Fatalf("stored task %+v, %v: its call must be boxed", stored, err)
			}
			for _, who := range []string{"other-alice-key", "mallory-key"} {
				other := taskClient{t, alice.url, who}
				for _, method := range []string{"tasks/get", "tasks/cancel"} {
					_, theirs := other.rpc(method, id, fmt.Sprintf(`"taskId":%q`, id))
					_, none := other.rpc(method, "tsk_none", `"taskId":"tsk_none"`)
					if theirs == nil || fmt.Sprint(theirs) != fmt.Sprint(none) {
						t.Errorf("%s of alice's task by %s: %v; of no task: %v", method, who, theirs, none)
					}
				}
			}
			if res, _ := alice.rpc("tasks/get", id, fmt.Sprintf(`"taskId":%q`, id)); res["status"] != "working" {
				t.Fatalf("before a decision: %v", res)
			}
			tt.decide(t, id, stored.Approval)
			res, rpcErr := alice.poll(id)
			if rpcErr != nil || res["status"] != tt.status || res["taskId"] != id || res["resultType"] != "complete" {
				t.Fatalf("poll: %v %v", res, rpcErr)
			}
			a, err := gw.approvals.Store().Get(t.Context(), stored.Approval)
			if err != nil {
				t.Fatal(err)
			}
			tt.check(t, res, a)
			if again, _ := alice.rpc("tasks/get", id, fmt.Sprintf(`"taskId":%q`, id)); fmt.Sprint(again["result"]) != fmt.Sprint(res["result"]) {
				t.Errorf("a later poll: %v", again)
			}
		})
	}
	t.Run("nobody decides in time", func(t *testing.T) {
		created, _ := alice.rpc("tools/call", "count", `"name":"count","arguments":{}`)
		id, _ := created["taskId"].(string)
		time.Sleep(1100 * time.Millisecond)
		res, rpcErr := alice.poll(id)
		result, _ := res["result"].(map[string]any)
		if rpcErr != nil || res["status"] != "completed" || !strings.Contains(fmt.Sprint(result["structuredContent"]), "CANCELLED") {
			t.Errorf("poll after the approval expired: %v %v", res, rpcErr)
		}
	})
	t.Run("a client that declares no tasks is answered APPROVAL_PENDING", func(t *testing.T) {
		body := `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"wipe","arguments":{"target":"plain"},` +
			`"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{},` +
			`"io.modelcontextprotocol/clientInfo":{"name":"raw","version":"1"}}}}`
		header := http.Header{"Mcp-Protocol-Version": {"2026-07-28"}, "Mcp-Method": {"tools/call"}, "Mcp-Name": {"wipe"},
			"Authorization": {"Bearer alice-key"}}
		status, b, _ := rawMCPType(t, alice.url, "", header, body)
		if status != http.StatusOK || !strings.Contains(b, "APPROVAL_PENDING") || strings.Contains(b, `"resultType":"task"`) {
			t.Errorf("answer %d %s", status, b)
		}
	})
	t.Run("an allowed call is answered at once", func(t *testing.T) {
		res, rpcErr := alice.rpc("tools/call", "echo", `"name":"echo","arguments":{"a":1}`)
		if rpcErr != nil || res["resultType"] != "complete" || res["taskId"] != nil {
			t.Errorf("echo: %v %v", res, rpcErr)
		}
	})
}

// storeOptions are a gateway's stores in one shared backend, and what
// closes them.
type storeOptions func(t *testing.T) (Options, func())

// sharedStores opens, for each backend, the stores every replica of a test
// shares: the state file of one data directory, Redis under a prefix of
// the test's own, PostgreSQL in a schema of its own.
func sharedStores(t *testing.T) map[string]storeOptions {
	dir := t.TempDir()
	prefix := fmt.Sprintf("interlock-test:%d:", time.Now().UnixNano())
	pg := testdb.Schema(t, "interlock_tasks_")
	return map[string]storeOptions{
		"the state file of one data directory": func(t *testing.T) (Options, func()) {
			st, err := sqlite.OpenState(t.Context(), filepath.Join(dir, "state.db"))
			if err != nil {
				t.Fatal(err)
			}
			return Options{Tokens: st.Tokens(), Budgets: st.Budgets(), Approvals: st.Approvals(), Grants: st.Approvals(), Tasks: st.Tasks(),
				ConsoleState: st.Console(), ConsoleSignal: st.Console()}, func() { st.Close() }
		},
		"redis": func(t *testing.T) (Options, func()) {
			st, err := redis.Open(t.Context(), "redis://127.0.0.1:6379/0", prefix)
			if err != nil {
				t.Fatal(err)
			}
			return Options{Tokens: st, Budgets: st.Budgets(), Approvals: st.Approvals(), Grants: st.Grants(), Tasks: st.Tasks(),
				ConsoleState: st.Console(), ConsoleSignal: st.Console()}, func() { st.Close() }
		},
		// PostgreSQL keeps approvals and tasks; the confirm tokens (a form's
		// request state among them) are in Redis, as gateways that share
		// PostgreSQL deploy them.
		"postgres": func(t *testing.T) (Options, func()) {
			st, err := postgres.OpenApprovals(t.Context(), pg)
			if err != nil {
				t.Fatal(err)
			}
			tokens, err := redis.Open(t.Context(), "redis://127.0.0.1:6379/0", prefix+"pg:")
			if err != nil {
				t.Fatal(err)
			}
			return Options{Approvals: st, Grants: st, Tasks: st.Tasks(), Tokens: tokens, Budgets: tokens.Budgets(),
				ConsoleState: st.Console(), ConsoleSignal: st.Console()}, func() { st.Close(); tokens.Close() }
		},
	}
}

// TestTaskAcrossReplicas: a task made on one gateway completes when its
// client polls two others that share the store at once, the call run
// once, and is still there for a gateway started after all stopped; in
// each store a task can live in.
func TestTaskAcrossReplicas(t *testing.T) {
	for name, open := range sharedStores(t) {
		t.Run(name, func(t *testing.T) {
			replica, log, stops := taskReplicas(t, taskRules, open)
			_, firstSrv := replica()
			second, secondSrv := replica()
			third, thirdSrv := replica()
			created := taskClient{t, firstSrv.URL + "/mcp", "alice-key"}.call("disk")
			id, _ := created["taskId"].(string)
			approveTask(t, second, third, id)
			// Two replicas are polled at once: one claims the task and runs it.
			polled := make(chan map[string]any, 2)
			for _, srv := range []*httptest.Server{secondSrv, thirdSrv} {
				go func() {
					res, _ := taskClient{t, srv.URL + "/mcp", "alice-key"}.poll(id)
					polled <- res
				}()
			}
			res := <-polled
			if other := <-polled; res["status"] != "completed" || fmt.Sprint(other["result"]) != fmt.Sprint(res["result"]) {
				t.Fatalf("polled on two replicas: %v and %v", res, other)
			}
			if runs := wipesRun(t, log); runs != 1 {
				t.Errorf("the call ran %d times on two replicas polled at once", runs)
			}
			for _, stop := range *stops {
				stop()
			}
			_, laterSrv := replica()
			later, rpcErr := taskClient{t, laterSrv.URL + "/mcp", "alice-key"}.poll(id)
			if rpcErr != nil || fmt.Sprint(later["result"]) != fmt.Sprint(res["result"]) {
				t.Errorf("after a restart: %v %v", later, rpcErr)
			}
		})
	}
}

// taskReplicas returns a function that starts one more gateway with rules
// on the stores open makes, all writing to one audit log, which it returns
// with the gateways' stops.
func taskReplicas(t *testing.T, rules string, open func(*testing.T) (Options, func())) (func() (*Gateway, *httptest.Server), *sqlite.Audit, *[]func()) {
	log, err := sqlite.OpenAudit(t.Context(), filepath.Join(t.TempDir(), "audit.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { log.Close() })
	stops := new([]func())
	return func() (*Gateway, *httptest.Server) {
		opts, closeStores := open(t)
		opts.Version, opts.Logger, opts.Getenv, opts.Audit = "test", quiet, testEnv("false"), log
		gw := newGateway(t, testConfig(t, rules, "fx"), opts)
		if err := gw.Start(t.Context()); err != nil {
			t.Fatal(err)
		}
		srv := httptest.NewServer(gw.Handler(false))
		stop := func() { srv.Close(); gw.Close(); closeStores() }
		*stops = append(*stops, stop)
		t.Cleanup(stop)
		return gw, srv
	}, log, stops
}

// wipesRun counts the wipes log records as run.
func wipesRun(t *testing.T, log *sqlite.Audit) int {
	runs := 0
	for rec, err := range log.Records(t.Context(), 1) {
		if err != nil {
			t.Fatal(err)
		}
		if rec.Tool == "wipe" && rec.Outcome == audit.OutcomeOK {
			runs++
		}
	}
	return runs
}

// TestTaskRequestsAnOutsiderSends: task requests a client could forge are
// answered with a JSON-RPC error that says what to fix and leaks nothing,
// and a task whose stored call was changed fails without running.
func TestTaskRequestsAnOutsiderSends(t *testing.T) {
	gw, alice := taskGateway(t, taskRules)
	for _, tt := range []struct{ name, method, params, says string }{
		{"no task id", "tasks/get", ``, "params.taskId"},
		{"a number for an id", "tasks/get", `"taskId":7`, "params.taskId"},
		{"a null id", "tasks/cancel", `"taskId":null`, "params.taskId"},
		{"an id of another shape", "tasks/get", `"taskId":"../../etc/passwd"`, "no task with this id"},
		{"a long id", "tasks/get", `"taskId":"` + strings.Repeat("x", 10000) + `"`, "no task with this id"},
		{"input for a task", "tasks/update", `"taskId":"tsk_none","inputResponses":{}`, "no task with this id"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var p struct {
				TaskID string `json:"taskId"`
			}
			_ = json.Unmarshal([]byte("{"+tt.params+"}"), &p)
			_, rpcErr := alice.rpc(tt.method, p.TaskID, tt.params)
			if msg := fmt.Sprint(rpcErr["message"]); rpcErr == nil || !strings.Contains(msg, tt.says) || rpcErr["code"] != float64(-32602) {
				t.Errorf("answer: %v", rpcErr)
			}
		})
	}
	t.Run("a changed call", func(t *testing.T) {
		created := alice.call("disk")
		id, _ := created["taskId"].(string)
		stored, err := gw.tasks.store.Get(t.Context(), id)
		if err != nil {
			t.Fatal(err)
		}
		stored.Call[len(stored.Call)-1] ^= 1
		if ok, err := gw.tasks.store.Update(t.Context(), stored); !ok || err != nil {
			t.Fatal(ok, err)
		}
		if _, err := gw.approvals.Decide(t.Context(), stored.Approval, interlock.Identity{Tenant: "acme", Principal: "bob"}, approval.Approve, ""); err != nil {
			t.Fatal(err)
		}
		res, _ := alice.poll(id)
		a, _ := gw.approvals.Store().Get(t.Context(), stored.Approval)
		if res["status"] != "failed" || strings.Contains(fmt.Sprint(res), "seal") || a.Consumed {
			t.Errorf("task %v; approval consumed %t", res, a.Consumed)
		}
	})
}

// TestApprovalAsTaskOverStdio: a client of 2026-07-28 on stdio gets its
// task, and polls it to its result, on the same stream.
func TestApprovalAsTaskOverStdio(t *testing.T) {
	f := testConfig(t, taskRules, "fx")
	gw := start(t, f, "false")
	in, out := stdioClient(t, gw)
	lines := bufio.NewScanner(out)
	lines.Buffer(make([]byte, 1<<20), 1<<20)
	id := 0
	rpc := func(method, params string) map[string]any {
		t.Helper()
		id++
		fmt.Fprintf(in, `{"jsonrpc":"2.0","id":%d,"method":%q,"params":{%s,%s}}`+"\n", id, method, params, latestMetaTasks)
		for lines.Scan() {
			var answer struct {
				ID     int            `json:"id"`
				Result map[string]any `json:"result"`
				Error  map[string]any `json:"error"`
			}
			if json.Unmarshal(lines.Bytes(), &answer) == nil && answer.ID == id {
				if answer.Error != nil {
					t.Fatalf("%s: %v", method, answer.Error)
				}
				return answer.Result
			}
		}
		t.Fatalf("%s: the stream ended: %v", method, lines.Err())
		return nil
	}
	created := rpc("tools/call", `"name":"wipe","arguments":{"target":"disk"}`)
	taskID, _ := created["taskId"].(string)
	if created["resultType"] != "task" || created["status"] != "working" {
		t.Fatalf("tools/call: %v", created)
	}
	approveTask(t, gw, gw, taskID)
	var res map[string]any
	for range 500 {
		if res = rpc("tasks/get", fmt.Sprintf(`"taskId":%q`, taskID)); res["status"] != "working" {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if result, _ := res["result"].(map[string]any); res["status"] != "completed" || !strings.Contains(fmt.Sprint(result["content"]), "wiped") {
		t.Errorf("tasks/get: %v", res)
	}
}

// TestApprovalAsTaskOfEarlierClients: a client of 2025-11-25 on an HTTP
// session is offered tasks in initialize and on the tools that may wait
// for approval; its call with params.task waits as a task it can get,
// list and wait on with tasks/result, which gives the tool's result once
// approved; another tenant's principal of the same name finds nothing.
func TestApprovalAsTaskOfEarlierClients(t *testing.T) {
	f := testConfig(t, taskRules, "fx")
	gw := start(t, f, "false")
	srv := httptest.NewServer(gw.Handler(false))
	// Closed after the sessions, whose streams it would wait for.
	t.Cleanup(srv.Close)
	url := srv.URL + MCPPath
	open := func(key string) *mcp.ClientSession {
		return dial(t, nil, url, key, &mcp.ClientSessionOptions{ProtocolVersion: protocolTasks})
	}
	rpc := func(cs *mcp.ClientSession, key, method, params string) (result, rpcErr map[string]any) {
		t.Helper()
		header := http.Header{"Authorization": {"Bearer " + key}, "Mcp-Protocol-Version": {protocolTasks}}
		return answerOf(t, url, cs.ID(), header, method, `{"jsonrpc":"2.0","id":5,"method":"`+method+`","params":{`+params+`}}`)
	}
	alice, other := open("alice-key"), open("other-alice-key")
	list, _ := rpc(alice, "alice-key", "tools/list", "")
	support := map[string]any{}
	for _, tool := range list["tools"].([]any) {
		tool := tool.(map[string]any)
		support[tool["name"].(string)] = tool["execution"]
	}
	if fmt.Sprint(support["wipe"]) != "map[taskSupport:optional]" || support["echo"] != nil {
		t.Errorf("execution of wipe %v, of echo %v", support["wipe"], support["echo"])
	}
	created, rpcErr := rpc(alice, "alice-key", "tools/call", `"name":"wipe","arguments":{"target":"disk"},"task":{"ttl":60000}`)
	tk, _ := created["task"].(map[string]any)
	id, _ := tk["taskId"].(string)
	if rpcErr != nil || tk["status"] != "working" || !strings.HasPrefix(id, "tsk_") {
		t.Fatalf("tools/call: %v %v", created, rpcErr)
	}
	if got, _ := rpc(alice, "alice-key", "tasks/get", `"taskId":"`+id+`"`); got["status"] != "working" || got["taskId"] != id {
		t.Errorf("tasks/get: %v", got)
	}
	if listed, _ := rpc(alice, "alice-key", "tasks/list", ""); !strings.Contains(fmt.Sprint(listed["tasks"]), id) {
		t.Errorf("tasks/list: %v", listed)
	}
	if listed, _ := rpc(other, "other-alice-key", "tasks/list", ""); strings.Contains(fmt.Sprint(listed), id) {
		t.Errorf("tasks/list of alice of tenant other: %v", listed)
	}
	for _, method := range []string{"tasks/get", "tasks/result", "tasks/cancel"} {
		_, theirs := rpc(other, "other-alice-key", method, `"taskId":"`+id+`"`)
		_, none := rpc(other, "other-alice-key", method, `"taskId":"tsk_none"`)
		if theirs == nil || fmt.Sprint(theirs) != fmt.Sprint(none) {
			t.Errorf("%s by alice of tenant other: %v; of no task: %v", method, theirs, none)
		}
	}
	approveTask(t, gw, gw, id)
	res, rpcErr := rpc(alice, "alice-key", "tasks/result", `"taskId":"`+id+`"`)
	if rpcErr != nil || !strings.Contains(fmt.Sprint(res["content"]), "wiped") || res["resultType"] != nil ||
		!strings.Contains(fmt.Sprint(res["_meta"]), id) {
		t.Errorf("tasks/result: %v %v", res, rpcErr)
	}
}

// TestTaskOfADrainingGateway: a gateway that drains claims no task, so a
// task it is polled for stays waiting, and another gateway on the store
// runs it.
func TestTaskOfADrainingGateway(t *testing.T) {
	open := sharedStores(t)["the state file of one data directory"]
	replica := func() (*Gateway, *httptest.Server) {
		opts, closeStores := open(t)
		opts.Version, opts.Logger, opts.Getenv = "test", quiet, testEnv("false")
		gw := newGateway(t, testConfig(t, taskRules, "fx"), opts)
		if err := gw.Start(t.Context()); err != nil {
			t.Fatal(err)
		}
		srv := httptest.NewServer(gw.Handler(false))
		t.Cleanup(func() { srv.Close(); gw.Close(); closeStores() })
		return gw, srv
	}
	draining, drainingSrv := replica()
	created := taskClient{t, drainingSrv.URL + "/mcp", "alice-key"}.call("disk")
	id, _ := created["taskId"].(string)
	approveTask(t, draining, draining, id)
	if err := draining.Drain(t.Context()); err != nil {
		t.Fatal(err)
	}
	if res, _ := (taskClient{t, drainingSrv.URL + "/mcp", "alice-key"}).rpc("tasks/get", id, fmt.Sprintf(`"taskId":%q`, id)); res["status"] != "working" {
		t.Fatalf("polled on the draining gateway: %v", res)
	}
	if now, _ := draining.tasks.store.Get(t.Context(), id); now.Claim != "" {
		t.Fatalf("the draining gateway claimed the task: %+v", now)
	}
	_, otherSrv := replica()
	if res, rpcErr := (taskClient{t, otherSrv.URL + "/mcp", "alice-key"}).poll(id); rpcErr != nil || res["status"] != "completed" {
		t.Errorf("polled on another gateway: %v %v", res, rpcErr)
	}
}

// approveTask has bob, of the tenant of task id as store holds it,
// approve the approval the task waits on, through approvals.
func approveTask(t *testing.T, store, approvals *Gateway, id string) {
	t.Helper()
	stored, err := store.tasks.store.Get(t.Context(), id)
	if err != nil {
		t.Fatalf("task %s: %v", id, err)
	}
	if _, err := approvals.approvals.Decide(t.Context(), stored.Approval, interlock.Identity{Tenant: stored.Tenant, Principal: "bob"}, approval.Approve, ""); err != nil {
		t.Fatal(err)
	}
}

// TestTaskFieldsOfEachGeneration: a task is written with the names each
// generation gives its time to live and poll interval (ttlMs and
// pollIntervalMs in the extension of 2026-07-28, ttl and pollInterval in
// 2025-11-25's tasks), the extension's with its result once completed,
// and 2025-11-25's failed when its result is an error.
func TestTaskFieldsOfEachGeneration(t *testing.T) {
	created := time.Date(2026, 11, 29, 0, 0, 0, 0, time.UTC)
	done := &task.Task{ID: "tsk_1", Status: task.Completed, Message: "ran", Result: json.RawMessage(`{"isError":true,"content":[]}`),
		CreatedAt: created, UpdatedAt: created.Add(time.Second), ExpiresAt: created.Add(time.Hour)}
	for _, tt := range []struct {
		name   string
		fields map[string]any
		want   string
	}{
		{"2026-07-28", taskFields(done), `{"createdAt":"2026-11-29T00:00:00Z","lastUpdatedAt":"2026-11-29T00:00:01Z","pollIntervalMs":2000,` +
			`"result":{"isError":true,"content":[]},"status":"completed","statusMessage":"ran","taskId":"tsk_1","ttlMs":3600000}`},
		{"2025-11-25", taskFieldsV1(done), `{"createdAt":"2026-11-29T00:00:00Z","lastUpdatedAt":"2026-11-29T00:00:01Z","pollInterval":2000,` +
			`"status":"failed","statusMessage":"ran","taskId":"tsk_1","ttl":3600000}`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			b, err := json.Marshal(tt.fields)
			if err != nil {
				t.Fatal(err)
			}
			if string(b) != tt.want {
				t.Errorf("got  %s\nwant %s", b, tt.want)
			}
		})
	}
}
