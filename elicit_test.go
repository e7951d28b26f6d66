package interlock

import (
	"context"
	"encoding/json"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/interlock-mcp/interlock/seal"
)

// elicitServer is a billing server whose delete_customer asks for the
// customer id typed back, and whose promote_release lets the human pick
// the environment; get_customer is the preview.
type elicitServer struct {
	server   *mcp.Server
	deleted  atomic.Int64
	promoted atomic.Value // the environment promote_release ran with
}

func newElicitServer(t *testing.T, dryRun string, fallback Mode) *elicitServer {
	t.Helper()
	e := &elicitServer{server: mcp.NewServer(&mcp.Implementation{Name: "billing"}, nil)}
	policy := elicitPolicy{fallback: fallback}
	g := newGate(t, policy, &GateOptions{Getenv: env(dryRun), Logger: quiet})
	AddTool(e.server, g, &mcp.Tool{Name: "get_customer", Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true}},
		func(_ context.Context, _ *mcp.CallToolRequest, in customerID) (*mcp.CallToolResult, map[string]any, error) {
			if in.ID != "acct_9931" {
				return nil, nil, Errorf(CodeNotFound, "Call list_customers to find a valid id, then retry.", "No customer %s.", in.ID)
			}
			return nil, map[string]any{"name": "Northwind Traders", "invoice_count": 3}, nil
		})
	AddTool(e.server, g, &mcp.Tool{Name: "delete_customer"},
		func(_ context.Context, _ *mcp.CallToolRequest, in customerID) (*mcp.CallToolResult, map[string]any, error) {
			e.deleted.Add(1)
			return nil, map[string]any{"deleted": in.ID}, nil
		})
	type promoteArgs struct {
		Service     string `json:"service"`
		Environment string `json:"environment" jsonschema:"staging or production"`
	}
	AddTool(e.server, g, &mcp.Tool{Name: "promote_release"},
		func(_ context.Context, _ *mcp.CallToolRequest, in promoteArgs) (*mcp.CallToolResult, map[string]any, error) {
			e.promoted.Store(in.Environment)
			return nil, map[string]any{"promoted": in.Service, "to": in.Environment}, nil
		})
	return e
}

// elicitPolicy puts delete_customer and promote_release in mode elicit.
type elicitPolicy struct{ fallback Mode }

func (p elicitPolicy) Decide(_ context.Context, c *Call) (Decision, error) {
	d := Decision{Mode: ModeElicit, Fallback: p.fallback, Rule: c.Tool}
	switch c.Tool {
	case "get_customer":
		return Decision{Mode: ModeAllow}, nil
	case "delete_customer":
		id, _ := c.Args["id"].(string)
		d.Preview = &PreviewCall{Tool: "get_customer", Args: map[string]any{"id": id}}
		d.Summarize = func(p any) string {
			m, _ := p.(map[string]any)
			return "Delete " + m["name"].(string) + " and its invoices. This cannot be undone."
		}
		d.Form = Form{TypeBack: id}
	case "promote_release":
		d.Form = Form{Confirm: "I understand this ships live traffic",
			Choices: []Choice{{Arg: "environment", Title: "Target environment", Options: []string{"staging", "production"}}}}
	}
	return d, nil
}
func (p elicitPolicy) ToolModes(tool, _ string, _ Hints) []Mode {
	if tool == "get_customer" {
		return []Mode{ModeAllow}
	}
	return []Mode{ModeElicit, ModeToken}
}
func (elicitPolicy) IsSecret(string) bool { return false }
func (elicitPolicy) HumanArgs(tool, _ string, _ Hints) []string {
	if tool == "promote_release" {
		return []string{"environment"}
	}
	return nil
}

// human answers every form the same way and remembers what it was asked.
type human struct {
	action  string
	content map[string]any
	asked   []*mcp.ElicitParams
}

func (h *human) answer(_ context.Context, req *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
	h.asked = append(h.asked, req.Params)
	return &mcp.ElicitResult{Action: h.action, Content: h.content}, nil
}

