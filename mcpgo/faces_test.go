package mcpgo_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/interlock-mcp/interlock"
	"github.com/interlock-mcp/interlock/approval"
	"github.com/interlock-mcp/interlock/audit"
	"github.com/interlock-mcp/interlock/mcpgo"
	"github.com/interlock-mcp/interlock/sqlite"
)

// billing is the policy both faces run: one tool per mode.
type billing struct{}

func (billing) Decide(_ context.Context, c *interlock.Call) (interlock.Decision, error) {
	id, _ := c.Args["id"].(string)
	switch c.Tool {
	case "get_customer":
		return interlock.Decision{Mode: interlock.ModeAllow, Rule: "reads"}, nil
	case "drop_table":
		return interlock.Decision{Mode: interlock.ModeDeny, Rule: "never"}, nil
	case "send_reminder":
		return interlock.Decision{Mode: interlock.ModeFlag, Rule: "reminders",
			Budgets: []interlock.Budget{{Name: "reminders", Limit: 1, Window: time.Hour}}}, nil
	case "upgrade_plan":
		return interlock.Decision{Mode: interlock.ModeToken, Rule: "plans",
			Summarize: func(any) string { return fmt.Sprintf("Move %s to plan %v.", id, c.Args["to"]) }}, nil
	case "delete_customer":
		return interlock.Decision{Mode: interlock.ModeElicit, Rule: "deletes",
			Preview: &interlock.PreviewCall{Tool: "get_customer", Args: map[string]any{"id": id}},
			Summarize: func(p any) string {
				m, _ := p.(map[string]any)
				return fmt.Sprintf("Delete %v and its invoices.", m["name"])
			},
			Form: interlock.Form{TypeBack: id}}, nil
	case "refund_invoice":
		return interlock.Decision{Mode: interlock.ModeApproval, Rule: "refunds", Approvers: []string{"bob"},
			Summarize: func(any) string { return fmt.Sprintf("Refund %v.", c.Args["amount"]) }}, nil
	}
	return interlock.Decision{Mode: interlock.ModeDeny}, nil
}

func (billing) ToolModes(tool, _ string, _ interlock.Hints) []interlock.Mode {
	switch tool {
	case "get_customer":
		return []interlock.Mode{interlock.ModeAllow}
	case "send_reminder":
		return []interlock.Mode{interlock.ModeFlag}
	case "upgrade_plan":
		return []interlock.Mode{interlock.ModeToken}
	case "delete_customer":
		return []interlock.Mode{interlock.ModeElicit, interlock.ModeToken}
	case "refund_invoice":
		return []interlock.Mode{interlock.ModeApproval}
	}
	return []interlock.Mode{interlock.ModeDeny}
}

func (billing) IsSecret(name string) bool                          { return name == "card_number" }
func (billing) HumanArgs(string, string, interlock.Hints) []string { return nil }

// tool is one tool of the billing server, written once for both faces.
type tool struct {
	name     string
	readOnly bool
	props    []string
}

var tools = []tool{
	{"get_customer", true, []string{"id"}},
	{"drop_table", false, []string{"table"}},
	{"send_reminder", false, []string{"id"}},
	{"upgrade_plan", false, []string{"id", "to"}},
	{"delete_customer", false, []string{"id"}},
	{"refund_invoice", false, []string{"invoice_id", "amount"}},
}

// schema is the tool's input schema; it refuses unknown arguments, so that
// mcp-go's input validation sees the meta-arguments only where the gate
// advertised them.
func (t tool) schema() map[string]any {
	props := map[string]any{}
	for _, p := range t.props {
		props[p] = map[string]any{"type": "string"}
	}
	if t.name == "refund_invoice" {
		props["amount"] = map[string]any{"type": "number"}
	}
	return map[string]any{"type": "object", "properties": props, "required": slices.Clone(t.props), "additionalProperties": false}
}

// run is what every tool does: get_customer knows one customer; the others
// say they ran, with their arguments.
func run(name string, args map[string]any) (map[string]any, error) {
	if name == "get_customer" {
		if args["id"] != "acct_9931" {
			return nil, interlock.Errorf(interlock.CodeNotFound, "Call list_customers to find a valid id, then retry.", "No customer %v.", args["id"])
		}
		return map[string]any{"name": "Northwind Traders", "plan": "pro"}, nil
	}
	return map[string]any{"ran": name, "args": args}, nil
}

// human answers every form one way and remembers the forms it saw.
type human struct {
	action  string
	content map[string]any

	mu    sync.Mutex
	forms []string
}

