package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/interlock-mcp/interlock"
	"github.com/interlock-mcp/interlock/approval"
	"github.com/interlock-mcp/interlock/gateway/internal/sdkrules"
	"github.com/interlock-mcp/interlock/seal"
	"github.com/interlock-mcp/interlock/task"
)

// An approval takes minutes or hours. A client of 2026-07-28 that declares
// MCP's tasks extension (io.modelcontextprotocol/tasks) in a call's _meta
// gets, when the call waits for approval, a task instead of
// APPROVAL_PENDING: it polls tasks/get and never calls again. Every other
// answer (a result, a refusal) is given at once, as to any call, which the
// extension allows.
//
// The task is kept in the store (package task), the call it runs boxed
// under the sealing keys, so any replica answers tasks/get and a task
// outlives a restart. The call runs when a poll finds its approval decided:
// the replica that claims the task (a compare-and-set on its version)
// runs it once more through the lane's middleware and the gate, as its
// owner, and the gate's answer is the task's result: the tool's result
// once approved (the gate consumes the approval exactly once), DECLINED
// once denied, CANCELLED once expired. A task is its owner's alone:
// another identity's tasks/get, tasks/update and tasks/cancel get the
// answer an unknown id gets.
//
// This file is the whole of tasks in the gateway: the extension's
// methods are served on the lane (lane.go takes them), beside the calls.

// tasksExtension names MCP's tasks extension.
const tasksExtension = "io.modelcontextprotocol/tasks"

// The terms of the tasks the gateway makes: how long one is kept, how
// often its client should poll, and how long a claimed run may take
// before the task is taken for lost (a replica stopped while it ran).
const (
	taskTTL      = 24 * time.Hour
	taskPoll     = 2 * time.Second
	taskRunLimit = 10 * time.Minute
)

// errNoTask is the answer to a task the caller does not own, or that there
// is none of: the same words for both.
var errNoTask = &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: "no task with this id"}

// wantsTask reports whether a request's _meta declares the tasks
// extension among its client's capabilities.
func wantsTask(meta map[string]any) bool {
	caps, _ := meta[mcp.MetaKeyClientCapabilities].(map[string]any)
	ext, _ := caps["extensions"].(map[string]any)
	_, ok := ext[tasksExtension]
	return ok
}

// taskCall is what a task runs, boxed in its Call.
type taskCall struct {
	Name      string          `json:"name"`
	Arguments json.RawMessage `json:"arguments,omitempty"`
	Meta      map[string]any  `json:"_meta,omitempty"`
	// Earlier says its client speaks a protocol before 2026-07-28, whose
	// results do not say they are complete.
	Earlier bool `json:"earlier,omitempty"`
	// Task is the client's params.task, for a tool whose upstream runs
	// tasks of its own: the call is passed on with it once approved.
	Task json.RawMessage `json:"task,omitempty"`
	// Asked and State are what the call's last answer asked of its client
	// (its input requests, and the request state that goes back with the
	// answers) while the task waits for input; Answers are the answers the
	// client sent with tasks/update, which the next run carries (see
	// tasks_input.go).
	Asked   json.RawMessage `json:"asked,omitempty"`
	State   string          `json:"state,omitempty"`
	Answers json.RawMessage `json:"answers,omitempty"`
}

// tasks are the gateway's tasks: their store and the keys their calls are
// boxed under.
type tasks struct {
	store  task.Store
	sealer *seal.Sealer
	log    *slog.Logger
	// claim names this gateway in the tasks it runs.
	claim string
}

// newTasks are the tasks kept in store (in memory when nil), their calls
// boxed by sealer.
func newTasks(store task.Store, sealer *seal.Sealer, log *slog.Logger) *tasks {
	if store == nil {
		store = task.NewMemory()
	}
	return &tasks{store: store, sealer: sealer, log: log, claim: task.NewID()}
}

// pendingApproval returns the body of res when it is the gate's
// APPROVAL_PENDING.
func pendingApproval(res mcp.Result) (interlock.Body, bool) {
	cr, ok := res.(*mcp.CallToolResult)
	if !ok || cr == nil || !cr.IsError {
		return interlock.Body{}, false
	}
	b, ours := interlock.GateBody(cr)
	return b, ours && b.Code == interlock.CodeApprovalPending && b.ApprovalID != ""
}

