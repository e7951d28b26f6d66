package interlock

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/interlock-mcp/interlock/redact"
	"github.com/interlock-mcp/interlock/seal"
)

// fixedPolicy decides every call the same way.
type fixedPolicy struct {
	d   Decision
	err error
}

func (p fixedPolicy) Decide(context.Context, *Call) (Decision, error) { return p.d, p.err }
func (p fixedPolicy) ToolModes(string, string, Hints) []Mode          { return []Mode{p.d.Mode} }
func (p fixedPolicy) IsSecret(name string) bool                       { return redact.IsSecret(name, nil) }
func (p fixedPolicy) HumanArgs(string, string, Hints) []string {
	var names []string
	for _, ch := range p.d.Form.Choices {
		names = append(names, ch.Arg)
	}
	return names
}

func env(dryRun string) func(string) string {
	return func(k string) string {
		if k == "MCP_DRY_RUN" {
			return dryRun
		}
		return ""
	}
}

var quiet = slog.New(slog.DiscardHandler)

func testTool(t *testing.T) *Tool {
	t.Helper()
	tool, err := NewTool("send_reminder", "", Hints{OpenWorld: true}, map[string]any{
		"type":       "object",
		"properties": map[string]any{"customer_id": map[string]any{"type": "string"}, "password": map[string]any{"type": "string"}},
		"required":   []any{"customer_id"},
	})
	if err != nil {
		t.Fatal(err)
	}
	return tool
}

func TestGateModes(t *testing.T) {
	const args = `{"customer_id":"acct_9931","password":"hunter2"}`
	const confirmed = `{"customer_id":"acct_9931","password":"hunter2","__confirm":true}`
	tests := []struct {
		name     string
		mode     Mode
		dryRun   string
		raw      string
		wantCode Code // "" means the tool ran
	}{
		{"allow runs under dry run", ModeAllow, "", args, ""},
		{"deny refuses even with both keys", ModeDeny, "false", confirmed, CodeToolNotAllowed},
		{"flag: no keys", ModeFlag, "", args, CodeDryRunPreview},
		{"flag: agent key only", ModeFlag, "", confirmed, CodeDryRunPreview},
		{"flag: operator key only", ModeFlag, "false", args, CodeDryRunPreview},
		{"flag: both keys", ModeFlag, "false", confirmed, ""},
		{"flag: MCP_DRY_RUN=0", ModeFlag, "0", confirmed, CodeDryRunPreview},
		{"flag: MCP_DRY_RUN=no", ModeFlag, "no", confirmed, CodeDryRunPreview},
		{"flag: MCP_DRY_RUN=FALSE", ModeFlag, "FALSE", confirmed, CodeDryRunPreview},
		{"flag: MCP_DRY_RUN=fasle", ModeFlag, "fasle", confirmed, CodeDryRunPreview},
		{"flag: __confirm false", ModeFlag, "false", `{"customer_id":"a","password":"p","__confirm":false}`, CodeDryRunPreview},
		{"invalid arguments fail before the policy", ModeAllow, "false", `{"customer_id":5}`, CodeValidationFailed},
		{"unknown mode is an internal error", Mode("elsewhere"), "false", confirmed, CodeInternal},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := newGate(t, fixedPolicy{d: Decision{Mode: tt.mode, Rule: "r"}}, &GateOptions{Getenv: env(tt.dryRun), Logger: quiet})
			var ran []string
			res := g.Call(context.Background(), testTool(t), Identity{Principal: "alice", Tenant: "acme"}, json.RawMessage(tt.raw),
				func(_ context.Context, a json.RawMessage) (*mcp.CallToolResult, error) {
					ran = append(ran, string(a))
					return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "sent"}}}, nil
				})
			if tt.wantCode == "" {
				if res.IsError || len(ran) != 1 {
					t.Fatalf("want the tool to run once; ran %d times, result %+v", len(ran), res)
				}
				if strings.Contains(ran[0], "__confirm") {
					t.Errorf("the tool received a meta-argument: %s", ran[0])
				}
				if res.Content[0].(*mcp.TextContent).Text != "sent" {
					t.Errorf("result was not passed on untouched: %+v", res)
				}
				return
			}
			if len(ran) != 0 {
				t.Fatalf("the tool ran with %s, want %s", ran, tt.wantCode)
			}
			body := decodeBody(t, res)
			if body.Code != tt.wantCode {
				t.Fatalf("code = %s, want %s (%s)", body.Code, tt.wantCode, body.Message)
			}
			if tt.wantCode == CodeDryRunPreview {
				if !strings.Contains(body.RecoveryHint, "__confirm") {
					t.Errorf("hint = %q", body.RecoveryHint)
				}
				if body.Preview["password"] != redact.Value || body.Preview["customer_id"] == nil {
					t.Errorf("preview = %v: want redacted password and the customer id", body.Preview)
				}
				if _, ok := body.Preview[MetaConfirm]; ok {
					t.Errorf("preview shows the meta-argument: %v", body.Preview)
				}
			}
		})
	}
}