func (h *human) saw(message string, schema any) {
	b, _ := json.Marshal(schema)
	h.mu.Lock()
	h.forms = append(h.forms, message+" "+string(b))
	h.mu.Unlock()
}

func (h *human) Elicit(_ context.Context, req mcp.ElicitationRequest) (*mcp.ElicitationResult, error) {
	h.saw(req.Params.Message, req.Params.RequestedSchema)
	return &mcp.ElicitationResult{ElicitationResponse: mcp.ElicitationResponse{Action: mcp.ElicitationResponseAction(h.action), Content: h.content}}, nil
}

func (h *human) elicitSDK(_ context.Context, req *sdk.ElicitRequest) (*sdk.ElicitResult, error) {
	h.saw(req.Params.Message, req.Params.RequestedSchema)
	return &sdk.ElicitResult{Action: h.action, Content: h.content}, nil
}

// caller calls a tool through a face's own client and returns the result's
// structured content as JSON, and whether it is an error.
type caller func(ctx context.Context, tool string, args map[string]any) (string, bool)

// face builds a server with one library face of the gate and connects that
// library's client to it, speaking proto.
type face struct {
	name    string
	connect func(t *testing.T, g *interlock.Gate, proto string, h *human) caller
}

const (
	modern = "2026-07-28"
	legacy = "2025-11-25"
)

var faces = []face{
	{"go-sdk", connectSDK},
	{"mcp-go AddTool", func(t *testing.T, g *interlock.Gate, proto string, h *human) caller {
		s := server.NewMCPServer("billing", "1.0.0", server.WithInputSchemaValidation(), server.WithElicitation())
		for _, tt := range tools {
			mcpgo.AddTool(s, g, mcpTool(tt), mcpHandler)
		}
		return connectMCPGo(t, s, proto, h)
	}},
	{"mcp-go Middleware", func(t *testing.T, g *interlock.Gate, proto string, h *human) caller {
		s := server.NewMCPServer("billing", "1.0.0", server.WithInputSchemaValidation(), server.WithElicitation())
		for _, tt := range tools {
			s.AddTool(mcpTool(tt), mcpHandler)
		}
		s.Use(mcpgo.Middleware(g, s))
		return connectMCPGo(t, s, proto, h)
	}},
}

func connectSDK(t *testing.T, g *interlock.Gate, proto string, h *human) caller {
	s := sdk.NewServer(&sdk.Implementation{Name: "billing", Version: "1.0.0"}, nil)
	for _, tt := range tools {
		g.AddTool(s, &sdk.Tool{Name: tt.name, InputSchema: tt.schema(),
			Annotations: &sdk.ToolAnnotations{ReadOnlyHint: tt.readOnly}},
			func(_ context.Context, req *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
				var args map[string]any
				if err := json.Unmarshal(req.Params.Arguments, &args); err != nil {
					return nil, err
				}
				out, err := run(req.Params.Name, args)
				if err != nil {
					return nil, err
				}
				b, _ := json.Marshal(out)
				return &sdk.CallToolResult{StructuredContent: json.RawMessage(b), Content: []sdk.Content{&sdk.TextContent{Text: string(b)}}}, nil
			})
	}
	ctx := context.Background()
	st, ct := sdk.NewInMemoryTransports()
	ss, err := s.Connect(ctx, st, nil)
	if err != nil {
		t.Fatal(err)
	}
	opts := &sdk.ClientOptions{}
	if h != nil {
		opts.ElicitationHandler = h.elicitSDK
	}
	cs, err := sdk.NewClient(&sdk.Implementation{Name: "agent", Version: "1.0.0"}, opts).Connect(ctx, ct, &sdk.ClientSessionOptions{ProtocolVersion: proto})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cs.Close(); ss.Wait() })
	return func(ctx context.Context, tool string, args map[string]any) (string, bool) {
		res, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: tool, Arguments: args})
		if err != nil {
			t.Fatalf("go-sdk: calling %s: %v", tool, err)
		}
		return bodyOf(res.StructuredContent, res.Content[0].(*sdk.TextContent).Text), res.IsError
	}
}

// bodyOf is what a face's client got: the text block as sent, which
// carries the gate's bytes, and the structured content as a value.
func bodyOf(structured any, text string) string {
	b, _ := json.Marshal(structured)
	return text + "\n" + string(b)
}

func mcpTool(tt tool) mcp.Tool {
	b, _ := json.Marshal(tt.schema())
	return mcp.Tool{Name: tt.name, RawInputSchema: b, Annotations: mcp.ToolAnnotation{ReadOnlyHint: &tt.readOnly}}
}

