package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/interlock-mcp/interlock"
	"github.com/interlock-mcp/interlock/task"
)

// An upstream may run tools as tasks of its own (2025-11-25's experimental
// tasks: the tool's definition says so in execution.taskSupport, as
// server-everything's simulate-research-query does). A client of
// 2025-11-25 that calls such a tool with params.task has its call decided
// by the gate as any other; a call the gate lets through is passed on with
// the client's params.task, over the child's link, and the upstream
// answers with the task it made. The gateway keeps a task of its own that
// stands for it: the client sees only the gateway's task id, owned by its
// identity as every task is, and each tasks/get, tasks/result and
// tasks/cancel it sends about it is passed on with the upstream's id and
// answered with the gateway's. Another identity gets the answer an unknown
// id gets, so one client can neither read nor cancel another's task,
// whatever the upstream's ids are. A question the upstream asks about its
// task (an elicitation during tasks/result) reaches the client whose
// tasks/result is in flight, with the gateway's id in place of the
// upstream's.
//
// The requests about a task go over the link's raw side (httplink.go): a
// child's connection, or a POST on an HTTP upstream's session. Not
// carried: tasks for clients of 2026-07-28, whose extension the upstreams
// that run tasks today do not speak.

// relatedTaskKey is the _meta key that ties a message to a task.
const relatedTaskKey = "io.modelcontextprotocol/related-task"

// upstreamTaskOf returns the members of the task an upstream answered a
// call with, when res is such an answer (a CreateTaskResult).
func upstreamTaskOf(res mcp.Result) (map[string]json.RawMessage, string, bool) {
	v, ok := res.(*verbatimResult)
	if !ok {
		return nil, "", false
	}
	var created struct {
		Task map[string]json.RawMessage `json:"task"`
	}
	if json.Unmarshal(v.raw, &created) != nil || created.Task == nil {
		return nil, "", false
	}
	var id string
	if json.Unmarshal(created.Task["taskId"], &id) != nil || id == "" {
		return nil, "", false
	}
	return created.Task, id, true
}

// adopt makes the gateway's task for the task, fields, that the upstream
// behind p's tool made of who's call, and returns the answer to the call:
// the upstream's task under the gateway's id.
func (ts *tasks) adopt(ctx context.Context, who interlock.Identity, p callParams, fields map[string]json.RawMessage, upstreamID string) (mcp.Result, error) {
	now := time.Now()
	t := &task.Task{ID: task.NewID(), Tenant: who.Tenant, Principal: who.Principal, Tool: p.Name, UpstreamTask: upstreamID,
		Status: task.Working, CreatedAt: now, UpdatedAt: now, ExpiresAt: now.Add(taskTTL)}
	readStatus(t, fields)
	if err := ts.store.Create(ctx, t); err != nil {
		ts.log.Warn("making a task", "tool", p.Name, "error", logText(err.Error()))
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: "interlock could not keep the task; call again in a moment"}
	}
	fields["taskId"], _ = json.Marshal(t.ID)
	return rawResult(map[string]any{"task": fields})
}

// readStatus sets t's status and message from the members of the
// upstream's task, when they name them.
func readStatus(t *task.Task, fields map[string]json.RawMessage) {
	var status task.Status
	if json.Unmarshal(fields["status"], &status) == nil && status != "" {
		t.Status = status
	}
	var message string
	if json.Unmarshal(fields["statusMessage"], &message) == nil {
		t.Message = message
	}
}