func connectVersion(t *testing.T, s *mcp.Server, version string, h *human) *mcp.ClientSession {
	t.Helper()
	ctx := context.Background()
	st, ct := mcp.NewInMemoryTransports()
	ss, err := s.Connect(ctx, st, nil)
	if err != nil {
		t.Fatal(err)
	}
	opts := &mcp.ClientOptions{}
	if h != nil {
		opts.ElicitationHandler = h.answer
	}
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "test"}, opts).Connect(ctx, ct, &mcp.ClientSessionOptions{ProtocolVersion: version})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cs.Close(); ss.Wait() })
	return cs
}

// TestElicit runs StockTrim's list for each elicit tool, on both protocol
// generations: MRTR input requests (2026-07-28) and the SDK's
// elicitation/create for earlier clients (2025-11-25).
func TestElicit(t *testing.T) {
	tests := []struct {
		name     string
		tool     string
		args     map[string]any
		human    human
		wantCode Code // empty: the call ran
		asked    bool
	}{
		{"delete: accept with the id typed back", "delete_customer", map[string]any{"id": "acct_9931"},
			human{action: "accept", content: map[string]any{"confirm": true, "type_back": "acct_9931"}}, "", true},
		{"delete: typed value does not match", "delete_customer", map[string]any{"id": "acct_9931"},
			human{action: "accept", content: map[string]any{"confirm": true, "type_back": "acct_1024"}}, CodeDeclined, true},
		{"delete: box not ticked", "delete_customer", map[string]any{"id": "acct_9931"},
			human{action: "accept", content: map[string]any{"confirm": false, "type_back": "acct_9931"}}, CodeDeclined, true},
		{"delete: accept without content", "delete_customer", map[string]any{"id": "acct_9931"},
			human{action: "accept"}, CodeDeclined, true},
		{"delete: decline", "delete_customer", map[string]any{"id": "acct_9931"}, human{action: "decline"}, CodeDeclined, true},
		{"delete: cancel", "delete_customer", map[string]any{"id": "acct_9931"}, human{action: "cancel"}, CodeCancelled, true},
		{"delete: not found skips the question", "delete_customer", map[string]any{"id": "acct_0000"},
			human{action: "accept"}, CodeNotFound, false},
		{"promote: the human picks the environment", "promote_release", map[string]any{"service": "web"},
			human{action: "accept", content: map[string]any{"confirm": true, "environment": "staging"}}, "", true},
		{"promote: the human's pick replaces the model's", "promote_release", map[string]any{"service": "web", "environment": "production"},
			human{action: "accept", content: map[string]any{"confirm": true, "environment": "staging"}}, "", true},
		{"promote: decline", "promote_release", map[string]any{"service": "web"}, human{action: "decline"}, CodeDeclined, true},
		{"promote: cancel", "promote_release", map[string]any{"service": "web"}, human{action: "cancel"}, CodeCancelled, true},
	}
	for _, version := range []string{"2026-07-28", "2025-11-25"} {
		for _, tt := range tests {
			t.Run(version+"/"+tt.name, func(t *testing.T) {
				e := newElicitServer(t, "false", "")
				h := tt.human
				cs := connectVersion(t, e.server, version, &h)
				res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: tt.tool, Arguments: tt.args})
				if err != nil {
					t.Fatal(err)
				}
				ran := e.deleted.Load() > 0 || e.promoted.Load() != nil
				if tt.wantCode == "" {
					if res.IsError || !ran {
						t.Fatalf("want the call to run: ran=%v %+v", ran, res.StructuredContent)
					}
				} else {
					if ran {
						t.Fatal("the call ran")
					}
					if got := decodeBody(t, res).Code; got != tt.wantCode {
						t.Fatalf("code = %s, want %s (%s)", got, tt.wantCode, decodeBody(t, res).Message)
					}
				}
				if (len(h.asked) > 0) != tt.asked {
					t.Fatalf("asked the human %d times, want asked=%v", len(h.asked), tt.asked)
				}
				if !tt.asked {
					return
				}
				form := h.asked[0]
				if tt.tool == "delete_customer" && !strings.Contains(form.Message, "Northwind Traders") {
					t.Errorf("the preview is not in the message: %q", form.Message)
				}
				if tt.tool == "promote_release" && tt.wantCode == "" && e.promoted.Load() != "staging" {
					t.Errorf("promote_release ran with %v, want the human's staging", e.promoted.Load())
				}
				schema, _ := json.Marshal(form.RequestedSchema)
				if !strings.Contains(string(schema), `"confirm"`) {
					t.Errorf("form has no checkbox: %s", schema)
				}
			})
		}
	}
}