// drained reports whether res is the gateway's answer to a call that
// came as it began to stop: nothing ran.
func drained(res mcp.Result) bool {
	cr, ok := res.(*mcp.CallToolResult)
	if !ok || cr == nil {
		return false
	}
	b, ours := interlock.GateBody(cr)
	return ours && b.Message == interlock.BodyOf(errDraining).Message
}

// open makes the task of a call of who's, p, that waits for the approval
// body names.
func (ts *tasks) open(ctx context.Context, who interlock.Identity, p callParams, body interlock.Body) (*task.Task, error) {
	now := time.Now()
	t := &task.Task{ID: task.NewID(), Tenant: who.Tenant, Principal: who.Principal, Tool: p.Name, Approval: body.ApprovalID,
		Status: task.Working, Message: waitingMessage(body), CreatedAt: now, UpdatedAt: now, ExpiresAt: now.Add(taskTTL)}
	return t, ts.keep(ctx, t, laterCall(p))
}

// keep boxes call into t and stores t as a new task.
func (ts *tasks) keep(ctx context.Context, t *task.Task, call taskCall) error {
	b, err := json.Marshal(call)
	if err != nil {
		return err
	}
	t.Call = ts.sealer.Box(b, []byte(t.ID))
	return ts.store.Create(ctx, t)
}

// laterCall is what a task of the call p runs later.
func laterCall(p callParams) taskCall {
	meta := maps.Clone(p.Meta)
	// The call that runs later is a plain call: it must not open a task of
	// its own.
	if caps, ok := meta[mcp.MetaKeyClientCapabilities].(map[string]any); ok {
		caps = maps.Clone(caps)
		if ext, ok := caps["extensions"].(map[string]any); ok {
			ext = maps.Clone(ext)
			delete(ext, tasksExtension)
			caps["extensions"] = ext
		}
		meta[mcp.MetaKeyClientCapabilities] = caps
	}
	return taskCall{Name: p.Name, Arguments: p.Arguments, Meta: meta, Earlier: !p.latest, Task: p.upstreamTask}
}

// ended makes the task of a call of who's, p, that was answered at once
// with res or err: a client of 2025-11-25 that asked for a task gets one
// whatever the answer.
func (ts *tasks) ended(ctx context.Context, who interlock.Identity, p callParams, res mcp.Result, err error) (*task.Task, error) {
	now := time.Now()
	t := &task.Task{ID: task.NewID(), Tenant: who.Tenant, Principal: who.Principal, Tool: p.Name, Status: task.Completed,
		CreatedAt: now, UpdatedAt: now, ExpiresAt: now.Add(taskTTL)}
	if err == nil {
		t.Result, err = json.Marshal(res)
	}
	if err != nil {
		rpcErr, ok := err.(*jsonrpc.Error)
		if !ok {
			rpcErr = &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: "interlock could not complete the call"}
		}
		t.Status, t.Message, t.Result = task.Failed, rpcErr.Message, nil
		t.Error, _ = json.Marshal(rpcErr)
	}
	if err := ts.store.Create(ctx, t); err != nil {
		return nil, err
	}
	return t, nil
}

// waitingMessage is a task's status message while its approval waits.
func waitingMessage(body interlock.Body) string {
	msg := fmt.Sprintf("%s The task completes once it is decided (approval %s).", body.Message, body.ApprovalID)
	if body.ApprovalURL != "" {
		msg += " Approvers decide it at " + body.ApprovalURL + "."
	}
	return msg
}

// waiting makes the task of a call of a client of 2026-07-28 that
// declared the tasks extension, when its answer res is that it waits for
// approval; nil otherwise, and when the store cannot keep the task, so
// that the call is answered as it is.
func (ts *tasks) waiting(ctx context.Context, who interlock.Identity, p callParams, res mcp.Result) *task.Task {
	var t *task.Task
	var err error
	if body, pending := pendingApproval(res); pending {
		t, err = ts.open(ctx, who, p, body)
	} else if asked, ok := askedOf(res); ok {
		t, err = ts.asking(ctx, who, p, asked)
	} else {
		return nil
	}
	if err != nil {
		ts.log.Warn("making a task", "tool", p.Name, "error", logText(err.Error()))
		return nil
	}
	return t
}

