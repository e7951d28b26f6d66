// Package tasktest checks that a task store keeps what package task
// asks of one: every field as it was written (a result's bytes among
// them), one task an id, a write that came second refused, exactly one
// of racing updates, a principal's tasks apart from another's of the
// same name, and a task gone once it expired.
//
// Every check reads what one handle wrote through another, and every
// race is tried from two handles on one store, as two gateways sharing
// it would, so a store that keeps or serialises only within one process
// fails.
package tasktest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/interlock-mcp/interlock/internal/testproc"
	"github.com/interlock-mcp/interlock/task"
)

// Open returns two handles on one fresh, empty store (two gateways
// sharing it); they may be the same value for a store of one process.
type Open func(t *testing.T) (task.Store, task.Store)

// result is a tool's result as an upstream might write it: spaced, with
// characters json.Marshal would escape, and keys out of order.
const result = `{ "isError": false,
  "content": [ {"type": "text", "text": "<b>Refunded</b> 5,000.00 & closed \u00e9"} ] }`

// rpcError is a JSON-RPC error object as an upstream might write it.
const rpcError = `{"code": -32603, "message": "upstream <refund> failed", "data": {"retry": true}}`

// newTask returns a working task of tenant and principal, created at
// created and kept for ttl.
func newTask(id, tenant, principal string, created time.Time, ttl time.Duration) *task.Task {
	return &task.Task{ID: id, Tenant: tenant, Principal: principal, Tool: "refund_invoice", Status: task.Working,
		CreatedAt: created, UpdatedAt: created, ExpiresAt: created.Add(ttl)}
}

// differences lists the fields in which got differs from want: bytes
// compared as bytes, with nil and empty alike, and times to the
// millisecond. Every field is compared, those added later too.
func differences(got, want *task.Task) []string {
	var out []string
	g, w := reflect.ValueOf(got).Elem(), reflect.ValueOf(want).Elem()
	for _, f := range reflect.VisibleFields(g.Type()) {
		gv, wv := g.FieldByIndex(f.Index).Interface(), w.FieldByIndex(f.Index).Interface()
		same := reflect.DeepEqual(gv, wv)
		switch wv := wv.(type) {
		case []byte:
			same = bytes.Equal(gv.([]byte), wv)
		case json.RawMessage:
			same = bytes.Equal(gv.(json.RawMessage), wv)
		case time.Time:
			same = gv.(time.Time).Sub(wv).Abs() < time.Millisecond
		}
		if !same {
			out = append(out, fmt.Sprintf("%s = %s, want %s", f.Name, shown(gv), shown(wv)))
		}
	}
	return out
}

// shown is a field's value in a message: bytes quoted.
func shown(v any) string {
	switch v := v.(type) {
	case []byte:
		return fmt.Sprintf("%q", v)
	case json.RawMessage:
		return fmt.Sprintf("%q", v)
	}
	return fmt.Sprint(v)
}

// stored fails the test unless s holds want as task want.ID.
func stored(t *testing.T, s task.Store, want *task.Task) {
	t.Helper()
	got, err := s.Get(context.Background(), want.ID)
	if err != nil {
		t.Fatalf("get %s: %v", want.ID, err)
	}
	if diff := differences(got, want); len(diff) > 0 {
		t.Errorf("task %s as stored:\n%s", want.ID, strings.Join(diff, "\n"))
	}
}

// create stores a new task, failing the test if the store refuses it.
func create(t *testing.T, s task.Store, tk *task.Task) {
	t.Helper()
	if err := s.Create(context.Background(), tk); err != nil {
		t.Fatalf("create %s: %v", tk.ID, err)
	}
}

// ids returns the ids of tasks, in their order.
func ids(tasks []*task.Task) []string {
	var out []string
	for _, tk := range tasks {
		out = append(out, tk.ID)
	}
	return out
}