// passTask passes method, a request of the experimental tasks about t, a
// task the upstream made, on to the upstream with its id, on the link of
// the client session s, and returns the upstream's answer with the
// gateway's id in place of the upstream's.
func (l *lane) passTask(ctx context.Context, s *laneSession, extra *mcp.RequestExtra, t *task.Task, method string) (mcp.Result, error) {
	m := l.g.table().find(t.Tool)
	if m == nil {
		return nil, errNoTask
	}
	u := m.upstream
	params, _ := json.Marshal(map[string]string{"taskId": t.UpstreamTask})
	// The owner of the flight is the client's session, whose questions
	// about the task (during tasks/result) are asked on it. The link is
	// the one that made the task: the client's, or the gateway's own
	// session's when the gateway ran the call (see runTask).
	from := &mcp.ListToolsRequest{Session: s.ss, Extra: extra}
	link := sessionLink
	if t.RunByGateway {
		own := l.stateless()
		if own == nil {
			return nil, &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: "the gateway is closing; ask again in a moment"}
		}
		link = func(ctx context.Context, u *upstream, _ *inflight) (*mcp.ClientSession, error) {
			return u.linkFor(ctx, own.ss)
		}
	}
	var raw json.RawMessage
	err := u.forward(ctx, method, from, link, func(ctx context.Context, cs *mcp.ClientSession) error {
		u.flights.about(stateOf(ctx).flight, taskIDs{gateway: t.ID, upstream: t.UpstreamTask})
		var err error
		raw, err = u.rawLinkOf(cs).request(ctx, method, params)
		return err
	})
	if err != nil {
		if rpcErr, ok := errors.AsType[*jsonrpc.Error](err); ok {
			// The upstream's own answer about its task: its code; its
			// words only where the upstream passes its errors on, as for
			// a call (see upstream.failure).
			if passed := u.passed(err); passed != nil {
				return nil, passed
			}
			u.log().Warn("upstream answered "+method+" with an error", "upstream", u.cfg.Name, "task", t.ID,
				"code", rpcErr.Code, "error", logText(rpcErr.Message))
			return nil, &jsonrpc.Error{Code: rpcErr.Code, Message: fmt.Sprintf("the server behind %s answered %s with JSON-RPC error %d; "+
				"its message is in the gateway's log (upstream %s), not passed on", t.Tool, method, rpcErr.Code, u.cfg.Name)}
		}
		u.log().Warn("passing on "+method, "upstream", u.cfg.Name, "task", t.ID, "error", logText(err.Error()))
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: "the server behind " + t.Tool + " could not be asked about its task; ask again in a moment"}
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(raw, &fields); err != nil {
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: "the server behind " + t.Tool + " answered " + method + " with no object"}
	}
	ids := taskIDs{gateway: t.ID, upstream: t.UpstreamTask}
	if _, named := fields["taskId"]; named {
		fields["taskId"], _ = json.Marshal(t.ID)
		l.noteStatus(ctx, t, fields)
	}
	if meta, ok := fields["_meta"]; ok {
		fields["_meta"] = ids.inMeta(meta)
	}
	return &verbatimResult{CallToolResult: &mcp.CallToolResult{}, raw: objectBytes(fields)}, nil
}

// noteStatus keeps in t what the upstream said of its task, so that
// tasks/list tells it; a task that changed meanwhile keeps what it says.
func (l *lane) noteStatus(ctx context.Context, t *task.Task, fields map[string]json.RawMessage) {
	next := *t
	readStatus(&next, fields)
	if next.Status == t.Status && next.Message == t.Message {
		return
	}
	next.UpdatedAt = time.Now()
	if _, err := l.g.tasks.store.Update(ctx, &next); err != nil {
		l.g.log.Warn("keeping a task's status", "task", t.ID, "error", logText(err.Error()))
	}
}

// taskIDs are a task's id at the gateway and at its upstream.
type taskIDs struct{ gateway, upstream string }

// inMeta returns meta, a message's _meta, with the upstream's task id in
// its related task replaced by the gateway's.
func (ids taskIDs) inMeta(meta json.RawMessage) json.RawMessage {
	var fields map[string]json.RawMessage
	if json.Unmarshal(meta, &fields) != nil {
		return meta
	}
	var related struct {
		TaskID string `json:"taskId"`
	}
	if json.Unmarshal(fields[relatedTaskKey], &related) != nil || related.TaskID != ids.upstream {
		return meta
	}
	fields[relatedTaskKey], _ = json.Marshal(map[string]string{"taskId": ids.gateway})
	return objectBytes(fields)
}

// relatedTask is the id of the task a message's _meta ties it to.
func relatedTask(meta mcp.Meta) (string, bool) {
	related, _ := meta[relatedTaskKey].(map[string]any)
	id, ok := related["taskId"].(string)
	return id, ok && id != ""
}

// aboutTask returns meta, of a message the upstream sent during fl, with
// the upstream's task id replaced by the gateway's when fl is about a task
// and the message is tied to it.
func (fl *inflight) aboutTask(meta mcp.Meta) mcp.Meta {
	if fl == nil || fl.task == nil {
		return meta
	}
	if id, ok := relatedTask(meta); !ok || id != fl.task.upstream {
		return meta
	}
	out := maps.Clone(meta)
	out[relatedTaskKey] = map[string]any{"taskId": fl.task.gateway}
	return out
}