// created is the answer to a call that became a task, whose fields are
// given: the task, with resultType "task".
func created(fields map[string]any) (mcp.Result, error) {
	fields["resultType"] = "task"
	return rawResult(fields)
}

// taskFields are what the extension says of task t: its id, status and
// times, and, once it ended, its result or error.
func taskFields(t *task.Task) map[string]any {
	f := taskState(t, t.Status, "ttlMs", "pollIntervalMs")
	switch t.Status {
	case task.Completed:
		f["result"] = t.Result
	case task.Failed:
		f["error"] = t.Error
	}
	return f
}

// taskParams are the params of tasks/get, tasks/update and tasks/cancel.
type taskParams struct {
	TaskID string `json:"taskId"`
}

// serveTask answers a request of the tasks extension (tasks/get,
// tasks/update, tasks/cancel) from who, on the lane l.
func (l *lane) serveTask(ctx context.Context, who interlock.Identity, method string, params json.RawMessage) (mcp.Result, error) {
	t, err := l.namedTask(ctx, who, method, params)
	if err != nil {
		return nil, err
	}
	switch method {
	case "tasks/get":
		t = l.advance(ctx, t)
		return complete(l.g.tasks.withInput(taskFields(t), t))
	case "tasks/cancel":
		if err := l.cancelTask(ctx, who, t); err != nil {
			return nil, err
		}
		return complete(map[string]any{})
	}
	return l.answerInput(ctx, t, params)
}

// complete is a result of the extension's methods: fields, with
// resultType "complete".
func complete(fields map[string]any) (mcp.Result, error) {
	fields["resultType"] = "complete"
	return rawResult(fields)
}

// advance moves task t on when a poll finds it can move: a task whose
// approval was decided is claimed by this gateway and run (in the
// background, so the poll answers at once), and one whose run was claimed
// too long ago is taken for lost. It returns the task as it stands.
func (l *lane) advance(ctx context.Context, t *task.Task) *task.Task {
	ts := l.g.tasks
	if t.Status != task.Working {
		return t
	}
	now := time.Now()
	if t.Claim != "" {
		if now.Sub(t.UpdatedAt) < taskRunLimit {
			return t
		}
		lost := *t
		lost.Status, lost.UpdatedAt = task.Failed, now
		lost.Message = "The gateway that ran this call stopped before it answered; the call may have run. Check before calling it again."
		lost.Error, _ = json.Marshal(jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: lost.Message})
		return l.settle(ctx, t, &lost)
	}
	a, err := l.g.approvals.Store().Get(ctx, t.Approval)
	if err != nil || a.State(now) == approval.Pending {
		// A store that fails now leaves the task waiting: the next poll
		// asks again.
		return t
	}
	// The run counts as a call in flight, so that a gateway that stops
	// lets it end; one that drains already claims nothing.
	if !l.g.inFlight.enter() {
		return t
	}
	run := *t
	run.Claim, run.UpdatedAt = ts.claim, now
	run.Message = fmt.Sprintf("The approval %s was decided; the call runs.", t.Approval)
	if ok, err := ts.store.Update(ctx, &run); err != nil || !ok {
		// Another replica claimed it, or the store failed: the next poll
		// reads what became of it.
		l.g.inFlight.leave()
		return t
	}
	go func() {
		defer l.g.inFlight.leave()
		l.runTask(&run)
	}()
	return &run
}

// settle writes next in place of t and returns what the store holds then.
func (l *lane) settle(ctx context.Context, t, next *task.Task) *task.Task {
	if ok, err := l.g.tasks.store.Update(ctx, next); err == nil && ok {
		return next
	}
	if now, err := l.g.tasks.store.Get(ctx, t.ID); err == nil {
		return now
	}
	return t
}