// Run runs the conformance tests.
func Run(t *testing.T, open Open) {
	ctx := context.Background()

	t.Run("every field round trips", func(t *testing.T) {
		// Times carry nanoseconds and a zone of their own, so a store
		// that drops either shows it.
		at := time.Date(2026, 3, 14, 15, 9, 26, 535897932, time.FixedZone("UTC+2", 2*3600))
		full := newTask("tsk_full", "acme", "alice", at, time.Hour)
		full.Upstream, full.Approval, full.Message, full.Claim = "billing", "apr_1", "Waiting for bob.", "gw-1"
		full.UpstreamTask, full.RunByGateway = "up-task-1", true
		full.Call = []byte{0, 1, 2, 0xff, '"', '\\', '\n'}
		full.Status, full.Result, full.Error = task.Completed, json.RawMessage(result), json.RawMessage(rpcError)
		full.UpdatedAt = at.Add(time.Second)
		full.ExpiresAt = time.Now().Add(time.Hour)
		bare := newTask("tsk_bare", "acme", "alice", time.Now(), time.Hour)
		empty := newTask("tsk_empty", "acme", "alice", time.Now(), time.Hour)
		empty.Call, empty.Result, empty.Error = []byte{}, json.RawMessage{}, json.RawMessage{}
		scalar := newTask("tsk_scalar", "acme", "alice", time.Now(), time.Hour)
		scalar.Status, scalar.Result, scalar.Error = task.Failed, json.RawMessage(`null`), json.RawMessage(`"x"`)
		s, other := open(t)
		for _, tk := range []*task.Task{full, bare, empty, scalar} {
			t.Run(tk.ID, func(t *testing.T) {
				tk.Version = 7
				create(t, s, tk)
				if tk.Version != 1 {
					t.Errorf("Create left Version %d, want 1", tk.Version)
				}
				stored(t, other, tk)
			})
		}
	})

	t.Run("an unknown id", func(t *testing.T) {
		s, _ := open(t)
		if got, err := s.Get(ctx, "tsk_missing"); !errors.Is(err, task.ErrUnknown) {
			t.Errorf("get: %+v %v", got, err)
		}
		tk := newTask("tsk_missing", "acme", "alice", time.Now(), time.Hour)
		tk.Version = 1
		if ok, err := s.Update(ctx, tk); ok || !errors.Is(err, task.ErrUnknown) {
			t.Errorf("update: %v %v", ok, err)
		}
		if got, err := s.List(ctx, "acme", "alice"); err != nil || len(got) != 0 {
			t.Errorf("list: %v %v", ids(got), err)
		}
	})

	t.Run("an id is one task's", func(t *testing.T) {
		s, other := open(t)
		first := newTask("tsk_dup", "acme", "alice", time.Now(), time.Hour)
		create(t, s, first)
		second := newTask("tsk_dup", "acme", "bob", time.Now(), time.Hour)
		second.Tool = "delete_invoice"
		if err := other.Create(ctx, second); !errors.Is(err, task.ErrExists) {
			t.Errorf("a second create: %v", err)
		}
		stored(t, s, first)
	})

	t.Run("an update is checked against the stored version", func(t *testing.T) {
		s, other := open(t)
		tk := newTask("tsk_u", "acme", "alice", time.Now(), time.Hour)
		create(t, s, tk)
		stale := *tk
		tk.Approval, tk.Status, tk.Message = "apr_u", task.InputRequired, "Waiting for bob."
		tk.UpdatedAt = tk.UpdatedAt.Add(time.Second)
		tests := []struct {
			name string
			with task.Store
			t    *task.Task
			ok   bool
			// version is the task's Version after the update.
			version int64
		}{
			{"from the stored version", other, tk, true, 2},
			{"from a stale version", s, &stale, false, 1},
			{"from a version not written yet", s, &task.Task{ID: "tsk_u", Tenant: "acme", Principal: "alice", Version: 5,
				ExpiresAt: time.Now().Add(time.Hour)}, false, 5},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				ok, err := tt.with.Update(ctx, tt.t)
				if ok != tt.ok || err != nil {
					t.Fatalf("update: %v %v, want %v", ok, err, tt.ok)
				}
				if tt.t.Version != tt.version {
					t.Errorf("Version = %d, want %d", tt.t.Version, tt.version)
				}
				stored(t, s, tk)
			})
		}
	})

	t.Run("of racing updates one wins", func(t *testing.T) {
		s, other := open(t)
		tk := newTask("tsk_race", "acme", "alice", time.Now(), time.Hour)
		create(t, s, tk)
		claims := make([]*task.Task, 40)
		won := testproc.AtOnce(t, len(claims), s, other, func(h task.Store, i int) (bool, error) {
			c := *tk
			c.Claim = fmt.Sprintf("gw-%d", i)
			claims[i] = &c
			return h.Update(ctx, &c)
		})
		if won != 1 {
			t.Fatalf("%d updates from one version won", won)
		}
		got, err := s.Get(ctx, tk.ID)
		if err != nil {
			t.Fatal(err)
		}
		i := slices.IndexFunc(claims, func(c *task.Task) bool { return c.Version == 2 })
		if i < 0 || got.Claim != claims[i].Claim || got.Version != 2 {
			t.Errorf("stored claim %q at version %d; the winner's is %+v", got.Claim, got.Version, claims[max(i, 0)])
		}
	})

	t.Run("a list is its owner's, newest first", func(t *testing.T) {
		s, other := open(t)
		base := time.Now()
		tasks := []*task.Task{
			newTask("tsk_a1", "acme", "alice", base, time.Hour),
			newTask("tsk_a3", "acme", "alice", base.Add(2*time.Second), time.Hour),
			newTask("tsk_a2", "acme", "alice", base.Add(time.Second), time.Hour),
			newTask("tsk_b1", "acme", "bob", base.Add(3*time.Second), time.Hour),
			newTask("tsk_g1", "globex", "alice", base.Add(4*time.Second), time.Hour),
		}
		for i, tk := range tasks {
			create(t, []task.Store{s, other}[i%2], tk)
		}
		tests := []struct {
			tenant, principal string
			want              []string
		}{
			{"acme", "alice", []string{"tsk_a3", "tsk_a2", "tsk_a1"}},
			{"acme", "bob", []string{"tsk_b1"}},
			{"globex", "alice", []string{"tsk_g1"}},
			{"globex", "bob", nil},
			{"acme", "carol", nil},
		}
		for _, tt := range tests {
			t.Run(tt.tenant+"/"+tt.principal, func(t *testing.T) {
				for _, h := range []task.Store{s, other} {
					got, err := h.List(ctx, tt.tenant, tt.principal)
					if err != nil || !slices.Equal(ids(got), tt.want) {
						t.Errorf("list: %v %v, want %v", ids(got), err, tt.want)
					}
					for _, tk := range got {
						if !tk.OwnedBy(tt.tenant, tt.principal) || tk.Version != 1 {
							t.Errorf("listed %+v", tk)
						}
					}
				}
			})
		}
	})

	t.Run("an update that changes the owner moves the task between lists", func(t *testing.T) {
		s, other := open(t)
		tk := newTask("tsk_moved", "acme", "alice", time.Now(), time.Hour)
		create(t, s, tk)
		tk.Principal = "bob"
		if ok, err := other.Update(ctx, tk); !ok || err != nil {
			t.Fatalf("update: %v %v", ok, err)
		}
		for principal, want := range map[string][]string{"alice": nil, "bob": {"tsk_moved"}} {
			if got, err := s.List(ctx, "acme", principal); err != nil || !slices.Equal(ids(got), want) {
				t.Errorf("list of %s: %v %v, want %v", principal, ids(got), err, want)
			}
		}
	})

	t.Run("an expired task is gone", func(t *testing.T) {
		s, other := open(t)
		short := newTask("tsk_short", "acme", "alice", time.Now(), 200*time.Millisecond)
		long := newTask("tsk_long", "acme", "alice", time.Now().Add(-time.Second), time.Hour)
		create(t, s, short)
		create(t, s, long)
		if got, err := other.List(ctx, "acme", "alice"); err != nil || !slices.Equal(ids(got), []string{"tsk_short", "tsk_long"}) {
			t.Fatalf("before expiry: %v %v", ids(got), err)
		}
		time.Sleep(time.Until(short.ExpiresAt) + 50*time.Millisecond)
		if got, err := other.Get(ctx, short.ID); !errors.Is(err, task.ErrUnknown) {
			t.Errorf("get after expiry: %+v %v", got, err)
		}
		if got, err := other.List(ctx, "acme", "alice"); err != nil || !slices.Equal(ids(got), []string{"tsk_long"}) {
			t.Errorf("list after expiry: %v %v", ids(got), err)
		}
		late := *short
		late.Status = task.Completed
		late.ExpiresAt = time.Now().Add(time.Hour)
		if ok, err := s.Update(ctx, &late); ok || !errors.Is(err, task.ErrUnknown) {
			t.Errorf("update after expiry: %v %v", ok, err)
		}
		// An expired task's id is free again.
		again := newTask(short.ID, "acme", "bob", time.Now(), time.Hour)
		create(t, other, again)
		stored(t, s, again)
	})

	t.Run("a terminal task keeps its answer as written", func(t *testing.T) {
		tests := []struct {
			status        task.Status
			result, error string
		}{
			{task.Completed, result, ""},
			{task.Failed, "", rpcError},
			{task.Cancelled, "", `{"code":-32800,"message":"cancelled"}`},
		}
		s, other := open(t)
		for _, tt := range tests {
			t.Run(string(tt.status), func(t *testing.T) {
				tk := newTask("tsk_"+string(tt.status), "acme", "alice", time.Now(), time.Hour)
				create(t, s, tk)
				tk.Status, tk.Claim = tt.status, "gw-1"
				if tt.result != "" {
					tk.Result = json.RawMessage(tt.result)
				}
				if tt.error != "" {
					tk.Error = json.RawMessage(tt.error)
				}
				if ok, err := other.Update(ctx, tk); !ok || err != nil {
					t.Fatalf("update: %v %v", ok, err)
				}
				got, err := s.Get(ctx, tk.ID)
				if err != nil {
					t.Fatal(err)
				}
				if !got.Terminal() || string(got.Result) != tt.result || string(got.Error) != tt.error {
					t.Errorf("stored %s with result %q and error %q; want %q and %q", got.Status, got.Result, got.Error, tt.result, tt.error)
				}
			})
		}
	})

	t.Run("a result that is not JSON is refused", func(t *testing.T) {
		s, other := open(t)
		bad := newTask("tsk_bad", "acme", "alice", time.Now(), time.Hour)
		bad.Result = json.RawMessage(`{"content": [`)
		if err := s.Create(ctx, bad); !errors.Is(err, task.ErrNotJSON) {
			t.Errorf("create: %v", err)
		}
		if _, err := other.Get(ctx, bad.ID); !errors.Is(err, task.ErrUnknown) {
			t.Errorf("a refused task was stored: %v", err)
		}
		tk := newTask("tsk_good", "acme", "alice", time.Now(), time.Hour)
		create(t, s, tk)
		before := *tk
		tk.Status, tk.Error = task.Failed, json.RawMessage("\xff\xfe")
		if ok, err := other.Update(ctx, tk); ok || !errors.Is(err, task.ErrNotJSON) {
			t.Errorf("update: %v %v", ok, err)
		}
		stored(t, s, &before)
	})
}
