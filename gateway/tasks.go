package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http"
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
}

// tasks are the gateway's tasks: their store and the keys their calls are
// boxed under.
type tasks struct {
	store  task.Store
	sealer *seal.Sealer
	// claim names this gateway in the tasks it runs.
	claim string
}

// newTasks are the tasks kept in store (in memory when nil), their calls
// boxed under the sealing keys; without keys, under a key of this process,
// as the gate seals its tokens (it warns of it).
func newTasks(store task.Store, keys [][]byte) (*tasks, error) {
	if store == nil {
		store = task.NewMemory()
	}
	if len(keys) == 0 {
		keys = [][]byte{seal.RandomKey()}
	}
	sealer, err := seal.New(keys...)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", interlock.SecretEnv, err)
	}
	return &tasks{store: store, sealer: sealer, claim: task.NewID()}, nil
}

// pendingApproval returns the body of res when it is the gate's
// APPROVAL_PENDING.
func pendingApproval(res mcp.Result) (interlock.Body, bool) {
	cr, ok := res.(*mcp.CallToolResult)
	if !ok || cr == nil || !cr.IsError {
		return interlock.Body{}, false
	}
	b := interlock.BodyOfResult(cr)
	return b, b.Code == interlock.CodeApprovalPending && b.ApprovalID != ""
}

// open makes the task of a call of who's, p, that waits for the approval
// body names.
func (ts *tasks) open(ctx context.Context, who interlock.Identity, p callParams, body interlock.Body) (*task.Task, error) {
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
	call, err := json.Marshal(taskCall{Name: p.Name, Arguments: p.Arguments, Meta: meta})
	if err != nil {
		return nil, err
	}
	now := time.Now()
	t := &task.Task{ID: task.NewID(), Tenant: who.Tenant, Principal: who.Principal, Tool: p.Name, Approval: body.ApprovalID,
		Status: task.Working, Message: waitingMessage(body), CreatedAt: now, UpdatedAt: now, ExpiresAt: now.Add(taskTTL)}
	t.Call = ts.sealer.Box(call, []byte(t.ID))
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

// created is the answer to a call that became task t: the task, with
// resultType "task".
func created(t *task.Task) (mcp.Result, error) {
	fields := taskFields(t)
	fields["resultType"] = "task"
	raw, err := json.Marshal(fields)
	if err != nil {
		return nil, err
	}
	return &verbatimResult{CallToolResult: &mcp.CallToolResult{}, raw: raw}, nil
}

// taskFields are what the extension says of task t: its id, status and
// times, and, once it ended, its result or error.
func taskFields(t *task.Task) map[string]any {
	f := map[string]any{
		"taskId":         t.ID,
		"status":         t.Status,
		"createdAt":      t.CreatedAt.UTC().Format(time.RFC3339Nano),
		"lastUpdatedAt":  t.UpdatedAt.UTC().Format(time.RFC3339Nano),
		"ttlMs":          t.ExpiresAt.Sub(t.CreatedAt).Milliseconds(),
		"pollIntervalMs": taskPoll.Milliseconds(),
	}
	if t.Message != "" {
		f["statusMessage"] = t.Message
	}
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
	ts := l.g.tasks
	var p taskParams
	if json.Unmarshal(params, &p) != nil || p.TaskID == "" {
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: method + " names its task in params.taskId"}
	}
	t, err := ts.store.Get(ctx, p.TaskID)
	if errors.Is(err, task.ErrUnknown) || (err == nil && !t.OwnedBy(who.Tenant, who.Principal)) {
		return nil, errNoTask
	}
	if err != nil {
		l.g.log.Warn("reading a task", "task", p.TaskID, "error", logText(err.Error()))
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: "interlock's task store cannot be reached; poll again in a moment"}
	}
	switch method {
	case "tasks/get":
		t = l.advance(ctx, t)
		return complete(taskFields(t))
	case "tasks/cancel":
		if err := l.cancelTask(ctx, who, t); err != nil {
			return nil, err
		}
		return complete(map[string]any{})
	}
	// tasks/update: interlock's tasks never ask for input.
	return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: "this task asks for no input"}
}

// complete is a result of the extension's methods: fields, with
// resultType "complete".
func complete(fields map[string]any) (mcp.Result, error) {
	fields["resultType"] = "complete"
	raw, err := json.Marshal(fields)
	if err != nil {
		return nil, err
	}
	return &verbatimResult{CallToolResult: &mcp.CallToolResult{}, raw: raw}, nil
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
	run := *t
	run.Claim, run.UpdatedAt = ts.claim, now
	run.Message = fmt.Sprintf("The approval %s was decided; the call runs.", t.Approval)
	if ok, err := ts.store.Update(ctx, &run); err != nil || !ok {
		// Another replica claimed it, or the store failed: the next poll
		// reads what became of it.
		return t
	}
	go l.runTask(&run)
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
	res, err := l.rerun(ctx, t)
	if body, pending := pendingApproval(res); pending {
		// The approval lapsed (approved, but not run in time) and the gate
		// asked for a new one: the task waits for that.
		ended.Approval, ended.Message = body.ApprovalID, waitingMessage(body)
		l.settle(ctx, t, &ended)
		return
	}
	if err == nil {
		if res, err = l.completed(res); err == nil {
			ended.Result, err = json.Marshal(res)
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
// middleware and the gate.
func (l *lane) rerun(ctx context.Context, t *task.Task) (mcp.Result, error) {
	plain, err := l.g.tasks.sealer.Unbox(t.Call, []byte(t.ID))
	if err != nil {
		return nil, fmt.Errorf("opening the call of task %s: %w", t.ID, err)
	}
	var call taskCall
	if err := json.Unmarshal(plain, &call); err != nil {
		return nil, fmt.Errorf("reading the call of task %s: %w", t.ID, err)
	}
	s := l.stateless()
	if s == nil {
		return nil, errors.New("the gateway is closing")
	}
	ctx = withState(ctx, func(st *requestState) {
		st.who, st.identified = interlock.Identity{Tenant: t.Tenant, Principal: t.Principal}, true
	})
	v := &verbatim{latest: true}
	ctx = withState(ctx, func(st *requestState) { st.verbatim = v })
	req := &mcp.CallToolRequest{Session: s.ss, Params: &mcp.CallToolParamsRaw{Name: call.Name, Arguments: call.Arguments, Meta: call.Meta}}
	res, err := l.chain(ctx, "tools/call", req)
	if _, pending := pendingApproval(res); pending {
		return res, err
	}
	return v.result(res, err)
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

// errTaskCall refuses a call that asks, as clients before 2026-07-28 do,
// to run as a task (params.task): interlock serves the tasks extension of
// 2026-07-28 only, and a call run as a plain one would answer with a
// result the client did not ask for.
var errTaskCall = &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams,
	Message: "interlock carries tasks as the 2026-07-28 extension (io.modelcontextprotocol/tasks), not the experimental tasks of earlier protocols; call the tool without \"task\""}

// asksTask reports whether a tools/call's params carry a task, as clients
// before 2026-07-28 ask for one.
func asksTask(params json.RawMessage) bool {
	var t struct {
		Task json.RawMessage `json:"task"`
	}
	return json.Unmarshal(params, &t) == nil && len(t.Task) > 0 && string(t.Task) != "null"
}
