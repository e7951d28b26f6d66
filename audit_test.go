package interlock

import (
	"context"
	"encoding/json"
	"errors"
	"iter"
	"strings"
	"sync"
	"testing"
	"testing/synctest"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/interlock-mcp/interlock/audit"
)

// memoryAudit is an audit log in a slice, stored as a store would: as the
// encoded bytes.
type memoryAudit struct {
	mu      sync.Mutex
	stored  [][]byte
	durable []bool
	prev    string
	fail    error
	// honorsCtx makes Append fail on a context that is done, as a store
	// over the network does.
	honorsCtx bool
}

func (m *memoryAudit) Append(ctx context.Context, durable bool, recs ...*audit.Record) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.fail != nil {
		return m.fail
	}
	if m.honorsCtx && ctx.Err() != nil {
		return ctx.Err()
	}
	for _, r := range recs {
		b, err := r.Link(int64(len(m.stored)+1), m.prev)
		if err != nil {
			return err
		}
		m.stored, m.durable, m.prev = append(m.stored, b), append(m.durable, durable), r.Hash
	}
	return nil
}

func (m *memoryAudit) Records(context.Context, int64) iter.Seq2[*audit.Record, error] {
	return func(yield func(*audit.Record, error) bool) {
		m.mu.Lock()
		stored := append([][]byte(nil), m.stored...)
		m.mu.Unlock()
		for _, b := range stored {
			if !yield(audit.Decode(b)) {
				return
			}
		}
	}
}

// trailOf is the audit trail as decision/outcome pairs.
func (m *memoryAudit) trailOf(t *testing.T) []string {
	t.Helper()
	var out []string
	for r, err := range m.Records(context.Background(), 1) {
		if err != nil {
			t.Fatal(err)
		}
		s := r.Decision + "/" + r.Outcome
		if r.ConfirmedBy != "" {
			s += " by " + r.ConfirmedBy
		}
		out = append(out, s)
	}
	if _, err := audit.Verify(m.Records(context.Background(), 1)); err != nil {
		t.Errorf("the chain does not verify: %v", err)
	}
	return out
}

func TestAuditTrailOfEachMode(t *testing.T) {
	const args = `{"customer_id":"acct_9931","password":"hunter2"}`
	ok := func(context.Context, json.RawMessage) (*mcp.CallToolResult, error) {
		return &mcp.CallToolResult{Content: []mcp.Content{}}, nil
	}
	failing := func(context.Context, json.RawMessage) (*mcp.CallToolResult, error) {
		return &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: "boom"}}}, nil
	}
	type step struct {
		args string
		run  Runner
	}
	tests := []struct {
		name   string
		d      Decision
		dryRun string
		steps  []step // a step's args may name <TOKEN>, the last confirm token
		want   []string
	}{
		{"allow", Decision{Mode: ModeAllow}, "false", []step{{args, ok}}, []string{"allowed/ok"}},
		{"allow, the tool fails", Decision{Mode: ModeAllow}, "false", []step{{args, failing}}, []string{"allowed/tool_error"}},
		{"deny", Decision{Mode: ModeDeny}, "false", []step{{args, ok}}, []string{"denied/TOOL_NOT_ALLOWED"}},
		{"flag under dry run", Decision{Mode: ModeFlag}, "", []step{{`{"customer_id":"a","__confirm":true}`, ok}}, []string{"previewed/DRY_RUN_PREVIEW"}},
		{"flag", Decision{Mode: ModeFlag}, "false", []step{{`{"customer_id":"a","__confirm":true}`, ok}},
			[]string{"confirmed/ by flag", "confirmed/ok by flag"}},
		{"token", Decision{Mode: ModeToken}, "false", []step{{args, ok}, {withToken(args, "<TOKEN>"), ok}},
			[]string{"asked/CONFIRMATION_REQUIRED", "confirmed/ by token", "confirmed/ok by token"}},
		{"token, other arguments", Decision{Mode: ModeToken}, "false", []step{{args, ok}, {withToken(`{"customer_id":"b"}`, "<TOKEN>"), ok}},
			[]string{"asked/CONFIRMATION_REQUIRED", "mismatched/CONSENT_TOKEN_MISMATCH"}},
		{"token, forged", Decision{Mode: ModeToken}, "false", []step{{withToken(args, "ilt1_forged"), ok}},
			[]string{"invalid/CONSENT_TOKEN_INVALID"}},
		{"bad arguments", Decision{Mode: ModeAllow}, "false", []step{{`{"a":1,"a":2}`, ok}}, []string{"invalid/VALIDATION_FAILED"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			log := &memoryAudit{}
			g := newGate(t, fixedPolicy{d: tt.d}, &GateOptions{Getenv: env(tt.dryRun), Logger: quiet, Audit: log})
			token := ""
			for _, s := range tt.steps {
				res := g.Call(context.Background(), testTool(t), alice, json.RawMessage(strings.ReplaceAll(s.args, "<TOKEN>", token)), s.run)
				if b := BodyOfResult(res); b.ConfirmToken != "" {
					token = b.ConfirmToken
				}
			}
			if got := log.trailOf(t); strings.Join(got, "; ") != strings.Join(tt.want, "; ") {
				t.Errorf("trail = %q, want %q", got, tt.want)
			}
			for r := range log.Records(context.Background(), 1) {
				if strings.Contains(string(r.Raw), "hunter2") {
					t.Errorf("record %d holds a secret: %s", r.Seq, r.Raw)
				}
				if r.Tenant != "acme" || r.Principal != "alice" || r.Tool != "send_reminder" {
					t.Errorf("record %d: who/what = %s %s %s", r.Seq, r.Tenant, r.Principal, r.Tool)
				}
				if r.Decision == audit.DecisionConfirmed && r.Outcome == "" && !log.durable[r.Seq-1] {
					t.Errorf("the confirmation %d was not written durably", r.Seq)
				}
			}
		})
	}
}

