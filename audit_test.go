package interlock

import (
	"context"
	"encoding/json"
	"errors"
	"iter"
	"math"
	"reflect"
	"strconv"
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

// TestRecordFieldsMatchTheirJSON: the canonical form a record is hashed
// over, written member by member, is the canonical form of the object its
// JSON decodes to, for records of every shape and for one with every field
// set (a field added to AuditRecord and not written fails it); so the hash
// of a record as written equals the hash recomputed from its stored bytes.
func TestRecordFieldsMatchTheirJSON(t *testing.T) {
	at := time.Date(2026, 11, 23, 3, 4, 5, 123456000, time.FixedZone("CET", 3600))
	tests := []struct {
		name string
		rec  *AuditRecord
	}{
		{"bare", &AuditRecord{Event: "call", Time: at}},
		{"call", &AuditRecord{Seq: 12345678, Time: at, Event: "call", Tenant: "acme", Principal: "alice", Client: "c/1", Session: "s", Tool: "t",
			Upstream: "u", Rule: "r", Mode: "token", Args: map[string]any{"a": 1.5, "b": []any{"x", nil, true, map[string]any{"c": -0.0}}},
			ArgsDigest: "d", Summary: "Refund <b>&</b> \\u2028", Decision: DecisionConfirmed, ConfirmedBy: "approval",
			Approvers: []string{"bob", "group:finance"}, Grant: "grt_1", Replaced: map[string]any{"env": "production"},
			Outcome: OutcomeOK, LatencyMS: 0.001, Detail: "x", Prev: "abc", Hints: &Hints{ReadOnly: true, OpenWorld: true}}},
		{"shadow", &AuditRecord{Seq: 2, Event: "shadow_differs", Time: at, Tool: "t", Rule: "r", Mode: "token", ShadowRule: "s", ShadowMode: "deny", Hints: &Hints{}}},
		{"event", &AuditRecord{Seq: 1, Event: "auth_refused", Time: at, LatencyMS: 1e21, Detail: "GET /metrics from 127.0.0.1:1 with no API key"}},
		{"every field", everyField(t, at)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			direct, _, err := tt.rec.appendCanonical(nil)
			if err != nil {
				t.Fatal(err)
			}
			b, err := tt.rec.Encode()
			if err != nil {
				t.Fatal(err)
			}
			var viaJSON map[string]any
			if err := json.Unmarshal(b, &viaJSON); err != nil {
				t.Fatal(err)
			}
			delete(viaJSON, "hash")
			if c, err := seal.Canonical(viaJSON); err != nil || string(direct) != string(c) {
				t.Errorf("\ndirect %s\n  json %s %v", direct, c, err)
			}
		})
	}
	// A value encoding/json would not decode to is hashed as it reads back.
	asInt, _, err1 := (&AuditRecord{Args: map[string]any{"n": 1}}).appendCanonical(nil)
	asFloat, _, err2 := (&AuditRecord{Args: map[string]any{"n": 1.0}}).appendCanonical(nil)
	if err1 != nil || err2 != nil || string(asInt) != string(asFloat) {
		t.Errorf("an int argument: %s %v; as decoded JSON: %s %v", asInt, err1, asFloat, err2)
	}
}

// everyField returns a record with every field that encodes set to a
// value that is not empty.
func everyField(t *testing.T, at time.Time) *AuditRecord {
	r := &AuditRecord{}
	v := reflect.ValueOf(r).Elem()
	for i := range v.NumField() {
		f, sf := v.Field(i), v.Type().Field(i)
		if sf.Tag.Get("json") == "-" {
			continue
		}
		switch {
		case f.Type() == reflect.TypeFor[time.Time]():
			f.Set(reflect.ValueOf(at))
		case f.Kind() == reflect.String:
			f.SetString(sf.Name)
		case f.Kind() == reflect.Int64:
			f.SetInt(7)
		case f.Kind() == reflect.Float64:
			f.SetFloat(0.5)
		case f.Kind() == reflect.Slice:
			f.Set(reflect.MakeSlice(f.Type(), 1, 1))
		case f.Kind() == reflect.Map:
			m := reflect.MakeMap(f.Type())
			m.SetMapIndex(reflect.ValueOf("k"), reflect.Zero(f.Type().Elem()))
			f.Set(m)
		case f.Kind() == reflect.Pointer:
			f.Set(reflect.New(f.Type().Elem()))
		default:
			t.Fatalf("AuditRecord.%s: give everyField a value of %s", sf.Name, f.Type())
		}
	}
	return r
}