func mcpHandler(_ context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	out, err := run(req.Params.Name, req.GetArguments())
	if err != nil {
		return nil, err
	}
	b, _ := json.Marshal(out)
	return &mcp.CallToolResult{StructuredContent: json.RawMessage(b), Content: []mcp.Content{mcp.NewTextContent(string(b))}}, nil
}

func connectMCPGo(t *testing.T, s *server.MCPServer, proto string, h *human) caller {
	opts := []client.ClientOption{client.WithProtocolVersion(proto)}
	if h != nil {
		opts = append(opts, client.WithElicitationHandler(h))
	}
	c, err := client.NewInProcessClientWithOptions(s, opts...)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := c.Start(ctx); err != nil {
		t.Fatal(err)
	}
	init := mcp.InitializeRequest{}
	init.Params.ProtocolVersion = proto
	init.Params.ClientInfo = mcp.Implementation{Name: "agent", Version: "1.0.0"}
	if _, err := c.Initialize(ctx, init); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return func(ctx context.Context, tool string, args map[string]any) (string, bool) {
		req := mcp.CallToolRequest{}
		req.Params.Name, req.Params.Arguments = tool, args
		res, err := c.CallTool(ctx, req)
		if err != nil {
			t.Fatalf("mcp-go: calling %s: %v", tool, err)
		}
		text, _ := mcp.AsTextContent(res.Content[0])
		if text == nil {
			t.Fatalf("mcp-go: %s answered no text: %+v", tool, res)
		}
		return bodyOf(res.StructuredContent, text.Text), res.IsError
	}
}

// step is one call of a case, or an approver's vote on the last approval.
type step struct {
	tool string
	args map[string]any // "$token" stands for the last confirm token
	vote approval.Verdict
	want string // the error code, or "ran"
}

// outcome is what one face gave for a case, made comparable: volatile
// values (tokens, approval ids, times) replaced by their names.
type outcome struct {
	results []string
	audit   []string
	forms   []string
}

var retryAfter = regexp.MustCompile(`"retry_after_ms":\d+`)

var bob = interlock.Identity{Principal: "bob", Tenant: interlock.TenantLocal}

func (tc faceCase) runOn(t *testing.T, f face) outcome {
	ctx := context.Background()
	dir := t.TempDir()
	path := filepath.Join(dir, "approvals.db")
	mine, err := sqlite.OpenApprovals(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { mine.Close() })
	theirs, err := sqlite.OpenApprovals(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { theirs.Close() })
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	dryRun := "false"
	if tc.dryRun {
		dryRun = "true"
	}
	log := &audit.Memory{}
	g, err := interlock.NewGate(billing{}, &interlock.GateOptions{Logger: quiet, Audit: log, Approvals: interlock.NewApprovalService(interlock.ApprovalOptions{Store: mine, Audit: log}),
		ApprovalURL: "http://127.0.0.1:8740/console/approvals",
		Getenv:      func(k string) string { return map[string]string{"MCP_DRY_RUN": dryRun}[k] }})
	if err != nil {
		t.Fatal(err)
	}
	// Another process: an approval service of its own on the same store.
	approver := interlock.NewApprovalService(interlock.ApprovalOptions{Store: theirs, Logger: quiet})
	var h *human
	if tc.human != nil {
		h = &human{action: tc.human.action, content: tc.human.content}
	}
	call := f.connect(t, g, tc.proto, h)

	var out outcome
	var token, approvalID string
	volatile := map[string]string{}
	for i, s := range tc.steps {
		if s.vote != "" {
			if _, err := approver.Decide(ctx, approvalID, bob, s.vote, "checked"); err != nil {
				t.Fatalf("step %d: deciding %s: %v", i, approvalID, err)
			}
			continue
		}
		args := maps.Clone(s.args)
		for k, v := range args {
			if v == "$token" {
				args[k] = token
			}
		}
		body, isError := call(ctx, s.tool, args)
		var b struct {
			Code         string `json:"code"`
			ConfirmToken string `json:"confirm_token"`
			ApprovalID   string `json:"approval_id"`
			ExpiresAt    string `json:"expires_at"`
		}
		if err := json.Unmarshal([]byte(body[strings.LastIndexByte(body, '\n')+1:]), &b); err != nil {
			t.Fatalf("step %d: %s: %v", i, body, err)
		}
		got := "ran"
		if isError {
			got = b.Code
		}
		if got != s.want {
			t.Errorf("step %d: %s answered %s, want %s: %s", i, s.tool, got, s.want, body)
		}
		if b.ConfirmToken != "" {
			token = b.ConfirmToken
			volatile[token] = fmt.Sprintf("<token %d>", len(volatile))
		}
		if b.ApprovalID != "" {
			approvalID = b.ApprovalID
			if _, ok := volatile[approvalID]; !ok {
				volatile[approvalID] = fmt.Sprintf("<approval %d>", len(volatile))
			}
		}
		if b.ExpiresAt != "" {
			volatile[b.ExpiresAt] = "<time>"
		}
		out.results = append(out.results, body)
	}
	for r, err := range log.Records(ctx, 1) {
		if err != nil {
			t.Fatal(err)
		}
		// What differs by time, or by the session a library's client
		// opened, is not the gate's decision.
		r.Time, r.Prev, r.Hash, r.LatencyMS, r.Client, r.Session, r.Raw = time.Time{}, "", "", 0, "", "", nil
		b, _ := json.Marshal(r)
		out.audit = append(out.audit, string(b))
	}
	if _, err := audit.Verify(log.Records(ctx, 1)); err != nil {
		t.Errorf("audit chain: %v", err)
	}
	if h != nil {
		out.forms = h.forms
	}
	for _, list := range [][]string{out.results, out.audit} {
		for i := range list {
			for from, to := range volatile {
				list[i] = strings.ReplaceAll(list[i], from, to)
			}
			// How long to wait counts down while the case runs.
			list[i] = retryAfter.ReplaceAllString(list[i], `"retry_after_ms":<ms>`)
		}
	}
	return out
}