func TestElicitFallbackAndDryRun(t *testing.T) {
	tests := []struct {
		name     string
		dryRun   string
		fallback Mode
		human    *human // nil: the client declares no elicitation
		wantCode Code
	}{
		{"no elicitation: token by default", "false", "", nil, CodeConfirmationRequired},
		{"no elicitation: deny when the rule says so", "false", ModeDeny, nil, CodeToolNotAllowed},
		{"dry run asks nobody", "", "", &human{action: "accept"}, CodeDryRunPreview},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newElicitServer(t, tt.dryRun, tt.fallback)
			cs := connectVersion(t, e.server, "", tt.human)
			res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "delete_customer", Arguments: map[string]any{"id": "acct_9931"}})
			if err != nil {
				t.Fatal(err)
			}
			if got := decodeBody(t, res).Code; got != tt.wantCode {
				t.Errorf("code = %s, want %s", got, tt.wantCode)
			}
			if tt.human != nil && len(tt.human.asked) != 0 {
				t.Error("a human was asked under dry run")
			}
			if e.deleted.Load() != 0 {
				t.Error("the call ran")
			}
		})
	}
}

func TestAdvertisedElicitTools(t *testing.T) {
	e := newElicitServer(t, "false", "")
	cs := connectVersion(t, e.server, "", nil)
	res, err := cs.ListTools(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, tool := range res.Tools {
		if tool.Name != "promote_release" {
			continue
		}
		schema := tool.InputSchema.(map[string]any)
		props := schema["properties"].(map[string]any)
		if env, _ := props["environment"].(map[string]any); env["description"] != humanArgNote {
			t.Errorf("the argument a human picks is not marked as theirs: %v", props["environment"])
		}
		if req, _ := schema["required"].([]any); len(req) != 1 || req[0] != "service" {
			t.Errorf("required = %v", schema["required"])
		}
		if _, ok := props[MetaConfirmToken]; !ok {
			t.Errorf("the token fallback's meta-argument is not advertised: %v", props)
		}
	}
}

// TestRequestState drives the exchange by hand: a state is single use,
// bound to its call, sealed, and expires.
func TestRequestState(t *testing.T) {
	const args = `{"id":"acct_9931"}`
	accept := mcp.InputResponseMap{formRequestID: &mcp.ElicitResult{Action: "accept",
		Content: map[string]any{"confirm": true, "type_back": "acct_9931"}}}
	setup := func(t *testing.T) (*Gate, *Tool, *atomic.Int64, string) {
		g := newGate(t, elicitPolicy{}, &GateOptions{Getenv: env("false"), Logger: quiet})
		preview, _ := NewTool("get_customer", "", Hints{ReadOnly: true}, nil)
		g.Register(preview, func(context.Context, json.RawMessage) (*mcp.CallToolResult, error) {
			return &mcp.CallToolResult{StructuredContent: map[string]any{"name": "Northwind Traders"}}, nil
		})
		tool, _ := NewTool("delete_customer", "", HintsOf(nil), nil)
		var runs atomic.Int64
		res := g.CallWith(context.Background(), tool, alice, json.RawMessage(args), Exchange{Form: true}, nil)
		if res.InputRequests == nil || res.RequestState == "" || res.IsError {
			t.Fatalf("first call: %+v", res)
		}
		return g, tool, &runs, res.RequestState
	}
	retry := func(g *Gate, tool *Tool, runs *atomic.Int64, id Identity, args, state string) *mcp.CallToolResult {
		return g.CallWith(context.Background(), tool, id, json.RawMessage(args), Exchange{Form: true, Responses: accept, State: state},
			func(context.Context, json.RawMessage) (*mcp.CallToolResult, error) {
				runs.Add(1)
				return &mcp.CallToolResult{Content: []mcp.Content{}}, nil
			})
	}
	tests := []struct {
		name     string
		redeem   func(g *Gate, tool *Tool, runs *atomic.Int64, state string) *mcp.CallToolResult
		wantCode Code
		wantRuns int64
	}{
		{"answered once", func(g *Gate, tool *Tool, runs *atomic.Int64, st string) *mcp.CallToolResult {
			return retry(g, tool, runs, alice, args, st)
		}, "", 1},
		{"replayed", func(g *Gate, tool *Tool, runs *atomic.Int64, st string) *mcp.CallToolResult {
			retry(g, tool, runs, alice, args, st)
			return retry(g, tool, runs, alice, args, st)
		}, CodeConsentTokenInvalid, 1},
		{"tampered", func(g *Gate, tool *Tool, runs *atomic.Int64, st string) *mcp.CallToolResult {
			b := []byte(st)
			b[len(b)/3] ^= 0x04
			return retry(g, tool, runs, alice, args, string(b))
		}, CodeConsentTokenInvalid, 0},
		{"other arguments", func(g *Gate, tool *Tool, runs *atomic.Int64, st string) *mcp.CallToolResult {
			return retry(g, tool, runs, alice, `{"id":"acct_1024"}`, st)
		}, CodeConsentTokenMismatch, 0},
		{"other caller", func(g *Gate, tool *Tool, runs *atomic.Int64, st string) *mcp.CallToolResult {
			return retry(g, tool, runs, Identity{Principal: "mallory", Tenant: "acme"}, args, st)
		}, CodeConsentTokenMismatch, 0},
		{"a confirm token is not a request state", func(g *Gate, tool *Tool, runs *atomic.Int64, st string) *mcp.CallToolResult {
			return retry(g, tool, runs, alice, args, testSealer.Seal(mustOpen(t, st, 1)))
		}, CodeConsentTokenInvalid, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g, tool, runs, state := setup(t)
			res := tt.redeem(g, tool, runs, state)
			if tt.wantCode == "" {
				if res.IsError {
					t.Fatalf("want the call to run: %+v", decodeBody(t, res))
				}
			} else if got := decodeBody(t, res).Code; got != tt.wantCode {
				t.Fatalf("code = %s, want %s", got, tt.wantCode)
			}
			if runs.Load() != tt.wantRuns {
				t.Errorf("ran %d times, want %d", runs.Load(), tt.wantRuns)
			}
		})
	}
	t.Run("unanswered past the timeout", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			g, tool, runs, state := setup(t)
			time.Sleep(DefaultElicitTimeout + time.Second)
			if got := decodeBody(t, retry(g, tool, runs, alice, args, state)).Code; got != CodeCancelled {
				t.Errorf("code = %s, want CANCELLED", got)
			}
			if runs.Load() != 0 {
				t.Error("the call ran")
			}
		})
	})
}