// linkCase is a record linked after prev as record seq, and the bytes
// stored for it.
type linkCase struct {
	name string
	rec  *AuditRecord
	seq  int64
	prev string
	want string
}

// linkCases are records of every shape, with the bytes Link stores for
// each, as it wrote them when it canonicalized a record twice: existing
// logs hold these bytes, so they must never change.
func linkCases() []linkCase {
	at := time.Date(2026, 11, 23, 3, 4, 5, 123456000, time.FixedZone("CET", 3600))
	type custom struct {
		A int    `json:"a"`
		B string `json:"b,omitempty"`
	}
	return []linkCase{
		{"only what every record has", &AuditRecord{Event: "call"}, 1, "", `{"event":"call","hash":"347ad44fb1cc9ea2268778a87d2297b4ab539f2aab2d691ae49caf5b3a84ab9e","prev":"","seq":1,"time":"0001-01-01T00:00:00Z"}`},
		{"an empty event", &AuditRecord{}, 2, "00", `{"event":"","hash":"15b0fde96afe3443330338f20d4180e22c633a8b7756e031e14f163dedc66a11","prev":"00","seq":2,"time":"0001-01-01T00:00:00Z"}`},
		{"every field", &AuditRecord{Time: at, Event: "call", Tenant: "acme", Principal: "alice", Client: "c/1", Session: "s", Tool: "t",
			Upstream: "u", Rule: "r", Mode: "token", Args: map[string]any{"a": 1.5, "b": []any{"x", nil, true, map[string]any{"c": -0.0}}},
			ArgsDigest: "d", Summary: "Refund <b>&</b> \\u2028", Decision: DecisionConfirmed, ConfirmedBy: "approval",
			Approvers: []string{"bob", "group:finance"}, Grant: "grt_1", Replaced: map[string]any{"env": "production"},
			Outcome: OutcomeOK, LatencyMS: 0.001, Detail: "x", Hints: &Hints{ReadOnly: true, OpenWorld: true},
			ShadowRule: "sr", ShadowMode: "deny"}, 12345678, "abc", `{"approvers":["bob","group:finance"],"args":{"a":1.5,"b":["x",null,true,{"c":0}]},"args_digest":"d","client":"c/1","confirmed_by":"approval","decision":"confirmed","detail":"x","event":"call","grant":"grt_1","hash":"90638a0cbead44952d46ce1496e7402eccb1bcd7ab88854c7b58b377c8e2c12c","hints":{"destructive":false,"idempotent":false,"openWorld":true,"readOnly":true},"latency_ms":0.001,"mode":"token","outcome":"ok","prev":"abc","principal":"alice","replaced":{"env":"production"},"rule":"r","seq":1.2345678e+07,"session":"s","shadow_mode":"deny","shadow_rule":"sr","summary":"Refund \u003cb\u003e\u0026\u003c/b\u003e \\u2028","tenant":"acme","time":"2026-11-23T02:04:05.123456Z","tool":"t","upstream":"u"}`},
		{"only fields before hash", &AuditRecord{Event: "e", Approvers: []string{"a"}, Args: map[string]any{"k": "v"}, ArgsDigest: "d",
			Client: "c", ConfirmedBy: "token", Decision: "asked", Detail: "x", Grant: "g"}, 3, "p", `{"approvers":["a"],"args":{"k":"v"},"args_digest":"d","client":"c","confirmed_by":"token","decision":"asked","detail":"x","event":"e","grant":"g","hash":"f2a6c95dc95eac5f73d0c049d00f9fd58c877d8ad0d5a5f0061d55c298c6c7e4","prev":"p","seq":3,"time":"0001-01-01T00:00:00Z"}`},
		{"only fields after hash", &AuditRecord{Time: at, Event: "call", Hints: &Hints{Destructive: true}, LatencyMS: 3, Mode: "m", Outcome: "o",
			Principal: "p", Replaced: map[string]any{"r": 1.0}, Rule: "r", Session: "s", ShadowMode: "deny", ShadowRule: "x",
			Summary: "s", Tenant: "t", Tool: "t", Upstream: "u"}, 4, "p", `{"event":"call","hash":"7965b89eb3cb7092e38d00a3afdbc1ceda7862333ff98e1707422842797a14c5","hints":{"destructive":true,"idempotent":false,"openWorld":false,"readOnly":false},"latency_ms":3,"mode":"m","outcome":"o","prev":"p","principal":"p","replaced":{"r":1},"rule":"r","seq":4,"session":"s","shadow_mode":"deny","shadow_rule":"x","summary":"s","tenant":"t","time":"2026-11-23T02:04:05.123456Z","tool":"t","upstream":"u"}`},
		{"empty optional fields", &AuditRecord{Event: "call", Args: map[string]any{}, Approvers: []string{}, Replaced: map[string]any{},
			Hints: &Hints{}, LatencyMS: math.Copysign(0, -1)}, 5, "", `{"event":"call","hash":"b14b1e37231b44e16284d1ed5392594a13b5ef6bbda175848ca2cdcd76f4499c","hints":{"destructive":false,"idempotent":false,"openWorld":false,"readOnly":false},"prev":"","seq":5,"time":"0001-01-01T00:00:00Z"}`},
		{"unicode and escapes", &AuditRecord{Event: "call", Tool: "naïve_€", Summary: "line\nbreak\t\"quoted\" \\ \u2028\u2029 <a&b> \x01 😀",
			Detail: "Ünïcödé", Args: map[string]any{"é": "ü", "z": "\u2028", "A": "<&>", "\u00e9t\u00e9": "\u00e8", "😀": "a\"b"}}, 6, "", `{"args":{"A":"\u003c\u0026\u003e","z":"\u2028","é":"ü","été":"è","😀":"a\"b"},"detail":"Ünïcödé","event":"call","hash":"dcc16f54a7695939937939783889b524adbe7fdabc1dd5ad30942b1fe8cb85ce","prev":"","seq":6,"summary":"line\nbreak\t\"quoted\" \\ \u2028\u2029 \u003ca\u0026b\u003e \u0001 😀","time":"0001-01-01T00:00:00Z","tool":"naïve_€"}`},
		// Such a record does not verify: its hash covers the escapes
		// \ufffd, its stored bytes read back as the character itself.
		{"invalid UTF-8, as written", &AuditRecord{Event: "auth_refused", Detail: "GET /\xff\xfe", Args: map[string]any{"\xff": "\xc3"}}, 7, "", `{"args":{"\ufffd":"\ufffd"},"detail":"GET /\ufffd\ufffd","event":"auth_refused","hash":"8e1409c800be7cf122a1a674131efe7fb877e46072770320eec5d738d808645d","prev":"","seq":7,"time":"0001-01-01T00:00:00Z"}`},
		{"nested args", &AuditRecord{Event: "call", Args: map[string]any{
			"list":  []any{1.0, -2.5, 1e21, 1e-7, 0.1, 123456789.0, []any{}, map[string]any{}, nil, false},
			"obj":   map[string]any{"z": map[string]any{"y": []any{map[string]any{"b": 1.0, "a": 2.0}}}, "B": true, "a": nil},
			"__raw": "nested meta-like keys are kept", "empty": "", "big": 9007199254740993.0},
			Replaced: map[string]any{"to": map[string]any{"env": []any{"prod", "staging"}}}}, 8, "", `{"args":{"__raw":"nested meta-like keys are kept","big":9.007199254740992e+15,"empty":"","list":[1,-2.5,1e+21,1e-07,0.1,1.23456789e+08,[],{},null,false],"obj":{"B":true,"a":null,"z":{"y":[{"a":2,"b":1}]}}},"event":"call","hash":"8c3973197c12a80cd227bafb7e38b8b6d0eca9be7fdc54f2385e6f480fe264d3","prev":"","replaced":{"to":{"env":["prod","staging"]}},"seq":8,"time":"0001-01-01T00:00:00Z"}`},
		{"values encoding/json must decode first", &AuditRecord{Time: at, Event: "call", Args: map[string]any{"n": 1, "list": []string{"a", "b"},
			"s": custom{A: 2}, "m": map[string]int{"x": 3}, "f": float32(0.1), "raw": json.RawMessage(`{"b":1,"a":[1e2]}`)},
			Replaced: map[string]any{"n": int64(7)}, Detail: "slow path"}, 9, "", `{"args":{"f":0.1,"list":["a","b"],"m":{"x":3},"n":1,"raw":{"a":[100],"b":1},"s":{"a":2}},"detail":"slow path","event":"call","hash":"3fc0fb4b44f06d791164a03a413092bdcfb4be1baa7e7cfc1d15ae918227e51d","prev":"","replaced":{"n":7},"seq":9,"time":"2026-11-23T02:04:05.123456Z"}`},
		{"a stale hash and raw bytes are ignored", &AuditRecord{Event: "call", Tool: "t", Hash: "stale", Prev: "old", Seq: 99,
			Raw: json.RawMessage(`{"event":"other"}`)}, 10, "new", `{"event":"call","hash":"5abdaceeb36cbaf96029efed4d124f241a65db107bbd14b71a647e3908d0a045","prev":"new","seq":10,"time":"0001-01-01T00:00:00Z","tool":"t"}`},
		{"numbers: seq and latency", &AuditRecord{Event: "call", LatencyMS: 123456.789}, 1000000, "", `{"event":"call","hash":"634c8b0c71b8caba8cb4deed20d17efa94e5d466cd257e4e3dfcc9b6667505b7","latency_ms":123456.789,"prev":"","seq":1e+06,"time":"0001-01-01T00:00:00Z"}`},
		{"a seq past 2^53", &AuditRecord{Event: "call", LatencyMS: 1e21}, 1<<53 + 1, "", `{"event":"call","hash":"bd46928d93d82c8261c5d1ef57b4fe1856decb816ab49fdde1b8357c33c83313","latency_ms":1e+21,"prev":"","seq":9.007199254740992e+15,"time":"0001-01-01T00:00:00Z"}`},
		{"a year past 9999", &AuditRecord{Event: "call", Time: time.Date(10000, 1, 1, 0, 0, 0, 1, time.UTC)}, 11, "", `{"event":"call","hash":"bbaa70ba7bf5152bbfb1bf5b056fdff9dc0796bb9b22f8ef52eadc392e8fbcad","prev":"","seq":11,"time":"10000-01-01T00:00:00.000000001Z"}`},
		{"a DEL, which encoding/json writes as it is", &AuditRecord{Event: "call", Tool: "del\x7f"}, 13, "", "{\"event\":\"call\",\"hash\":\"bd87a4d598e11d75bcd9e1b713a8d56cbe1ef395af70d674e3b67ae0130b8d8f\",\"prev\":\"\",\"seq\":13,\"time\":\"0001-01-01T00:00:00Z\",\"tool\":\"del\x7f\"}"},
		{"a time before 1970 with an offset", &AuditRecord{Event: "call", Time: time.Date(1969, 7, 20, 20, 17, 40, 0, time.FixedZone("", -5*3600))}, 12, "", `{"event":"call","hash":"57be631871eef738d389a0f29c786f59eb8768e7d9065689a764eab0b11cccf4","prev":"","seq":12,"time":"1969-07-21T01:17:40Z"}`},
	}
}