type faceCase struct {
	name   string
	dryRun bool
	proto  string
	human  *human
	steps  []step
}

func faceCases() []faceCase {
	id := map[string]any{"id": "acct_9931"}
	with := func(extra map[string]any) map[string]any {
		m := maps.Clone(id)
		maps.Copy(m, extra)
		return m
	}
	plan := with(map[string]any{"to": "scale"})
	refund := map[string]any{"invoice_id": "inv_1001", "amount": 5000}
	accept := &human{action: "accept", content: map[string]any{"confirm": true, "type_back": "acct_9931"}}
	cases := []faceCase{
		{name: "allow runs with dry run on", dryRun: true, proto: modern,
			steps: []step{{tool: "get_customer", args: id, want: "ran"}}},
		{name: "deny", proto: modern,
			steps: []step{{tool: "drop_table", args: map[string]any{"table": "customers"}, want: "TOOL_NOT_ALLOWED"}}},
		{name: "unknown meta-argument", proto: modern,
			steps: []step{{tool: "get_customer", args: with(map[string]any{"__force": true}), want: "VALIDATION_FAILED"}}},
		{name: "flag: dry run on", dryRun: true, proto: modern,
			steps: []step{{tool: "send_reminder", args: with(map[string]any{"__confirm": true}), want: "DRY_RUN_PREVIEW"}}},
		{name: "flag: missing, then confirmed, then over budget", proto: modern, steps: []step{
			{tool: "send_reminder", args: id, want: "DRY_RUN_PREVIEW"},
			{tool: "send_reminder", args: with(map[string]any{"__confirm": true}), want: "ran"},
			{tool: "send_reminder", args: with(map[string]any{"__confirm": true}), want: "RATE_LIMITED"}}},
		{name: "token: dry run on", dryRun: true, proto: modern,
			steps: []step{{tool: "upgrade_plan", args: plan, want: "DRY_RUN_PREVIEW"}}},
		{name: "token: redeemed once, replay refused", proto: modern, steps: []step{
			{tool: "upgrade_plan", args: plan, want: "CONFIRMATION_REQUIRED"},
			{tool: "upgrade_plan", args: with(map[string]any{"to": "scale", "__confirm_token": "$token"}), want: "ran"},
			{tool: "upgrade_plan", args: with(map[string]any{"to": "scale", "__confirm_token": "$token"}), want: "CONSENT_TOKEN_INVALID"}}},
		{name: "token: other arguments", proto: modern, steps: []step{
			{tool: "upgrade_plan", args: plan, want: "CONFIRMATION_REQUIRED"},
			{tool: "upgrade_plan", args: with(map[string]any{"to": "enterprise", "__confirm_token": "$token"}), want: "CONSENT_TOKEN_MISMATCH"}}},
		{name: "elicit: dry run on", dryRun: true, proto: modern, human: accept,
			steps: []step{{tool: "delete_customer", args: id, want: "DRY_RUN_PREVIEW"}}},
		{name: "elicit: preview not found", proto: modern, human: accept,
			steps: []step{{tool: "delete_customer", args: map[string]any{"id": "acct_0000"}, want: "NOT_FOUND"}}},
		{name: "elicit: no form, token fallback", proto: modern, steps: []step{
			{tool: "delete_customer", args: id, want: "CONFIRMATION_REQUIRED"},
			{tool: "delete_customer", args: with(map[string]any{"__confirm_token": "$token"}), want: "ran"}}},
		{name: "approval: dry run on", dryRun: true, proto: modern,
			steps: []step{{tool: "refund_invoice", args: refund, want: "DRY_RUN_PREVIEW"}}},
		{name: "approval: approved by another process, runs once", proto: modern, steps: []step{
			{tool: "refund_invoice", args: refund, want: "APPROVAL_PENDING"},
			{tool: "refund_invoice", args: refund, want: "APPROVAL_PENDING"},
			{vote: approval.Approve},
			{tool: "refund_invoice", args: refund, want: "ran"},
			{tool: "refund_invoice", args: refund, want: "APPROVAL_PENDING"}}},
		{name: "approval: denied by another process", proto: modern, steps: []step{
			{tool: "refund_invoice", args: refund, want: "APPROVAL_PENDING"},
			{vote: approval.Deny},
			{tool: "refund_invoice", args: refund, want: "DECLINED"}}},
	}
	for _, proto := range []string{modern, legacy} {
		for _, e := range []struct {
			name  string
			human *human
			want  string
		}{
			{"accept", accept, "ran"},
			{"wrong id typed", &human{action: "accept", content: map[string]any{"confirm": true, "type_back": "acct_1024"}}, "DECLINED"},
			{"decline", &human{action: "decline"}, "DECLINED"},
			{"cancel", &human{action: "cancel"}, "CANCELLED"},
		} {
			cases = append(cases, faceCase{name: "elicit " + proto + ": " + e.name, proto: proto, human: e.human,
				steps: []step{{tool: "delete_customer", args: id, want: e.want}}})
		}
	}
	return cases
}