// runTask runs the call of task t, which this gateway claimed, as its
// owner, and stores its outcome.
func (l *lane) runTask(t *task.Task) {
	ctx := context.WithoutCancel(l.g.life)
	ended := *t
	ended.Claim, ended.UpdatedAt = "", time.Now()
	res, earlier, err := l.rerun(ctx, t)
	if drained(res) {
		// The gateway began to stop before the call reached the gate:
		// nothing ran, and a poll of another gateway runs it.
		ended.Message = t.Message
		l.settle(ctx, t, &ended)
		return
	}
	if body, pending := pendingApproval(res); pending {
		// The approval lapsed (approved, but not run in time) and the gate
		// asked for a new one: the task waits for that.
		ended.Approval, ended.Message = body.ApprovalID, waitingMessage(body)
		l.settle(ctx, t, &ended)
		return
	}
	if asked, ok := askedOf(res); ok && err == nil {
		// The run asked its client something again: the task waits for
		// the answers.
		l.settle(ctx, t, l.g.tasks.askAgain(&ended, asked))
		return
	}
	if fields, id, made := upstreamTaskOf(res); made && err == nil {
		// The upstream made a task of the approved call: this task stands
		// for it from now on (see tasks_upstream.go).
		ended.UpstreamTask, ended.RunByGateway, ended.Message = id, true, ""
		readStatus(&ended, fields)
		l.settle(ctx, t, &ended)
		return
	}
	if err == nil {
		if res, err = l.completed(res); err == nil {
			ended.Result, err = json.Marshal(res)
		}
		if raw, ok := sdkrules.Earlier(ended.Result); ok && earlier && err == nil {
			ended.Result = raw
		}
	}
	if err != nil {
		var rpcErr *jsonrpc.Error
		if !errors.As(err, &rpcErr) {
			l.g.log.Warn("a task's call failed", "task", t.ID, "tool", t.Tool, "error", logText(err.Error()))
			rpcErr = &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: "interlock could not complete the call"}
		}
		ended.Status, ended.Message, ended.Result = task.Failed, rpcErr.Message, nil
		ended.Error, _ = json.Marshal(rpcErr)
	} else {
		ended.Status, ended.Message = task.Completed, ""
	}
	l.settle(ctx, t, &ended)
}

// rerun makes task t's call again, as its owner, through the lane's
// middleware and the gate; earlier says the task's client speaks a
// protocol before 2026-07-28.
func (l *lane) rerun(ctx context.Context, t *task.Task) (res mcp.Result, earlier bool, err error) {
	call, err := l.g.tasks.callIn(t)
	if err != nil {
		return nil, false, err
	}
	s := l.stateless()
	if s == nil {
		return nil, call.Earlier, errors.New("the gateway is closing")
	}
	ctx = withState(ctx, func(st *requestState) {
		st.who, st.identified = interlock.Identity{Tenant: t.Tenant, Principal: t.Principal}, true
	})
	v := &verbatim{latest: true}
	if call.Task != nil {
		// Passed on with its task, over a link of the experimental tasks.
		v = &verbatim{task: call.Task}
	}
	ctx = withState(ctx, func(st *requestState) { st.verbatim = v })
	req := &mcp.CallToolRequest{Session: s.ss, Params: &mcp.CallToolParamsRaw{Name: call.Name, Arguments: call.Arguments, Meta: call.Meta}}
	if call.Answers != nil {
		// The run after tasks/update: the answers go with the state the
		// last answer asked them with, as a retried call carries them.
		if err := json.Unmarshal(call.Answers, &req.Params.InputResponses); err != nil {
			return nil, call.Earlier, fmt.Errorf("reading the answers of task %s: %w", t.ID, err)
		}
		req.Params.RequestState = call.State
	}
	res, err = l.chain(ctx, "tools/call", req)
	if _, pending := pendingApproval(res); pending {
		return res, call.Earlier, err
	}
	res, err = v.result(res, err)
	return res, call.Earlier, err
}

// cancelTask cancels task t for its owner who: a task still waiting has
// its approval withdrawn; one that runs or ended stays as it is, since
// its call may already have run.
func (l *lane) cancelTask(ctx context.Context, who interlock.Identity, t *task.Task) error {
	if t.Terminal() {
		return &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: fmt.Sprintf("the task has ended (%s) and cannot be cancelled", t.Status)}
	}
	if t.Claim != "" {
		return &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: "the task's call is running and cannot be cancelled"}
	}
	if _, err := l.g.approvals.Withdraw(ctx, t.Approval, who); err != nil && !errors.Is(err, approval.ErrAlreadyDecided) {
		l.g.log.Warn("withdrawing a task's approval", "task", t.ID, "approval", t.Approval, "error", logText(err.Error()))
		return &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: "interlock could not withdraw the task's approval; cancel again in a moment"}
	}
	cancelled := *t
	cancelled.Status, cancelled.UpdatedAt = task.Cancelled, time.Now()
	cancelled.Message = fmt.Sprintf("Cancelled by its caller; the approval %s was withdrawn and the call did not run.", t.Approval)
	if now := l.settle(ctx, t, &cancelled); now.Status != task.Cancelled {
		return &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: fmt.Sprintf("the task moved on (%s) and was not cancelled", now.Status)}
	}
	return nil
}