func TestAuditRecordsWhatTheHumanSawAndChose(t *testing.T) {
	log := &memoryAudit{}
	g := newGate(t, elicitPolicy{}, &GateOptions{Getenv: env("false"), Logger: quiet, Audit: log})
	tool, _ := NewTool("promote_release", "", HintsOf(nil), nil)
	args := json.RawMessage(`{"service":"web","environment":"production"}`)
	first := g.CallWith(context.Background(), tool, alice, args, Exchange{Form: true, Native: true}, nil)
	answer := &mcp.ElicitResult{Action: "accept", Content: map[string]any{"confirm": true, "environment": "staging"}}
	var rec recorder
	g.CallWith(context.Background(), tool, alice, args, Exchange{Form: true, Native: true,
		Responses: mcp.InputResponseMap{formRequestID: answer}, State: first.RequestState}, rec.run)
	declined := g.CallWith(context.Background(), tool, alice, args, Exchange{Form: true, Native: true}, nil)
	g.CallWith(context.Background(), tool, alice, args, Exchange{Form: true, Native: true,
		Responses: mcp.InputResponseMap{formRequestID: &mcp.ElicitResult{Action: "decline"}}, State: declined.RequestState}, nil)
	cancelled := g.CallWith(context.Background(), tool, alice, args, Exchange{Form: true, Native: true}, nil)
	g.CallWith(context.Background(), tool, alice, args, Exchange{Form: true, Native: true,
		Responses: mcp.InputResponseMap{formRequestID: &mcp.ElicitResult{Action: "cancel"}}, State: cancelled.RequestState}, nil)

	want := []string{"asked/input_required", "confirmed/ by elicit", "confirmed/ok by elicit",
		"asked/input_required", "declined/DECLINED", "asked/input_required", "cancelled/CANCELLED"}
	if got := log.trailOf(t); strings.Join(got, "; ") != strings.Join(want, "; ") {
		t.Errorf("trail = %q, want %q", got, want)
	}
	var recs []*audit.Record
	for r := range log.Records(context.Background(), 1) {
		recs = append(recs, r)
	}
	if recs[0].Summary == "" {
		t.Error("the question's record does not say what the human was shown")
	}
	if recs[1].Replaced["environment"] != "production" || recs[1].Args["environment"] != "staging" {
		t.Errorf("confirmation: replaced %v, args %v", recs[1].Replaced, recs[1].Args)
	}
}

func TestAuditFailsClosed(t *testing.T) {
	down := errors.New("disk full")
	for _, optional := range []bool{false, true} {
		log := &memoryAudit{fail: down}
		g := newGate(t, fixedPolicy{d: Decision{Mode: ModeFlag}}, &GateOptions{Getenv: env("false"), Logger: quiet, Audit: log, AuditOptional: optional})
		var rec recorder
		b := BodyOfResult(g.Call(context.Background(), testTool(t), alice, json.RawMessage(`{"customer_id":"a","__confirm":true}`), rec.run))
		if optional {
			if rec.runs.Load() != 1 {
				t.Error("with the audit optional, the confirmed call must still run")
			}
			continue
		}
		if rec.runs.Load() != 0 || b.Code != CodeUpstreamUnavailable || !b.Retriable || strings.Contains(b.Message, "disk full") {
			t.Errorf("runs %d, body %+v", rec.runs.Load(), b)
		}
	}
	// An allowed call does not wait for a confirmation record; it runs.
	log := &memoryAudit{fail: down}
	g := newGate(t, fixedPolicy{d: Decision{Mode: ModeAllow}}, &GateOptions{Getenv: env("false"), Logger: quiet, Audit: log})
	var rec recorder
	g.Call(context.Background(), testTool(t), alice, json.RawMessage(`{"customer_id":"a"}`), rec.run)
	if rec.runs.Load() != 1 {
		t.Error("an allowed call must run when the audit log is down")
	}
}