func TestDryRunMessageNamesMissingKeys(t *testing.T) {
	tests := []struct {
		dryRun, raw string
		want        []string
		notWant     []string
	}{
		{"", `{"customer_id":"a"}`, []string{"MCP_DRY_RUN", "__confirm"}, nil},
		{"false", `{"customer_id":"a"}`, []string{"__confirm"}, []string{"MCP_DRY_RUN"}},
		{"", `{"customer_id":"a","__confirm":true}`, []string{"MCP_DRY_RUN"}, []string{"__confirm"}},
	}
	for _, tt := range tests {
		g := newGate(t, fixedPolicy{d: Decision{Mode: ModeFlag}}, &GateOptions{Getenv: env(tt.dryRun), Logger: quiet})
		res := g.Call(context.Background(), testTool(t), Identity{}, json.RawMessage(tt.raw), nil)
		msg := decodeBody(t, res).Message
		for _, w := range tt.want {
			if !strings.Contains(msg, w) {
				t.Errorf("MCP_DRY_RUN=%q %s: message %q does not name %s", tt.dryRun, tt.raw, msg, w)
			}
		}
		for _, w := range tt.notWant {
			if strings.Contains(msg, w) {
				t.Errorf("MCP_DRY_RUN=%q %s: message %q names %s, which is present", tt.dryRun, tt.raw, msg, w)
			}
		}
	}
}

func TestGateFailures(t *testing.T) {
	tests := []struct {
		name     string
		opts     GateOptions
		policy   Policy
		raw      string
		run      Runner
		wantCode Code
	}{
		{
			name:     "arguments over the size limit",
			opts:     GateOptions{MaxArgumentBytes: 16},
			raw:      `{"customer_id":"` + strings.Repeat("x", 32) + `"}`,
			wantCode: CodeValidationFailed,
		},
		{
			// A server that reads keys without regard to case would run
			// with the second customer, not the one the gate checked.
			name:     "an argument that differs from a declared one only in case",
			raw:      `{"customer_id":"a","Customer_ID":"b"}`,
			wantCode: CodeValidationFailed,
		},
		{
			name:     "the policy fails",
			policy:   fixedPolicy{err: errors.New("boom")},
			raw:      `{"customer_id":"a"}`,
			wantCode: CodeInternal,
		},
		{
			name: "a structured tool error passes through",
			raw:  `{"customer_id":"a"}`,
			run: func(context.Context, json.RawMessage) (*mcp.CallToolResult, error) {
				return nil, Errorf(CodeNotFound, "Call list_customers.", "no such customer")
			},
			wantCode: CodeNotFound,
		},
		{
			name: "a plain tool error is internal",
			raw:  `{"customer_id":"a"}`,
			run: func(context.Context, json.RawMessage) (*mcp.CallToolResult, error) {
				return nil, errors.New("pq: relation does not exist")
			},
			wantCode: CodeInternal,
		},
		{
			name: "a panicking tool is internal",
			raw:  `{"customer_id":"a"}`,
			run: func(context.Context, json.RawMessage) (*mcp.CallToolResult, error) {
				panic("nil map")
			},
			wantCode: CodeInternal,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := tt.policy
			if p == nil {
				p = fixedPolicy{d: Decision{Mode: ModeAllow}}
			}
			tt.opts.Logger = quiet
			g := newGate(t, p, &tt.opts)
			run := tt.run
			if run == nil {
				run = func(context.Context, json.RawMessage) (*mcp.CallToolResult, error) {
					t.Fatal("the tool ran")
					return nil, nil
				}
			}
			body := decodeBody(t, g.Call(context.Background(), testTool(t), Identity{}, json.RawMessage(tt.raw), run))
			if body.Code != tt.wantCode {
				t.Errorf("code = %s, want %s", body.Code, tt.wantCode)
			}
			if strings.Contains(body.Message, "pq:") || strings.Contains(body.Message, "nil map") || strings.Contains(body.Message, "boom") {
				t.Errorf("internal text leaked: %q", body.Message)
			}
		})
	}
}

