package interlock

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/interlock-mcp/interlock/redact"
)

// previewPolicy gates upgrade_plan in one mode and names get_customer,
// called with the call's customer id, as its preview.
type previewPolicy struct{ mode Mode }

func (p previewPolicy) Decide(_ context.Context, c *Call) (Decision, error) {
	if c.Tool == "get_customer" {
		return Decision{Mode: ModeAllow}, nil
	}
	return Decision{
		Mode:     p.mode,
		Rule:     "plan-changes",
		Fallback: ModeToken,
		Preview:  &PreviewCall{Tool: "get_customer", Args: map[string]any{"id": c.Args["customer_id"]}},
		Summarize: func(preview any) string {
			m, _ := preview.(map[string]any)
			return fmt.Sprintf("Move %v to %v.", m["name"], c.Args["to"])
		},
	}, nil
}
func (p previewPolicy) ToolModes(string, string, Hints) []Mode { return []Mode{p.mode, ModeToken} }
func (previewPolicy) IsSecret(name string) bool                { return redact.IsSecret(name, nil) }
func (previewPolicy) HumanArgs(string, string, Hints) []string { return nil }

// previewAnswer is what the fake preview answers: a result, or an error
// from its runner (as the gateway's runner gives for a failed upstream).
type previewAnswer struct {
	res *mcp.CallToolResult
	err error
}

// previewRig is a gate in front of a counting upgrade_plan whose preview
// answers by customer id.
type previewRig struct {
	gate    *Gate
	tool    *Tool
	answers map[string]previewAnswer
	runs    atomic.Int64
	log     bytes.Buffer
}

func newPreviewRig(t *testing.T, mode Mode, dryRun string, answers map[string]previewAnswer) *previewRig {
	t.Helper()
	r := &previewRig{answers: answers}
	r.gate = newGate(t, previewPolicy{mode: mode}, &GateOptions{Getenv: env(dryRun), Logger: slog.New(slog.NewTextHandler(&r.log, nil))})
	preview, err := NewTool("get_customer", "", Hints{ReadOnly: true}, nil)
	if err != nil {
		t.Fatal(err)
	}
	r.gate.Register(preview, func(_ context.Context, raw json.RawMessage) (*mcp.CallToolResult, error) {
		var in struct{ ID string }
		if err := json.Unmarshal(raw, &in); err != nil {
			return nil, err
		}
		a, ok := r.answers[in.ID]
		if !ok {
			return nil, fmt.Errorf("the test gave no answer for %q", in.ID)
		}
		return a.res, a.err
	})
	if r.tool, err = NewTool("upgrade_plan", "", HintsOf(nil), nil); err != nil {
		t.Fatal(err)
	}
	return r
}

func (r *previewRig) call(args string, ex Exchange) *mcp.CallToolResult {
	return r.gate.CallWith(context.Background(), r.tool, alice, json.RawMessage(args), ex,
		func(context.Context, json.RawMessage) (*mcp.CallToolResult, error) {
			r.runs.Add(1)
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "upgraded"}}}, nil
		})
}

func upgrade(customer string) string {
	return fmt.Sprintf(`{"customer_id":%q,"to":"scale"}`, customer)
}

// plainError is an error result without an interlock body, as any tool may
// answer; its text quotes internals.
func plainError(text string) *mcp.CallToolResult {
	return &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: text}}}
}

const leakyText = `pq: relation "customers" does not exist (/srv/billing/store.go:88)`

var (
	foundNorthwind = previewAnswer{res: &mcp.CallToolResult{StructuredContent: map[string]any{"name": "Northwind Traders", "plan": "pro"}}}
	notHigher      = previewAnswer{res: Result(&Error{
		Code:             CodeValidationFailed,
		Message:          "scale is not a higher plan than acct_1024's current plan scale.",
		Hint:             "Pick a higher plan, or call downgrade_plan.",
		SuggestedTool:    "downgrade_plan",
		ValidationIssues: []ValidationIssue{{Path: "to", Message: "must be a higher plan", Code: "direction"}, {Path: "id", Message: "unused", Code: "x"}},
	})}
)