// TestACallNoRuleMatchedNamesTheDefaultRule: the record of a call names
// the rule that decided it, and "default" when no rule did.
func TestACallNoRuleMatchedNamesTheDefaultRule(t *testing.T) {
	for _, tt := range []struct{ rule, want string }{{"", DefaultRule}, {"reminders", "reminders"}} {
		t.Run(tt.want, func(t *testing.T) {
			log := &memoryAudit{}
			g := newGate(t, fixedPolicy{d: Decision{Rule: tt.rule, Mode: ModeAllow}}, &GateOptions{Getenv: env("false"), Logger: quiet, Audit: log})
			var rec recorder
			g.Call(context.Background(), testTool(t), alice, json.RawMessage(`{"customer_id":"a"}`), rec.run)
			r, err := audit.Decode(log.stored[0])
			if err != nil || r.Rule != tt.want || !strings.Contains(string(r.Raw), `"rule":"`+tt.want+`"`) {
				t.Errorf("record %s (%v), want rule %q", r.Raw, err, tt.want)
			}
		})
	}
}

// TestACancelledCallIsRecorded: a call its client cancels while it runs
// still leaves the record of its outcome; the client's cancellation ends
// the call, not what the gate writes of it.
func TestACancelledCallIsRecorded(t *testing.T) {
	for _, mode := range []Mode{ModeAllow, ModeFlag} {
		t.Run(string(mode), func(t *testing.T) {
			log := &memoryAudit{honorsCtx: true}
			g := newGate(t, fixedPolicy{d: Decision{Mode: mode}}, &GateOptions{Getenv: env("false"), Logger: quiet, Audit: log})
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			run := func(ctx context.Context, _ json.RawMessage) (*mcp.CallToolResult, error) {
				cancel()
				<-ctx.Done()
				return nil, &Error{Code: CodeCancelled, Message: "The call was cancelled.", Hint: "Check.", Err: ctx.Err()}
			}
			g.Call(ctx, testTool(t), alice, json.RawMessage(`{"customer_id":"a","__confirm":true}`), run)
			log.mu.Lock()
			defer log.mu.Unlock()
			if len(log.stored) == 0 {
				t.Fatal("no record of the cancelled call")
			}
			last, err := audit.Decode(log.stored[len(log.stored)-1])
			if err != nil || last.Outcome != string(CodeCancelled) {
				t.Errorf("last record %s (%v), want the outcome CANCELLED", last.Raw, err)
			}
		})
	}
}

// TestQueueAllowedAnswersBeforeTheCommit: with QueueAllowed, an allowed
// call answers while the commit of its record is held, and its record is
// written once the commit goes on; every other call's answer still waits
// for its record, as it does without the option.
func TestQueueAllowedAnswersBeforeTheCommit(t *testing.T) {
	tests := []struct {
		name    string
		queue   bool
		mode    Mode
		args    string
		answers bool // before the commit
		want    string
	}{
		{"allowed, queued", true, ModeAllow, `{"customer_id":"a"}`, true, "allowed/ok"},
		{"allowed, committed", false, ModeAllow, `{"customer_id":"a"}`, false, "allowed/ok"},
		{"denied, queued", true, ModeDeny, `{"customer_id":"a"}`, false, "denied/TOOL_NOT_ALLOWED"},
		{"confirmed, queued", true, ModeFlag, `{"customer_id":"a","__confirm":true}`, false, "confirmed/ by flag"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				log := &memoryAudit{}
				held := make(chan struct{})
				store := audit.NewGroupCommit(func(ctx context.Context, durable bool, recs []*audit.Record) error {
					<-held
					return log.Append(ctx, durable, recs...)
				})
				g := newGate(t, fixedPolicy{d: Decision{Mode: tt.mode}}, &GateOptions{Getenv: env("false"), Logger: quiet, Audit: store, QueueAllowed: tt.queue})
				var rec recorder
				answered := make(chan struct{})
				go func() {
					g.Call(context.Background(), testTool(t), alice, json.RawMessage(tt.args), rec.run)
					close(answered)
				}()
				synctest.Wait()
				select {
				case <-answered:
					if !tt.answers {
						t.Error("the call answered before its record was committed")
					}
				default:
					if tt.answers {
						t.Error("the allowed call waited for the commit of its record")
					}
				}
				close(held)
				<-answered
				store.Close()
				if got := log.trailOf(t); len(got) == 0 || got[0] != tt.want {
					t.Errorf("trail = %q, want %q first", got, tt.want)
				}
			})
		})
	}
}
