// Package task is what interlock keeps of an MCP task: a tools/call that
// its client, rather than calling again, waits on by polling tasks/get,
// because the call waits for a human approval. A task says who owns it
// (a tenant and a principal), what it runs (the call, sealed by the
// gateway), where it stands (its [Status] and message) and, once it ends,
// what it answered (the tool's result or a JSON-RPC error).
//
// Tasks are kept in a [Store] so that any replica of the gateway answers
// for a task another one made, and a task outlives a restart. Only its
// owner may see a task: the gateway checks [Task.OwnedBy] on every
// request; the store does not, and finds any task by its id.
package task

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"time"
	"unicode/utf8"
)

// Status is where a task stands, in MCP's words.
type Status string

// The statuses of a task. Completed, Failed and Cancelled are terminal.
const (
	Working       Status = "working"
	InputRequired Status = "input_required"
	Completed     Status = "completed"
	Failed        Status = "failed"
	Cancelled     Status = "cancelled"
)

// Task is one task. Its JSON form, written by [Encode], is what every
// store keeps.
type Task struct {
	ID        string `json:"id"`
	Tenant    string `json:"tenant"`
	Principal string `json:"principal"`
	Tool      string `json:"tool"`
	Upstream  string `json:"upstream,omitempty"`
	// Call is what the task runs, sealed by the gateway: opaque bytes to
	// the store.
	Call []byte `json:"call,omitempty"`
	// Approval is the id of the approval the task waits on, if any.
	Approval string `json:"approval,omitempty"`
	// UpstreamTask is the id of the task the upstream made of the call,
	// for a tool whose server runs tasks of its own: the gateway's task
	// stands for it, and each request about it is passed on with this id.
	UpstreamTask string `json:"upstream_task,omitempty"`
	// RunByGateway says the gateway made the call itself, for its caller,
	// once the task's approval was decided or its question answered: the
	// upstream's task was made on the link of the gateway's own session,
	// not of the caller's.
	RunByGateway bool   `json:"run_by_gateway,omitempty"`
	Status       Status `json:"status"`
	Message      string `json:"message,omitempty"`
	// Result is a tool's result and Error a JSON-RPC error object, each a
	// JSON value, once the task is terminal. The gateway answers with
	// them as the upstream wrote them, so a store keeps their bytes.
	Result json.RawMessage `json:"result,omitempty"`
	Error  json.RawMessage `json:"error,omitempty"`
	// Claim names who runs the task once one does; "" until then.
	Claim     string    `json:"claim,omitempty"`
	CreatedAt time.Time `json:"created_at"`
	UpdatedAt time.Time `json:"updated_at"`
	// ExpiresAt is when the task may be forgotten.
	ExpiresAt time.Time `json:"expires_at"`
	// Version counts the task's writes; Update compares it.
	Version int64 `json:"version"`
}

// Terminal reports whether the task has ended: completed, failed or
// cancelled.
func (t *Task) Terminal() bool {
	switch t.Status {
	case Completed, Failed, Cancelled:
		return true
	}
	return false
}

// OwnedBy reports whether tenant and principal own the task. A principal
// of the same name in another tenant is someone else.
func (t *Task) OwnedBy(tenant, principal string) bool {
	return t.Tenant == tenant && t.Principal == principal
}

// Live reports whether the task is kept at now: its ExpiresAt has not
// passed.
func (t *Task) Live(now time.Time) bool { return now.Before(t.ExpiresAt) }

// Newest orders tasks newest first: by CreatedAt, the later first, then
// by ID, for an order that does not change between reads. It is the
// order of [Store.List].
func Newest(a, b *Task) int {
	if c := b.CreatedAt.Compare(a.CreatedAt); c != 0 {
		return c
	}
	switch {
	case a.ID > b.ID:
		return -1
	case a.ID < b.ID:
		return 1
	}
	return 0
}

// NewID returns a random, URL-safe task id: "tsk_" and 16 characters.
func NewID() string {
	b := make([]byte, 12)
	if _, err := rand.Read(b); err != nil {
		panic(err)
	}
	return "tsk_" + base64.RawURLEncoding.EncodeToString(b)
}

// Errors of a task store.
var (
	// ErrUnknown is the error of a task there is none of, or that
	// expired.
	ErrUnknown = errors.New("no such task")
	ErrExists  = errors.New("a task with this id exists")
	// ErrNotJSON is the error of storing a task whose Result or Error is
	// not one JSON value in UTF-8.
	ErrNotJSON = errors.New("a task's result and error are JSON values")
)

// Store keeps tasks, found by id. [Memory] serves one process; packages
// sqlite, postgres and redis serve gateways that share them.
type Store interface {
	// Create stores t as a new task, with Version 1 (t.Version is set);
	// ErrExists when a live task has its ID, ErrNotJSON when its Result
	// or Error is not JSON.
	Create(ctx context.Context, t *Task) error
	// Get returns task id; ErrUnknown when there is none or it expired
	// (ExpiresAt passed).
	Get(ctx context.Context, id string) (*Task, error)
	// Update writes t in place of the stored task when the stored one's
	// Version equals t.Version, and sets t.Version to the next; it
	// reports false (nil error) when another write came first.
	// ErrUnknown when the task is gone (or expired), ErrNotJSON as for
	// Create. Of concurrent Updates from the same Version, exactly one
	// succeeds, across processes.
	Update(ctx context.Context, t *Task) (bool, error)
	// List returns the live tasks of tenant and principal, newest first
	// ([Newest]).
	List(ctx context.Context, tenant, principal string) ([]*Task, error)
}

// Encode returns t's stored form: its JSON, with Result and Error as
// written. json.Marshal would compact them and escape <, > and &, which
// changes a result the gateway answers with byte for byte; only the
// space around a value, which is no part of it, is left out.
func Encode(t *Task) ([]byte, error) {
	plain := *t
	plain.Result, plain.Error = nil, nil
	b, err := json.Marshal(&plain)
	if err != nil {
		return nil, fmt.Errorf("encoding task %s: %w", t.ID, err)
	}
	for _, f := range []struct {
		name  string
		value json.RawMessage
	}{{"result", t.Result}, {"error", t.Error}} {
		v := bytes.TrimSpace(f.value)
		if len(v) == 0 {
			continue
		}
		if !json.Valid(v) || !utf8.Valid(v) {
			return nil, fmt.Errorf("encoding task %s: its %s: %w", t.ID, f.name, ErrNotJSON)
		}
		b = append(b[:len(b)-1], `,"`+f.name+`":`...)
		b = append(append(b, v...), '}')
	}
	return b, nil
}

// Decode reads a task from its stored form.
func Decode(b []byte) (*Task, error) {
	t := new(Task)
	if err := json.Unmarshal(b, t); err != nil {
		return nil, fmt.Errorf("decoding a task: %w", err)
	}
	return t, nil
}