// TestPreviewVerdicts checks how each answer of a preview ends a call in
// token mode: a deterministic error is the call's own, anything else is a
// preview that failed, and no preview text that could be internal leaks.
func TestPreviewVerdicts(t *testing.T) {
	tests := []struct {
		name      string
		answer    previewAnswer
		wantCode  Code
		retriable bool
		// message parts the body must carry, and parts it must not.
		says, hides []string
		wantHint    string
		wantIssues  []string // paths
		wantSuggest string
	}{
		{name: "found: the summary is asked for", answer: foundNorthwind, wantCode: CodeConfirmationRequired},
		{name: "VALIDATION_FAILED is the call's", answer: notHigher, wantCode: CodeValidationFailed,
			says:     []string{"upgrade_plan cannot succeed", "nobody was asked", "scale is not a higher plan"},
			wantHint: "Pick a higher plan, or call downgrade_plan.", wantIssues: []string{"to"}, wantSuggest: "downgrade_plan"},
		{name: "NOT_FOUND is the call's", answer: previewAnswer{res: Result(Errorf(CodeNotFound, "Call list_customers to find a valid id.", "No customer has id %q.", "acct_0000"))},
			wantCode: CodeNotFound, says: []string{"Nothing for upgrade_plan to act on", "acct_0000"}, wantHint: "Call list_customers to find a valid id."},
		{name: "PERMISSION_DENIED is the call's", answer: previewAnswer{res: Result(&Error{Code: CodePermissionDenied,
			Message: "You may not read acct_1024.", Hint: "Ask an administrator for billing:read.", MissingPermissions: []string{"billing:read"}})},
			wantCode: CodePermissionDenied, says: []string{"upgrade_plan cannot succeed", "You may not read acct_1024."}, wantHint: "Ask an administrator for billing:read."},
		{name: "a verdict without a hint gets the gate's", answer: previewAnswer{res: Result(&Error{Code: CodeValidationFailed, Message: "Bad plan."})},
			wantCode: CodeValidationFailed, says: []string{"Bad plan."},
			wantHint: "Change the arguments of upgrade_plan as the message says, then call it again; nothing was changed."},
		{name: "a verdict from the runner is the call's", answer: previewAnswer{err: Errorf(CodeValidationFailed, "Fix the id.", "The id is malformed.")},
			wantCode: CodeValidationFailed, says: []string{"The id is malformed."}, wantHint: "Fix the id."},
		{name: "UPSTREAM_TIMEOUT answered is a failed preview", answer: previewAnswer{res: Result(Errorf(CodeUpstreamTimeout, "Retry later.", "The billing database timed out."))},
			wantCode: CodeUpstreamError, retriable: true, says: []string{"its preview get_customer failed"}, hides: []string{"billing database"}},
		{name: "UPSTREAM_TIMEOUT from the runner is a failed preview", answer: previewAnswer{err: Errorf(CodeUpstreamTimeout, "Check state.", "The server behind get_customer did not answer within 5m0s.")},
			wantCode: CodeUpstreamError, retriable: true, says: []string{"its preview get_customer failed"}, hides: []string{"5m0s"}},
		{name: "INTERNAL_ERROR is a failed preview", answer: previewAnswer{res: Result(errors.New(leakyText))},
			wantCode: CodeUpstreamError, retriable: true, hides: []string{"pq:", "store.go"}},
		{name: "plain error text does not leak", answer: previewAnswer{res: plainError(leakyText)},
			wantCode: CodeUpstreamError, retriable: true, says: []string{"its preview get_customer failed"}, hides: []string{"pq:", "store.go", "customers"}},
		{name: "a plain Go error does not leak", answer: previewAnswer{err: errors.New(leakyText)},
			wantCode: CodeUpstreamError, retriable: true, hides: []string{"pq:", "store.go"}},
		{name: "an unknown code is a failed preview", answer: previewAnswer{res: plainError(`{"code":"DB_DOWN","message":` + fmt.Sprintf("%q", leakyText) + `}`)},
			wantCode: CodeUpstreamError, retriable: true, hides: []string{"DB_DOWN", "pq:"}},
		{name: "a preview that asks for its own confirmation is misconfigured", answer: previewAnswer{res: Result(&Error{
			Code: CodeConfirmationRequired, Message: "get_customer needs confirmation.", Hint: "h", ConfirmToken: "ilt1_preview", TTLSeconds: 60})},
			wantCode: CodeInternal, hides: []string{"ilt1_preview", "get_customer needs"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := newPreviewRig(t, ModeToken, "false", map[string]previewAnswer{"acct_9931": tt.answer})
			res := r.call(upgrade("acct_9931"), Exchange{})
			body := decodeBody(t, res)
			if body.Code != tt.wantCode || body.Retriable != tt.retriable {
				t.Fatalf("code %s retriable %v, want %s %v: %+v", body.Code, body.Retriable, tt.wantCode, tt.retriable, body)
			}
			if r.runs.Load() != 0 {
				t.Errorf("upgrade_plan ran %d times", r.runs.Load())
			}
			if tt.wantCode == CodeConfirmationRequired {
				if body.Summary != "Move Northwind Traders to scale." || body.ConfirmToken == "" {
					t.Errorf("body = %+v", body)
				}
				return
			}
			if body.ConfirmToken != "" || body.ConfirmRequired || body.Summary != "" || body.Preview != nil {
				t.Errorf("a refused call carries a confirmation: %+v", body)
			}
			wire := res.Content[0].(*mcp.TextContent).Text
			for _, part := range tt.says {
				if !strings.Contains(body.Message, part) {
					t.Errorf("message %q does not say %q", body.Message, part)
				}
			}
			for _, part := range tt.hides {
				if strings.Contains(wire, part) {
					t.Errorf("the result leaks %q: %s", part, wire)
				}
			}
			if tt.wantHint != "" && body.RecoveryHint != tt.wantHint {
				t.Errorf("hint %q, want %q", body.RecoveryHint, tt.wantHint)
			}
			var paths []string
			for _, issue := range body.ValidationIssues {
				paths = append(paths, issue.Path)
			}
			if !slices.Equal(paths, tt.wantIssues) {
				t.Errorf("validation issue paths %v, want %v (issues naming no argument of the call are dropped)", paths, tt.wantIssues)
			}
			if body.SuggestedTool != tt.wantSuggest {
				t.Errorf("suggested_tool %q, want %q", body.SuggestedTool, tt.wantSuggest)
			}
		})
	}
}