// taskMethods are the extension's methods the lane serves.
var taskMethods = map[string]bool{"tasks/get": true, "tasks/update": true, "tasks/cancel": true}

// takesTask reports whether the lane serves m, a request of the tasks
// extension from a client of 2026-07-28 that names itself in _meta as that
// protocol requires.
func (l *lane) takesTask(m rpcMessage) bool {
	if !taskMethods[m.Method] || len(m.ID) == 0 || laneOff.Load() {
		return false
	}
	var p struct {
		Meta map[string]any `json:"_meta"`
	}
	return json.Unmarshal(m.Params, &p) == nil && sdkrules.LatestMeta(p.Meta)
}

// taskHeaders reports whether the headers of m, a request of the tasks
// extension over streamable HTTP, are those 2026-07-28 requires: that
// version, the method, and, in Mcp-Name, the task's id.
func taskHeaders(h http.Header, m rpcMessage) bool {
	var p taskParams
	_ = json.Unmarshal(m.Params, &p)
	return h.Get(sdkrules.ProtocolVersionHeader) == sdkrules.Protocol20260728 && h.Get(sdkrules.MethodHeader) == m.Method &&
		h.Get(sdkrules.NameHeader) == p.TaskID
}

// answerTask serves m, a request takesTask took, and writes its answer to
// out.
func (l *lane) answerTask(ctx context.Context, s *laneSession, m rpcMessage, extra *mcp.RequestExtra, out laneOut) {
	who := identify(ctx, &mcp.CallToolRequest{Extra: extra})
	res, err := l.serveTask(ctx, who, m.Method, m.Params)
	(&laneStream{s: s, out: out}).answer(m.ID, res, err)
}

// errTaskCall refuses a call that asks to run as a task (params.task) where
// interlock makes no task of it: a client of a protocol before 2025-11-25,
// or of 2026-07-28, which declares the tasks extension instead. A call run
// as a plain one would answer with a result the client did not ask for.
var errTaskCall = &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams,
	Message: "interlock does not carry task-augmented tool calls (params.task) of this protocol version: a client of 2025-11-25 may send them, one of 2026-07-28 declares the tasks extension (io.modelcontextprotocol/tasks) instead; call the tool without \"task\""}

// upstreamTasks reports whether the server behind the tool name says how
// it runs the tool as a task of its own.
func (g *Gateway) upstreamTasks(name string) bool {
	m := g.table().find(name)
	if m == nil {
		return false
	}
	_, own := m.upstream.extras.of(strings.TrimPrefix(name, m.upstream.cfg.Prefix))["execution"]
	return own
}

// asksTask reports whether a tools/call's params carry a task, as clients
// before 2026-07-28 ask for one.
func asksTask(params json.RawMessage) bool {
	_, asks := taskOf(params)
	return asks
}

// taskOf returns a tools/call's params.task, as its client wrote it.
func taskOf(params json.RawMessage) (json.RawMessage, bool) {
	// Most calls ask for none: a member named task needs those four
	// letters, or escapes that spell them.
	if !bytes.Contains(params, []byte("task")) && bytes.IndexByte(params, '\\') < 0 {
		return nil, false
	}
	var t struct {
		Task json.RawMessage `json:"task"`
	}
	if json.Unmarshal(params, &t) != nil || len(t.Task) == 0 || string(t.Task) == "null" {
		return nil, false
	}
	return t.Task, true
}

// Clients of 2025-11-25 ask for a task as that protocol's experimental
// tasks do: params.task in the call, the tasks capability in initialize,
// and tasks/get, tasks/result (which waits for the end), tasks/list and
// tasks/cancel on their session. They get the same tasks, in that
// protocol's words: a task is "failed" when its tool's result is an
// error, and tasks/result gives the tool's result itself. Earlier
// protocols have no tasks.