// TestFaces runs every case on a go-sdk server and on mcp-go servers, each
// through its own library's client, and wants the same error bodies, forms
// and audit records from each.
func TestFaces(t *testing.T) {
	for _, tc := range faceCases() {
		t.Run(tc.name, func(t *testing.T) {
			outs := make([]outcome, len(faces))
			for i, f := range faces {
				t.Run(f.name, func(t *testing.T) { outs[i] = tc.runOn(t, f) })
			}
			for i := 1; i < len(faces); i++ {
				for _, part := range []struct {
					what       string
					base, this []string
				}{
					{"results", outs[0].results, outs[i].results},
					{"audit records", outs[0].audit, outs[i].audit},
					{"forms", outs[0].forms, outs[i].forms},
				} {
					if !slices.Equal(part.base, part.this) {
						t.Errorf("%s differ between %s and %s:\n%s\n%s", part.what, faces[0].name, faces[i].name,
							strings.Join(part.base, "\n"), strings.Join(part.this, "\n"))
					}
				}
			}
		})
	}
}

// TestArgumentsInAnotherCase: mcp-go binds a typed handler's arguments
// with encoding/json, which takes "Amount" for the field named amount.
// Reached directly, such a server runs with an amount that a gate in front
// of it, reading the arguments as written, would not have seen at all (a
// rule on args.amount would not apply); behind the gate, the call is
// refused and the handler is not called.
func TestArgumentsInAnotherCase(t *testing.T) {
	var bound []float64
	handler := mcp.NewTypedToolHandler(func(_ context.Context, _ mcp.CallToolRequest, a struct {
		Amount float64 `json:"amount"`
	}) (*mcp.CallToolResult, error) {
		bound = append(bound, a.Amount)
		return mcp.NewToolResultText("quoted"), nil
	})
	quote := mcp.NewTool("quote_refund", mcp.WithNumber("amount"), mcp.WithReadOnlyHintAnnotation(true))
	args := map[string]any{"Amount": 5000}

	direct := server.NewMCPServer("billing", "1.0.0")
	direct.AddTool(quote, handler)
	if _, failed := connectMCPGo(t, direct, modern, nil)(t.Context(), "quote_refund", args); failed || !slices.Equal(bound, []float64{5000}) {
		t.Fatalf("mcp-go bound %v: the case this test guards against is gone", bound)
	}

	g, err := interlock.NewGate(interlock.ByAnnotations{Mode: interlock.ModeFlag}, &interlock.GateOptions{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	gated := server.NewMCPServer("billing", "1.0.0")
	mcpgo.AddTool(gated, g, quote, handler)
	body, failed := connectMCPGo(t, gated, modern, nil)(t.Context(), "quote_refund", args)
	if !failed || !strings.Contains(body, `"code":"VALIDATION_FAILED"`) || !strings.Contains(body, `"case_twin"`) || len(bound) != 1 {
		t.Errorf("behind the gate: %s (handler bound %v)", body, bound)
	}
}