// mustOpen re-seals a state's claims as another kind, to show kinds do not
// mix.
func mustOpen(t *testing.T, token string, kind byte) seal.Claims {
	t.Helper()
	c, err := testSealer.Open(token)
	if err != nil {
		t.Fatal(err)
	}
	c.Kind = seal.Kind(kind)
	return c
}

// TestInvalidChoice answers a form with a pick outside its options, which
// well-behaved clients refuse to send, so the exchange is driven by hand.
func TestInvalidChoice(t *testing.T) {
	g := newGate(t, elicitPolicy{}, &GateOptions{Getenv: env("false"), Logger: quiet})
	tool, _ := NewTool("promote_release", "", HintsOf(nil), nil)
	args := json.RawMessage(`{"service":"web"}`)
	first := g.CallWith(context.Background(), tool, alice, args, Exchange{Form: true}, nil)
	for _, pick := range []any{"moon", 7, nil} {
		answer := mcp.InputResponseMap{formRequestID: &mcp.ElicitResult{Action: "accept",
			Content: map[string]any{"confirm": true, "environment": pick}}}
		res := g.CallWith(context.Background(), tool, alice, args, Exchange{Responses: answer, State: first.RequestState},
			func(context.Context, json.RawMessage) (*mcp.CallToolResult, error) {
				t.Fatal("the call ran")
				return nil, nil
			})
		if got := decodeBody(t, res).Code; got != CodeDeclined {
			t.Errorf("pick %v: code %s", pick, got)
		}
		first = g.CallWith(context.Background(), tool, alice, args, Exchange{Form: true}, nil)
	}
}