// protocolTasks is the first protocol with the experimental tasks.
const protocolTasks = "2025-11-25"

// sessionTasks reports whether the client of ss speaks the experimental
// tasks: it initialized with 2025-11-25.
func sessionTasks(ss *mcp.ServerSession) bool {
	ip := ss.InitializeParams()
	return ip != nil && ip.ProtocolVersion >= protocolTasks && ip.ProtocolVersion < protocolNew
}

// tasksCapability is the tasks capability of 2025-11-25, as interlock
// offers it: tasks/list, tasks/cancel, and tools/call as a task.
var tasksCapability = json.RawMessage(`{"list":{},"cancel":{},"requests":{"tools":{"call":{}}}}`)

// initializeWithTasks is an initialize result that offers the tasks
// capability, which go-sdk's ServerCapabilities has no field for.
type initializeWithTasks struct{ *mcp.InitializeResult }

func (r *initializeWithTasks) MarshalJSON() ([]byte, error) {
	fields, err := resultFields(r.InitializeResult)
	if err != nil {
		return nil, err
	}
	caps := map[string]json.RawMessage{}
	if c, ok := fields["capabilities"]; ok {
		if err := json.Unmarshal(c, &caps); err != nil {
			return nil, err
		}
	}
	caps["tasks"] = tasksCapability
	if fields["capabilities"], err = json.Marshal(caps); err != nil {
		return nil, err
	}
	return json.Marshal(fields)
}

// withTasks offers the tasks capability in r when its client speaks them.
func withTasks(r *mcp.InitializeResult) mcp.Result {
	if r.ProtocolVersion < protocolTasks || r.ProtocolVersion >= protocolNew {
		return r
	}
	return &initializeWithTasks{r}
}

// taskMethodsV1 are the methods of the experimental tasks the lane serves.
var taskMethodsV1 = map[string]bool{"tasks/get": true, "tasks/result": true, "tasks/list": true, "tasks/cancel": true}

// takesTaskV1 reports whether the lane serves m, a request of the
// experimental tasks from the client of session s.
func (l *lane) takesTaskV1(s *laneSession, m rpcMessage) bool {
	return taskMethodsV1[m.Method] && len(m.ID) > 0 && !laneOff.Load() && s != nil && sessionTasks(s.ss)
}

// answerTaskV1 serves m, a request takesTaskV1 took, and writes its answer
// to out.
func (l *lane) answerTaskV1(ctx context.Context, s *laneSession, m rpcMessage, extra *mcp.RequestExtra, out laneOut) {
	who := identify(ctx, &mcp.CallToolRequest{Extra: extra})
	st := &laneStream{s: s, out: out}
	// What the upstream asks about its own task during the request
	// travels on the request's stream.
	ctx = withState(ctx, func(rs *requestState) { rs.lane = st })
	res, err := l.serveTaskV1(ctx, s, extra, who, m.Method, m.Params)
	st.answer(m.ID, res, err)
}

// serveTaskV1 answers a request of the experimental tasks from who, a
// client of session s.
func (l *lane) serveTaskV1(ctx context.Context, s *laneSession, extra *mcp.RequestExtra, who interlock.Identity, method string, params json.RawMessage) (mcp.Result, error) {
	ts := l.g.tasks
	if method == "tasks/list" {
		list, err := ts.store.List(ctx, who.Tenant, who.Principal)
		if err != nil {
			return nil, &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: "interlock's task store cannot be reached; list again in a moment"}
		}
		tasks := make([]map[string]any, len(list))
		for i, t := range list {
			tasks[i] = taskFieldsV1(t)
		}
		return rawResult(map[string]any{"tasks": tasks})
	}
	t, err := l.namedTask(ctx, who, method, params)
	if err != nil {
		return nil, err
	}
	if t.UpstreamTask != "" {
		return l.passTask(ctx, s, extra, t, method)
	}
	switch method {
	case "tasks/get":
		return rawResult(taskFieldsV1(l.advance(ctx, t)))
	case "tasks/cancel":
		if err := l.cancelTask(ctx, who, t); err != nil {
			return nil, err
		}
		if t, err = ts.store.Get(ctx, t.ID); err != nil {
			return nil, errNoTask
		}
		return rawResult(taskFieldsV1(t))
	}
	return l.taskResultV1(ctx, t)
}