func TestByAnnotations(t *testing.T) {
	tests := []struct {
		policy ByAnnotations
		hints  Hints
		want   Mode
	}{
		{ByAnnotations{}, Hints{ReadOnly: true}, ModeAllow},
		{ByAnnotations{}, HintsOf(nil), ModeFlag},
		{ByAnnotations{}, Hints{Destructive: false}, ModeFlag},
		{ByAnnotations{Mode: ModeDeny}, HintsOf(nil), ModeDeny},
	}
	for _, tt := range tests {
		d, _ := tt.policy.Decide(context.Background(), &Call{Hints: tt.hints})
		if d.Mode != tt.want {
			t.Errorf("%+v with %+v: mode %s, want %s", tt.policy, tt.hints, d.Mode, tt.want)
		}
	}
}

// testSealer seals with a fixed key, so tests log no warning about a
// random one.
var testSealer = func() *seal.Sealer {
	s, err := seal.New([]byte(strings.Repeat("k", seal.MinKeyLength)))
	if err != nil {
		panic(err)
	}
	return s
}()

func newGate(t testing.TB, p Policy, opts *GateOptions) *Gate {
	t.Helper()
	if opts.Sealer == nil {
		opts.Sealer = testSealer
	}
	g, err := NewGate(p, opts)
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// panickyPolicy fails in the worst way.
type panickyPolicy struct{ fixedPolicy }

func (panickyPolicy) Decide(context.Context, *Call) (Decision, error) { panic("policy bug") }

func TestGateSurvivesAPanickingPolicy(t *testing.T) {
	g := newGate(t, panickyPolicy{}, &GateOptions{Getenv: env("false"), Logger: quiet})
	res := g.Call(context.Background(), testTool(t), Identity{}, json.RawMessage(`{"customer_id":"a"}`),
		func(context.Context, json.RawMessage) (*mcp.CallToolResult, error) {
			t.Fatal("the tool ran")
			return nil, nil
		})
	if b := decodeBody(t, res); b.Code != CodeInternal || strings.Contains(b.Message, "policy bug") {
		t.Errorf("body = %+v", b)
	}
}

// secretNote is fixedPolicy that also keeps the argument "note" secret,
// and may hold each decision until released.
type secretNote struct {
	fixedPolicy
	entered, release chan struct{}
}

func (p secretNote) Decide(ctx context.Context, c *Call) (Decision, error) {
	if p.entered != nil {
		p.entered <- struct{}{}
		<-p.release
	}
	return p.fixedPolicy.Decide(ctx, c)
}

func (p secretNote) IsSecret(name string) bool { return name == "note" || p.fixedPolicy.IsSecret(name) }

func TestSetPolicy(t *testing.T) {
	ran := func(context.Context, json.RawMessage) (*mcp.CallToolResult, error) {
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "ran"}}}, nil
	}
	tests := []struct {
		name     string
		next     Policy
		maxBytes int
		raw      string
		wantCode Code // "" means the tool ran
	}{
		{"a looser policy lets the next call run", fixedPolicy{d: Decision{Mode: ModeAllow}}, 0, `{"customer_id":"a"}`, ""},
		{"a stricter policy refuses the next call", fixedPolicy{d: Decision{Mode: ModeDeny}}, 0, `{"customer_id":"a"}`, CodeToolNotAllowed},
		{"the argument bound comes with the policy", fixedPolicy{d: Decision{Mode: ModeAllow}}, 10, `{"customer_id":"a"}`, CodeValidationFailed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := newGate(t, fixedPolicy{d: Decision{Mode: ModeFlag}}, &GateOptions{Getenv: env("false"), Logger: quiet})
			tool := testTool(t)
			if b := decodeBody(t, g.Call(context.Background(), tool, Identity{}, json.RawMessage(tt.raw), ran)); b.Code != CodeDryRunPreview {
				t.Fatalf("before: code %q, want %q", b.Code, CodeDryRunPreview)
			}
			g.SetPolicy(tt.next, tt.maxBytes)
			if got := g.Policy().ToolModes(tool.Name, "", tool.Hints); got[0] != tt.next.ToolModes(tool.Name, "", tool.Hints)[0] {
				t.Errorf("Policy() has modes %v, want the new policy's", got)
			}
			res := g.Call(context.Background(), tool, Identity{}, json.RawMessage(tt.raw), ran)
			if tt.wantCode == "" {
				if res.IsError {
					t.Fatalf("after: %+v, want the tool to run", decodeBody(t, res))
				}
				return
			}
			if b := decodeBody(t, res); b.Code != tt.wantCode {
				t.Errorf("after: code %q, want %q", b.Code, tt.wantCode)
			}
		})
	}
}