// TestToolQuestionsAreRelayed has a guarded tool ask its own question (a
// multi round-trip input request): the question reaches the client's human,
// the answer and the tool's own state come back to the tool, and the
// gate's keys are not asked for again.
func TestToolQuestionsAreRelayed(t *testing.T) {
	for _, version := range []string{"2026-07-28", "2025-11-25"} {
		t.Run(version, func(t *testing.T) {
			s := mcp.NewServer(&mcp.Implementation{Name: "backups"}, nil)
			g := newGate(t, ByAnnotations{}, &GateOptions{Getenv: env("false"), Logger: quiet})
			var states []string
			g.AddTool(s, &mcp.Tool{Name: "restore", InputSchema: map[string]any{"type": "object"}},
				func(_ context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
					states = append(states, req.Params.RequestState)
					if req.Params.RequestState == "" {
						return &mcp.CallToolResult{
							InputRequests: mcp.InputRequestMap{"which": &mcp.ElicitParams{Mode: "form", Message: "Which backup?",
								RequestedSchema: map[string]any{"type": "object", "properties": map[string]any{"backup": map[string]any{"type": "string"}}}}},
							RequestState: "restore-round-1",
						}, nil
					}
					answer, _ := req.Params.InputResponses["which"].(*mcp.ElicitResult)
					if req.Params.RequestState != "restore-round-1" || answer == nil {
						return nil, Errorf(CodeValidationFailed, "Answer the question.", "no answer")
					}
					return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "restored " + answer.Content["backup"].(string)}}}, nil
				})
			h := &human{action: "accept", content: map[string]any{"backup": "monday"}}
			cs := connectVersion(t, s, version, h)
			res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "restore", Arguments: map[string]any{"__confirm": true}})
			if err != nil {
				t.Fatal(err)
			}
			if res.IsError || res.Content[0].(*mcp.TextContent).Text != "restored monday" {
				t.Fatalf("result = %+v", res)
			}
			if len(h.asked) != 1 || h.asked[0].Message != "Which backup?" {
				t.Errorf("asked = %+v", h.asked)
			}
			if len(states) != 2 || states[1] != "restore-round-1" {
				t.Errorf("the tool saw states %q; want its own state back on the retry", states)
			}
		})
	}
}

// TestRelayedState drives a tool's own question by hand: the state the
// client holds is interlock's seal around the tool's, single use and bound
// to the call; a client cannot hand the tool a state of its own making.
func TestRelayedState(t *testing.T) {
	g := newGate(t, ByAnnotations{}, &GateOptions{Getenv: env("false"), Logger: quiet})
	tool, _ := NewTool("restore", "", HintsOf(nil), nil)
	const args = `{"__confirm":true,"backup":"latest"}`
	var seen []Retry
	run := func(ctx context.Context, _ json.RawMessage) (*mcp.CallToolResult, error) {
		r, ok := RetryOf(ctx)
		if !ok {
			return &mcp.CallToolResult{RequestState: "tool-state",
				InputRequests: mcp.InputRequestMap{"q": &mcp.ElicitParams{Mode: "form", Message: "Sure?"}}}, nil
		}
		seen = append(seen, r)
		return &mcp.CallToolResult{Content: []mcp.Content{}}, nil
	}
	ask := func() string {
		res := g.CallWith(context.Background(), tool, alice, json.RawMessage(args), Exchange{Form: true, Native: true}, run)
		if res.IsError || res.RequestState == "" || res.RequestState == "tool-state" {
			t.Fatalf("first round: %+v", res)
		}
		return res.RequestState
	}
	answers := mcp.InputResponseMap{"q": &mcp.ElicitResult{Action: "accept"}}
	retry := func(id Identity, args, state string) Code {
		res := g.CallWith(context.Background(), tool, id, json.RawMessage(args), Exchange{Form: true, Native: true, Responses: answers, State: state}, run)
		if !res.IsError {
			return ""
		}
		return decodeBody(t, res).Code
	}

	state := ask()
	if got := retry(alice, args, state); got != "" || len(seen) != 1 || seen[0].State != "tool-state" {
		t.Fatalf("retry: code %s, the tool saw %+v", got, seen)
	}
	tests := []struct {
		name string
		code func() Code
		want Code
	}{
		{"replayed", func() Code { return retry(alice, args, state) }, CodeConsentTokenInvalid},
		{"other arguments", func() Code { return retry(alice, `{"__confirm":true,"backup":"oldest"}`, ask()) }, CodeConsentTokenMismatch},
		{"other caller", func() Code { return retry(Identity{Principal: "mallory", Tenant: "acme"}, args, ask()) }, CodeConsentTokenMismatch},
	}
	for _, tt := range tests {
		if got := tt.code(); got != tt.want {
			t.Errorf("%s: code %s, want %s", tt.name, got, tt.want)
		}
	}
	// The tool's own state, sent bare, is not a relayed state: the call is
	// a fresh one and the tool sees no answers.
	before := len(seen)
	if res := g.CallWith(context.Background(), tool, alice, json.RawMessage(args),
		Exchange{Form: true, Native: true, Responses: answers, State: "tool-state"}, run); res.InputRequests == nil || len(seen) != before {
		t.Errorf("a bare tool state reached the tool: %+v", res)
	}
}