// TestPreviewFailureIsLogged checks that the text kept from the client
// reaches the operator.
func TestPreviewFailureIsLogged(t *testing.T) {
	r := newPreviewRig(t, ModeToken, "false", map[string]previewAnswer{"acct_9931": {res: plainError(leakyText)}})
	if code := decodeBody(t, r.call(upgrade("acct_9931"), Exchange{})).Code; code != CodeUpstreamError {
		t.Fatalf("code %s", code)
	}
	if !strings.Contains(r.log.String(), "store.go:88") {
		t.Errorf("the log lacks the preview's text:\n%s", r.log.String())
	}
}

// TestPreviewVerdictAsksNobody runs a call its preview refuses through
// every mode that describes a call: no dry-run preview, no token, no form,
// and nothing runs. The same call with a preview that finds the customer is
// described as usual.
func TestPreviewVerdictAsksNobody(t *testing.T) {
	answers := map[string]previewAnswer{"acct_9931": foundNorthwind, "acct_1024": notHigher}
	tests := []struct {
		name   string
		mode   Mode
		dryRun string
		ex     func(*human) Exchange
		// described is the code of the valid call when no form is asked.
		described Code
	}{
		{"flag, dry run on", ModeFlag, "", nil, CodeDryRunPreview},
		{"flag, dry run off", ModeFlag, "false", nil, CodeDryRunPreview},
		{"token, dry run on", ModeToken, "", nil, CodeDryRunPreview},
		{"token", ModeToken, "false", nil, CodeConfirmationRequired},
		{"elicit, dry run on", ModeElicit, "", nil, CodeDryRunPreview},
		{"elicit, no form: token fallback", ModeElicit, "false", nil, CodeConfirmationRequired},
		{"elicit, input requests", ModeElicit, "false", func(*human) Exchange { return Exchange{Form: true, Native: true} }, ""},
		{"elicit, elicitation on the session", ModeElicit, "false", func(h *human) Exchange {
			return Exchange{Form: true, Ask: func(ctx context.Context, p *mcp.ElicitParams) (*mcp.ElicitResult, error) {
				return h.answer(ctx, &mcp.ElicitRequest{Params: p})
			}}
		}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := newPreviewRig(t, tt.mode, tt.dryRun, answers)
			h := &human{action: "decline"}
			var ex Exchange
			if tt.ex != nil {
				ex = tt.ex(h)
			}

			res := r.call(upgrade("acct_1024"), ex)
			if res.InputRequests != nil || res.RequestState != "" {
				t.Fatalf("a form was sent for a call that cannot succeed: %+v", res)
			}
			body := decodeBody(t, res)
			if body.Code != CodeValidationFailed || body.ConfirmToken != "" || body.Summary != "" {
				t.Errorf("refused call: %+v", body)
			}
			if len(h.asked) != 0 || r.runs.Load() != 0 {
				t.Errorf("asked %d times, ran %d times; want neither", len(h.asked), r.runs.Load())
			}

			res = r.call(upgrade("acct_9931"), ex)
			switch {
			case ex.Native:
				if res.InputRequests == nil {
					t.Errorf("valid call: no form in %+v", res)
				}
			case ex.Ask != nil:
				if len(h.asked) != 1 || !strings.Contains(h.asked[0].Message, "Northwind Traders") {
					t.Errorf("valid call: asked %d times", len(h.asked))
				}
			default:
				if body := decodeBody(t, res); body.Code != tt.described || body.Summary != "Move Northwind Traders to scale." {
					t.Errorf("valid call: %+v, want %s with the summary", body, tt.described)
				}
			}
			if r.runs.Load() != 0 {
				t.Errorf("the valid call ran before anyone confirmed it")
			}
		})
	}
}

// TestPreviewVerdictKeepsEarlierToken checks that a refused call issues no
// token: describing it does not supersede the token of the call before.
func TestPreviewVerdictKeepsEarlierToken(t *testing.T) {
	r := newPreviewRig(t, ModeToken, "false", map[string]previewAnswer{"acct_9931": foundNorthwind, "acct_1024": notHigher})
	token := decodeBody(t, r.call(upgrade("acct_9931"), Exchange{})).ConfirmToken
	if code := decodeBody(t, r.call(upgrade("acct_1024"), Exchange{})).Code; code != CodeValidationFailed {
		t.Fatalf("refused call: %s", code)
	}
	if res := r.call(withToken(upgrade("acct_9931"), token), Exchange{}); res.IsError || r.runs.Load() != 1 {
		t.Errorf("the earlier token no longer runs its call: %+v, %d runs", res, r.runs.Load())
	}
}