// namedTask returns the task a request of method names in its params,
// when who owns it; errNoTask when there is no such task or another owns
// it.
func (l *lane) namedTask(ctx context.Context, who interlock.Identity, method string, params json.RawMessage) (*task.Task, error) {
	var p taskParams
	if json.Unmarshal(params, &p) != nil || p.TaskID == "" {
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: method + " names its task in params.taskId"}
	}
	t, err := l.g.tasks.store.Get(ctx, p.TaskID)
	if errors.Is(err, task.ErrUnknown) || (err == nil && !t.OwnedBy(who.Tenant, who.Principal)) {
		return nil, errNoTask
	}
	if err != nil {
		l.g.log.Warn("reading a task", "task", p.TaskID, "error", logText(err.Error()))
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: "interlock's task store cannot be reached; ask again in a moment"}
	}
	return t, nil
}

// taskResultV1 waits, within ctx, for task t to end, and gives its
// tool's result, or its error.
func (l *lane) taskResultV1(ctx context.Context, t *task.Task) (mcp.Result, error) {
	for {
		if t = l.advance(ctx, t); t.Terminal() {
			break
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(taskPoll / 4):
		}
		now, err := l.g.tasks.store.Get(ctx, t.ID)
		if err != nil {
			return nil, errNoTask
		}
		t = now
	}
	switch t.Status {
	case task.Completed:
		var fields map[string]any
		if err := json.Unmarshal(t.Result, &fields); err != nil {
			return nil, &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: "interlock could not read the task's result"}
		}
		meta, _ := fields["_meta"].(map[string]any)
		if meta == nil {
			meta = map[string]any{}
		}
		meta["io.modelcontextprotocol/related-task"] = map[string]any{"taskId": t.ID}
		fields["_meta"] = meta
		return rawResult(fields)
	case task.Failed:
		rpcErr := &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: t.Message}
		_ = json.Unmarshal(t.Error, rpcErr)
		return nil, rpcErr
	}
	return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: "the task was cancelled: " + t.Message}
}

// rawResult is fields as a result.
func rawResult(fields map[string]any) (mcp.Result, error) {
	raw, err := json.Marshal(fields)
	if err != nil {
		return nil, err
	}
	return &verbatimResult{CallToolResult: &mcp.CallToolResult{}, raw: raw}, nil
}

// taskFieldsV1 are what the experimental tasks say of task t.
func taskFieldsV1(t *task.Task) map[string]any {
	status := t.Status
	var result struct {
		IsError bool `json:"isError"`
	}
	if status == task.Completed && json.Unmarshal(t.Result, &result) == nil && result.IsError {
		status = task.Failed
	}
	return taskState(t, status, "ttl", "pollInterval")
}

// taskState are the fields both generations give a task (its id, status,
// message, times), its time to live and poll interval named ttl and poll
// as the generation names them.
func taskState(t *task.Task, status task.Status, ttl, poll string) map[string]any {
	f := map[string]any{
		"taskId":        t.ID,
		"status":        status,
		"createdAt":     t.CreatedAt.UTC().Format(time.RFC3339Nano),
		"lastUpdatedAt": t.UpdatedAt.UTC().Format(time.RFC3339Nano),
		ttl:             t.ExpiresAt.Sub(t.CreatedAt).Milliseconds(),
		poll:            taskPoll.Milliseconds(),
	}
	if t.Message != "" {
		f["statusMessage"] = t.Message
	}
	return f
}

// created is the answer to a call of a client of 2025-11-25 that asked
// for a task: the task, which waits when the call waits for approval and
// holds the call's answer otherwise.
func (ts *tasks) created(ctx context.Context, who interlock.Identity, p callParams, res mcp.Result, err error) (mcp.Result, error) {
	var t *task.Task
	var terr error
	if body, pending := pendingApproval(res); pending {
		t, terr = ts.open(ctx, who, p, body)
	} else {
		t, terr = ts.ended(ctx, who, p, res, err)
	}
	if terr != nil {
		ts.log.Warn("making a task", "tool", p.Name, "error", logText(terr.Error()))
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: "interlock could not keep the task; call again in a moment"}
	}
	return rawResult(map[string]any{"task": taskFieldsV1(t)})
}