// TestLinkKeepsItsBytes: Link stores each record as it always has, and
// its hash is the one in those bytes.
func TestLinkKeepsItsBytes(t *testing.T) {
	for _, tt := range linkCases() {
		t.Run(tt.name, func(t *testing.T) {
			got, err := tt.rec.Link(tt.seq, tt.prev)
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != tt.want {
				t.Errorf("stored\n got %s\nwant %s", got, tt.want)
			}
			if ref, _, err := linkTwoPass(tt.rec, tt.seq, tt.prev); err != nil || string(ref) != tt.want {
				t.Errorf("the reference for FuzzLink stores\n%s %v", ref, err)
			}
			var want struct {
				Hash string `json:"hash"`
			}
			if err := json.Unmarshal([]byte(tt.want), &want); err != nil {
				t.Fatal(err)
			}
			if r := tt.rec; r.Hash != want.Hash || r.Seq != tt.seq || r.Prev != tt.prev || r.Raw != nil {
				t.Errorf("linked as %d %q after %q, raw %q; want %d %q after %q", r.Seq, r.Hash, r.Prev, r.Raw, tt.seq, want.Hash, tt.prev)
			}
		})
	}
}

// TestLargeSequenceNumbersReadBack: the canonical form spells record
// 1,000,000 "1e+06"; such a record reads back with its number and its
// hash, and a seq that is no sequence number is refused as edited.
func TestLargeSequenceNumbersReadBack(t *testing.T) {
	for _, seq := range []int64{999_999, 1_000_000, 1_000_001, 123_456_789, 1 << 40} {
		t.Run(strconv.FormatInt(seq, 10), func(t *testing.T) {
			stored, err := (&AuditRecord{Event: "call", Tool: "t"}).Link(seq, "prev")
			if err != nil {
				t.Fatal(err)
			}
			r, err := DecodeAuditRecord(stored)
			if err != nil {
				t.Fatalf("%s: %v", stored, err)
			}
			h, err := r.ComputeHash()
			if r.Seq != seq || err != nil || h != r.Hash {
				t.Errorf("read back seq %d, hash %s (%v), want %d, %s", r.Seq, h, err, seq, r.Hash)
			}
		})
	}
	for _, bad := range []string{`1.5`, `-1`, `1e300`, `"7"`} {
		t.Run("seq "+bad, func(t *testing.T) {
			if _, err := DecodeAuditRecord([]byte(`{"event":"call","seq":` + bad + `}`)); !errors.Is(err, ErrUnreadableRecord) {
				t.Errorf("err = %v, want ErrUnreadableRecord", err)
			}
		})
	}
}

// TestAddedMembersBreakTheHash: a member added to a stored record, whatever
// its name, makes the record read as edited.
func TestAddedMembersBreakTheHash(t *testing.T) {
	stored, err := (&AuditRecord{Event: "call", Tool: "t", Args: map[string]any{"__nested": 1.0}}).Link(1, "")
	if err != nil {
		t.Fatal(err)
	}
	for _, member := range []string{`"__confirm":true`, `"x":1`, `"_meta":{}`} {
		t.Run(member, func(t *testing.T) {
			r, err := DecodeAuditRecord([]byte(`{` + member + `,` + string(stored[1:])))
			if err != nil {
				t.Fatal(err)
			}
			if h, err := r.ComputeHash(); err != nil || h == r.Hash {
				t.Errorf("a record with %s added still hashes as written (%v)", member, err)
			}
		})
	}
	r, err := DecodeAuditRecord(stored)
	if err != nil {
		t.Fatal(err)
	}
	if h, err := r.ComputeHash(); err != nil || h != r.Hash {
		t.Errorf("the record as written does not hash as written: %s %v", h, err)
	}
}