// A call decides, describes and redacts under the policy it started with,
// whatever replaced it in the meantime.
func TestSetPolicyDuringACall(t *testing.T) {
	held := secretNote{fixedPolicy: fixedPolicy{d: Decision{Mode: ModeToken}}, entered: make(chan struct{}), release: make(chan struct{})}
	g := newGate(t, held, &GateOptions{Getenv: env("false"), Logger: quiet})
	tool, err := NewTool("send_reminder", "", Hints{OpenWorld: true}, nil)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan *mcp.CallToolResult)
	go func() {
		done <- g.Call(context.Background(), tool, Identity{Principal: "p", Tenant: "t"}, json.RawMessage(`{"note":"private"}`),
			func(context.Context, json.RawMessage) (*mcp.CallToolResult, error) {
				t.Error("the tool ran under the policy set after the call started")
				return nil, nil
			})
	}()
	<-held.entered
	g.SetPolicy(fixedPolicy{d: Decision{Mode: ModeAllow}}, 0)
	close(held.release)
	b := decodeBody(t, <-done)
	if b.Code != CodeConfirmationRequired {
		t.Fatalf("code %q, want %q from the policy the call started under", b.Code, CodeConfirmationRequired)
	}
	if b.Preview["note"] != redact.Value {
		t.Errorf("preview = %v, want note redacted as the starting policy says", b.Preview)
	}
}

// TestCallLogLevels: an allowed call that went well is logged at debug,
// the audit log being its record; a refusal, a confirmed call and a
// failing tool are logged at info, where an operator reads them.
func TestCallLogLevels(t *testing.T) {
	failing := func(context.Context, json.RawMessage) (*mcp.CallToolResult, error) {
		return &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: "boom"}}}, nil
	}
	var rec recorder
	tests := []struct {
		name string
		mode Mode
		args string
		run  Runner
		want string
	}{
		{"allowed", ModeAllow, `{"customer_id":"a"}`, rec.run, "level=DEBUG"},
		{"allowed, the tool fails", ModeAllow, `{"customer_id":"a"}`, failing, "level=INFO"},
		{"denied", ModeDeny, `{"customer_id":"a"}`, rec.run, "level=INFO"},
		{"confirmed", ModeFlag, `{"customer_id":"a","__confirm":true}`, rec.run, "level=INFO"},
		{"invalid", ModeAllow, `{"customer_id":1}`, rec.run, "level=INFO"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out strings.Builder
			logger := slog.New(slog.NewTextHandler(&out, &slog.HandlerOptions{Level: slog.LevelDebug}))
			g := newGate(t, fixedPolicy{d: Decision{Mode: tt.mode}}, &GateOptions{Getenv: env("false"), Logger: logger})
			g.Call(context.Background(), testTool(t), alice, json.RawMessage(tt.args), tt.run)
			var line string
			for l := range strings.Lines(out.String()) {
				if strings.Contains(l, `msg="tool call"`) {
					line = l
				}
			}
			if !strings.Contains(line, " "+tt.want+" ") {
				t.Errorf("the call's line %q, want %s", line, tt.want)
			}
		})
	}
}
