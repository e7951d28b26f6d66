package gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/interlock-mcp/interlock"
	"github.com/interlock-mcp/interlock/task"
)

// A call of a client of 2026-07-28 that declared the tasks extension may
// be answered with input requests: a form the rule's elicit mode puts to
// a human, or a question the tool itself asked, which the gate relays.
// Such a call becomes a task that is input_required: tasks/get gives the
// input requests, and the client answers them with tasks/update. The
// answers are kept with the task's call, and the call runs again with
// them and the request state the answer asked them with, as a retried
// call would carry them, through the gate, as the task's owner. What that
// run answers moves the task on: completed with the tool's result, or
// input_required again, or working while it waits for an approval. The
// run is claimed like the run of an approved call, so one replica makes
// it. Token and flag modes answer at once, as the extension allows: their
// confirmation is the agent's next call, not an answer to a request.

// askedOf returns what res, a call's answer, asks of its client: its input
// requests and request state; false when it asks nothing.
func askedOf(res mcp.Result) (*mcp.CallToolResult, bool) {
	r, ok := res.(*mcp.CallToolResult)
	if !ok || r == nil || r.IsError || (len(r.InputRequests) == 0 && r.RequestState == "") {
		return nil, false
	}
	return r, true
}

// asking makes the task of a call of who's, p, whose answer asked is a
// request for input.
func (ts *tasks) asking(ctx context.Context, who interlock.Identity, p callParams, asked *mcp.CallToolResult) (*task.Task, error) {
	now := time.Now()
	t := &task.Task{ID: task.NewID(), Tenant: who.Tenant, Principal: who.Principal, Tool: p.Name,
		Status: task.InputRequired, Message: inputMessage(p.Name), CreatedAt: now, UpdatedAt: now, ExpiresAt: now.Add(taskTTL)}
	call := laterCall(p)
	if err := withAsked(&call, asked); err != nil {
		return nil, err
	}
	return t, ts.keep(ctx, t, call)
}

// inputMessage is a task's status message while it waits for input.
func inputMessage(tool string) string {
	return fmt.Sprintf("%s asks for input before it runs; answer the task's input requests with tasks/update.", tool)
}

// withAsked records in call what asked asks, and forgets earlier answers.
func withAsked(call *taskCall, asked *mcp.CallToolResult) error {
	b, err := json.Marshal(asked.InputRequests)
	if err != nil {
		return err
	}
	call.Asked, call.State, call.Answers = b, asked.RequestState, nil
	return nil
}

// callIn opens the call boxed in task t.
func (ts *tasks) callIn(t *task.Task) (taskCall, error) {
	var call taskCall
	plain, err := ts.sealer.Unbox(t.Call, []byte(t.ID))
	if err != nil {
		return call, fmt.Errorf("opening the call of task %s: %w", t.ID, err)
	}
	if err := json.Unmarshal(plain, &call); err != nil {
		return call, fmt.Errorf("reading the call of task %s: %w", t.ID, err)
	}
	return call, nil
}

// rebox boxes call into next, a new version of task t.
func (ts *tasks) rebox(next *task.Task, call taskCall) error {
	b, err := json.Marshal(call)
	if err != nil {
		return err
	}
	next.Call = ts.sealer.Box(b, []byte(next.ID))
	return nil
}

// withInput adds to fields, what the extension says of task t, the input
// requests it waits on, when it waits for input.
func (ts *tasks) withInput(fields map[string]any, t *task.Task) map[string]any {
	if t.Status != task.InputRequired {
		return fields
	}
	if call, err := ts.callIn(t); err == nil && call.Asked != nil {
		fields["inputRequests"] = call.Asked
	}
	return fields
}

// askAgain makes next, a task whose run asked for input again, wait for
// the answers to asked.
func (ts *tasks) askAgain(next *task.Task, asked *mcp.CallToolResult) *task.Task {
	call, err := ts.callIn(next)
	if err == nil {
		err = withAsked(&call, asked)
	}
	if err == nil {
		err = ts.rebox(next, call)
	}
	if err != nil {
		ts.log.Warn("keeping a task's input requests", "task", next.ID, "error", logText(err.Error()))
		next.Status, next.Message = task.Failed, "interlock could not keep what the call asked"
		next.Error, _ = json.Marshal(jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: next.Message})
		return next
	}
	next.Status, next.Message, next.Approval = task.InputRequired, inputMessage(next.Tool), ""
	return next
}

// answerInput serves tasks/update: the answers in params to the input
// requests task t waits on are kept with its call, and the call runs
// again with them, in the background; the update is answered at once.
func (l *lane) answerInput(ctx context.Context, t *task.Task, params json.RawMessage) (mcp.Result, error) {
	ts := l.g.tasks
	var p struct {
		InputResponses json.RawMessage `json:"inputResponses"`
	}
	if json.Unmarshal(params, &p) != nil || len(p.InputResponses) == 0 || string(p.InputResponses) == "null" {
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: "tasks/update carries the answers in params.inputResponses"}
	}
	var answers mcp.InputResponseMap
	if err := json.Unmarshal(p.InputResponses, &answers); err != nil {
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: "params.inputResponses are not answers to input requests"}
	}
	if t.Status != task.InputRequired {
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: "this task asks for no input now; get it to see where it stands"}
	}
	call, err := ts.callIn(t)
	if err != nil {
		l.g.log.Warn("answering a task's input requests", "task", t.ID, "error", logText(err.Error()))
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: "interlock could not read the task's call"}
	}
	if !l.g.inFlight.enter() {
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: "this gateway is stopping; send the answers again in a moment"}
	}
	run := *t
	call.Answers = p.InputResponses
	run.Status, run.Claim, run.UpdatedAt = task.Working, ts.claim, time.Now()
	run.Message = "The answers arrived; the call runs."
	if err := ts.rebox(&run, call); err != nil {
		l.g.inFlight.leave()
		return nil, err
	}
	if ok, err := ts.store.Update(ctx, &run); err != nil || !ok {
		// Answers of another update came first, or the store failed.
		l.g.inFlight.leave()
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: "the task changed while the answers came; get it to see where it stands"}
	}
	go func() {
		defer l.g.inFlight.leave()
		l.runTask(&run)
	}()
	return complete(map[string]any{})
}