// TestFallbackWithChoices: without a form, the user's choice comes through
// the agent, and the summary the user confirms names it.
func TestFallbackWithChoices(t *testing.T) {
	e := newElicitServer(t, "false", "")
	cs := connectVersion(t, e.server, "", nil)
	call := func(args map[string]any) *mcp.CallToolResult {
		res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "promote_release", Arguments: args})
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	b := decodeBody(t, call(map[string]any{"service": "web"}))
	if b.Code != CodeValidationFailed || b.ValidationIssues[0].Path != "environment" || !strings.Contains(b.RecoveryHint, "Ask the user") {
		t.Fatalf("without the choice: %+v", b)
	}
	b = decodeBody(t, call(map[string]any{"service": "web", "environment": "production"}))
	if b.Code != CodeConfirmationRequired || !strings.Contains(b.Summary, "Target environment: production") {
		t.Fatalf("with the choice: %+v", b)
	}
	res := call(map[string]any{"service": "web", "environment": "production", "__confirm_token": b.ConfirmToken})
	if res.IsError || e.promoted.Load() != "production" {
		t.Errorf("redeem: %+v, ran with %v", res, e.promoted.Load())
	}
}

// TestEarlierClientTimeout: a client of an earlier protocol that never
// answers the form is given up on after the rule's timeout, and nothing
// runs; an answer that does not fit the form is no confirmation either.
func TestEarlierClientTimeout(t *testing.T) {
	t.Run("no answer", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			e := newElicitServer(t, "false", "")
			slow := func(ctx context.Context, _ *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
				select {
				case <-time.After(time.Hour):
				case <-ctx.Done():
				}
				return &mcp.ElicitResult{Action: "accept", Content: map[string]any{"confirm": true, "type_back": "acct_9931"}}, nil
			}
			ctx := context.Background()
			st, ct := mcp.NewInMemoryTransports()
			ss, err := e.server.Connect(ctx, st, nil)
			if err != nil {
				t.Fatal(err)
			}
			cs, err := mcp.NewClient(&mcp.Implementation{Name: "slow"}, &mcp.ClientOptions{ElicitationHandler: slow}).
				Connect(ctx, ct, &mcp.ClientSessionOptions{ProtocolVersion: "2025-11-25"})
			if err != nil {
				t.Fatal(err)
			}
			start := time.Now()
			res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "delete_customer", Arguments: map[string]any{"id": "acct_9931"}})
			if err != nil {
				t.Fatal(err)
			}
			if got := decodeBody(t, res).Code; got != CodeCancelled || e.deleted.Load() != 0 {
				t.Errorf("code %s, deleted %d", got, e.deleted.Load())
			}
			if waited := time.Since(start); waited != DefaultElicitTimeout {
				t.Errorf("waited %v, want the default timeout %v", waited, DefaultElicitTimeout)
			}
			cs.Close()
			ss.Wait()
		})
	})
	t.Run("an answer outside the form", func(t *testing.T) {
		e := newElicitServer(t, "false", "")
		h := &human{action: "accept", content: map[string]any{"confirm": true, "environment": "moon"}}
		cs := connectVersion(t, e.server, "2025-11-25", h)
		res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "promote_release", Arguments: map[string]any{"service": "web"}})
		if err != nil {
			t.Fatalf("a bad answer must be a tool result, not a protocol error: %v", err)
		}
		if b := decodeBody(t, res); b.Code != CodeCancelled || strings.Contains(b.Message, "schema") || e.promoted.Load() != nil {
			t.Errorf("body %+v, promoted %v", b, e.promoted.Load())
		}
	})
}
