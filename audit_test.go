package interlock

import (
	"context"
	"encoding/json"
	"errors"
	"iter"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/interlock-mcp/interlock/seal"
)

// memoryAudit is an audit log in a slice, stored as a store would: as the
// encoded bytes.
type memoryAudit struct {
	mu      sync.Mutex
	stored  [][]byte
	durable []bool
	prev    string
	fail    error
}

func (m *memoryAudit) Append(_ context.Context, durable bool, recs ...*AuditRecord) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.fail != nil {
		return m.fail
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

func (m *memoryAudit) Records(context.Context, int64) iter.Seq2[*AuditRecord, error] {
	return func(yield func(*AuditRecord, error) bool) {
		m.mu.Lock()
		stored := append([][]byte(nil), m.stored...)
		m.mu.Unlock()
		for _, b := range stored {
			if !yield(DecodeAuditRecord(b)) {
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
	if _, err := VerifyChain(m.Records(context.Background(), 1)); err != nil {
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
				if r.Decision == DecisionConfirmed && r.Outcome == "" && !log.durable[r.Seq-1] {
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
	var recs []*AuditRecord
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

func TestVerifyChainNamesTheFirstBadRecord(t *testing.T) {
	log := &memoryAudit{}
	for i := range 5 {
		rec := &AuditRecord{Event: "call", Tool: "t", LatencyMS: float64(i), Hints: &Hints{Destructive: true}}
		if i == 4 {
			rec = &AuditRecord{Event: "shadow_differs", Tool: "t", Rule: "r", Mode: "token", ShadowMode: "deny"}
		}
		if err := log.Append(context.Background(), false, rec); err != nil {
			t.Fatal(err)
		}
	}
	edit := func(i int, from, to string) *memoryAudit {
		c := &memoryAudit{stored: append([][]byte(nil), log.stored...)}
		c.stored[i] = []byte(strings.Replace(string(c.stored[i]), from, to, 1))
		return c
	}
	drop := &memoryAudit{stored: append(append([][]byte(nil), log.stored[:2]...), log.stored[3:]...)}
	swap := &memoryAudit{stored: append([][]byte(nil), log.stored...)}
	swap.stored[1], swap.stored[2] = swap.stored[2], swap.stored[1]
	tests := []struct {
		name string
		log  *memoryAudit
		seq  int64
	}{
		{"edited", edit(3, `"tool":"t"`, `"tool":"u"`), 4},
		{"member added", edit(1, `"tool":"t"`, `"tool":"t","x":1`), 2},
		{"deleted", drop, 3},
		{"reordered", swap, 2},
		{"not JSON", edit(0, `{`, `[`), 1},
		{"hints edited", edit(2, `"readOnly":false`, `"readOnly":true`), 3},
		{"hints removed", edit(1, `"hints":{"destructive":true,"idempotent":false,"openWorld":false,"readOnly":false},`, ``), 2},
		{"shadow decision edited", edit(4, `"shadow_mode":"deny"`, `"shadow_mode":"allow"`), 5},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := VerifyChain(tt.log.Records(context.Background(), 1))
			var ce *ChainError
			if !errors.As(err, &ce) || ce.Seq != tt.seq {
				t.Errorf("err = %v, want a break at %d", err, tt.seq)
			}
		})
	}
	if n, err := VerifyChain(log.Records(context.Background(), 1)); n != 5 || err != nil {
		t.Errorf("intact log: %d, %v", n, err)
	}
	// A record written before records kept hints (its hash computed then)
	// verifies still, and a chain goes on from it.
	old := &memoryAudit{stored: [][]byte{[]byte(`{"args":{"amount":20,"invoice_id":"inv_1"},"event":"call",` +
		`"hash":"8b51dcaccfad1bc839c0210558e2e7ea326671ddc3da0e2d4124e6cd8af9a105","mode":"token","prev":"","rule":"refunds",` +
		`"seq":1,"time":"2026-11-23T03:04:05Z","tool":"refund_invoice"}`)}, prev: "8b51dcaccfad1bc839c0210558e2e7ea326671ddc3da0e2d4124e6cd8af9a105"}
	if err := old.Append(context.Background(), false, &AuditRecord{Event: "call", Tool: "t", Hints: &Hints{ReadOnly: true}}); err != nil {
		t.Fatal(err)
	}
	if n, err := VerifyChain(old.Records(context.Background(), 1)); n != 2 || err != nil {
		t.Errorf("a log begun before hints were kept: %d, %v", n, err)
	}
}

// TestRecordFieldsMatchTheirJSON: the object a record is hashed from,
// built directly, is the object its JSON decodes to, for records of every
// shape; so the hash of a record as written equals the hash recomputed
// from its stored bytes.
func TestRecordFieldsMatchTheirJSON(t *testing.T) {
	at := time.Date(2026, 11, 23, 3, 4, 5, 123456000, time.FixedZone("CET", 3600))
	records := []*AuditRecord{
		{Event: "call", Time: at},
		{Seq: 12345678, Time: at, Event: "call", Tenant: "acme", Principal: "alice", Client: "c/1", Session: "s", Tool: "t",
			Upstream: "u", Rule: "r", Mode: "token", Args: map[string]any{"a": 1.5, "b": []any{"x", nil, true, map[string]any{"c": -0.0}}},
			ArgsDigest: "d", Summary: "Refund <b>&</b> \\u2028", Decision: DecisionConfirmed, ConfirmedBy: "approval",
			Approvers: []string{"bob", "group:finance"}, Grant: "grt_1", Replaced: map[string]any{"env": "production"},
			Outcome: OutcomeOK, LatencyMS: 0.001, Detail: "x", Prev: "abc", Hints: &Hints{ReadOnly: true, OpenWorld: true}},
		{Seq: 2, Event: "shadow_differs", Time: at, Tool: "t", Rule: "r", Mode: "token", ShadowRule: "s", ShadowMode: "deny", Hints: &Hints{}},
		{Seq: 1, Event: "auth_refused", Time: at, LatencyMS: 1e21, Detail: "GET /metrics from 127.0.0.1:1 with no API key"},
	}
	for i, r := range records {
		direct, ok := r.fields()
		if !ok {
			t.Fatalf("record %d: not built directly", i)
		}
		b, err := r.Encode()
		if err != nil {
			t.Fatal(err)
		}
		var viaJSON map[string]any
		if err := json.Unmarshal(b, &viaJSON); err != nil {
			t.Fatal(err)
		}
		c1, err1 := seal.Canonical(direct)
		c2, err2 := seal.Canonical(viaJSON)
		if err1 != nil || err2 != nil || string(c1) != string(c2) {
			t.Errorf("record %d:\ndirect %s %v\n  json %s %v", i, c1, err1, c2, err2)
		}
	}
	// A value encoding/json would not decode to takes the slow road.
	if _, ok := (&AuditRecord{Args: map[string]any{"n": 1}}).fields(); ok {
		t.Error("an int argument was taken as decoded JSON")
	}
}
