package interlock

import (
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"slices"

	"github.com/google/jsonschema-go/jsonschema"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/interlock-mcp/interlock/exchange"
	"github.com/interlock-mcp/interlock/internal/strictjson"
)

// confirmSchema describes __confirm in the input schema of a tool that may
// demand it, so models learn the meta-argument from tools/list.
var confirmSchema = map[string]any{
	"type": "boolean",
	"description": "Meta-argument read by interlock, never passed to the tool: set true only after the user has " +
		"explicitly agreed to this exact call. A dry-run preview is returned until the operator also enables execution.",
}

// humanArgNote describes an argument a human picks in the confirmation
// form.
const humanArgNote = "Chosen by the user in interlock's confirmation form, which replaces any value sent here. " +
	"Leave it out unless interlock answers that this client cannot show the form; then pass the user's own choice, never yours."

// confirmTokenSchema describes __confirm_token likewise.
var confirmTokenSchema = map[string]any{
	"type": "string",
	"description": "Meta-argument read by interlock, never passed to the tool. Leave it out; when a call answers " +
		"CONFIRMATION_REQUIRED with a summary and a confirm_token, show the summary to the user and, only after they " +
		"explicitly agree, call again with the same arguments and this set to the confirm_token.",
}

// Advertise returns a copy of t as clients should see it behind the gate:
// every hint stated explicitly (h, the hints as the policy sees them), and
// the meta-arguments that the tool's possible modes accept added to its
// input schema.
func (g *Gate) Advertise(t *mcp.Tool, upstream string, h Hints) (*mcp.Tool, error) {
	out := *t
	// The annotations state every hint the gate decides on; a title is
	// theirs only where the upstream wrote one there.
	title := ""
	if t.Annotations != nil {
		title = t.Annotations.Title
	}
	out.Annotations = h.Annotations(title)
	schema, err := strictjson.SchemaMap(t.InputSchema)
	if err != nil {
		return nil, fmt.Errorf("tool %q: input %w", t.Name, err)
	}
	switch typ := schema["type"]; typ {
	case nil:
		schema["type"] = "object"
	case "object":
	default:
		return nil, fmt.Errorf("tool %q: input schema has type %v; MCP requires \"object\"", t.Name, typ)
	}
	if human := g.Policy().HumanArgs(t.Name, upstream, h); len(human) > 0 {
		// What a human picks is not the model's to require; it stays listed
		// so an agent can relay the user's choice where no form can be shown.
		strictjson.DropRequired(schema, human)
		props, _ := schema["properties"].(map[string]any)
		for _, name := range human {
			if p, ok := props[name].(map[string]any); ok {
				p["description"] = humanArgNote
			}
		}
	}
	out.InputSchema = schema
	if t.OutputSchema != nil {
		wide, err := withErrorBody(t.OutputSchema)
		if err != nil {
			return nil, fmt.Errorf("tool %q: %w", t.Name, err)
		}
		out.OutputSchema = wide
	}
	modes := g.Policy().ToolModes(t.Name, upstream, h)
	meta := map[string]any{}
	if slices.Contains(modes, ModeFlag) {
		meta[MetaConfirm] = confirmSchema
	}
	if slices.Contains(modes, ModeToken) {
		meta[MetaConfirmToken] = confirmTokenSchema
	}
	if len(meta) == 0 {
		return &out, nil
	}
	props, _ := schema["properties"].(map[string]any)
	if props == nil {
		props = map[string]any{}
	}
	for k, v := range meta {
		props[k] = v
	}
	schema["properties"] = props
	return &out, nil
}

// errorBodySchema describes [Body], the structured content of every error
// the gate answers with.
var errorBodySchema = map[string]any{
	"type": "object",
	"properties": map[string]any{
		"code":          map[string]any{"type": "string"},
		"retriable":     map[string]any{"type": "boolean"},
		"message":       map[string]any{"type": "string"},
		"recovery_hint": map[string]any{"type": "string"},
	},
	"required": []any{"code", "retriable", "message", "recovery_hint"},
}

// withErrorBody widens a tool's output schema to "the tool's output, or
// interlock's error body". Clients that check structuredContent against
// the output schema even on error results (the TypeScript SDK does) would
// otherwise reject every preview and refusal the gate returns. Definitions
// move to the root so that "#/$defs/…" references still resolve.
func withErrorBody(outputSchema any) (map[string]any, error) {
	orig, err := strictjson.SchemaMap(outputSchema)
	if err != nil {
		return nil, fmt.Errorf("output %w", err)
	}
	wide := map[string]any{"type": "object"}
	for _, k := range []string{"$schema", "$defs", "definitions"} {
		if v, ok := orig[k]; ok {
			wide[k] = v
			delete(orig, k)
		}
	}
	wide["anyOf"] = []any{orig, errorBodySchema}
	return wide, nil
}

// Guard returns a handler that sends every call of t through the gate and
// calls h only when the decision lets it run. h sees the arguments without
// meta-arguments.
func (g *Gate) Guard(t *mcp.Tool, h mcp.ToolHandler) (mcp.ToolHandler, error) {
	_, guarded, err := g.guard(t, h)
	return guarded, err
}

// guard returns t as clients see it and the handler that guards it, bound
// to the digest of that advertised definition.
func (g *Gate) guard(t *mcp.Tool, h mcp.ToolHandler) (*mcp.Tool, mcp.ToolHandler, error) {
	gt, adv, err := g.Prepare(t, func(ctx context.Context, args json.RawMessage) (*mcp.CallToolResult, error) {
		return h(ctx, &mcp.CallToolRequest{Params: &mcp.CallToolParamsRaw{Name: t.Name, Arguments: args}})
	})
	if err != nil {
		return nil, nil, err
	}
	return adv, g.handler(gt, h), nil
}

// Prepare makes t a tool of a library server that the gate guards: its
// input schema compiled, its definition as clients should see it
// ([Gate.Advertise]), the digest of that definition bound into tokens and
// approvals, and run registered so that decisions can name the tool as a
// preview. Every library face registers its tools through it, whatever
// library the server is written with; run calls the tool with business
// arguments only.
func (g *Gate) Prepare(t *mcp.Tool, run Runner) (*Tool, *mcp.Tool, error) {
	gt, err := NewTool(t.Name, "", HintsOf(t.Annotations), t.InputSchema)
	if err != nil {
		return nil, nil, err
	}
	adv, err := g.Advertise(t, "", gt.Hints)
	if err != nil {
		return nil, nil, err
	}
	gt.Definition = DefinitionDigest(adv)
	g.Register(gt, run)
	return gt, adv, nil
}

func (g *Gate) handler(gt *Tool, h mcp.ToolHandler) mcp.ToolHandler {
	return func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		return g.CallRequestWith(ctx, gt, req, exchange.Via(req, nil), func(ctx context.Context, args json.RawMessage) (*mcp.CallToolResult, error) {
			params := *req.Params
			params.Arguments = args
			params.InputResponses, params.RequestState = nil, ""
			if r, ok := RetryOf(ctx); ok {
				params.InputResponses, params.RequestState = r.Responses, r.State
			}
			inner := *req
			inner.Params = &params
			return h(ctx, &inner)
		}), nil
	}
}

// AddTool adds t to s behind the gate: the counterpart of [mcp.Server.AddTool].
// Like the SDK, it panics when the tool cannot be registered (a missing or
// invalid input schema), a programming error.
func (g *Gate) AddTool(s *mcp.Server, t *mcp.Tool, h mcp.ToolHandler) {
	adv, guarded, err := g.guard(t, h)
	if err != nil {
		panic(fmt.Sprintf("interlock: AddTool: %v", err))
	}
	s.AddTool(adv, guarded)
}

// AddTool adds a typed tool handler to s behind the gate: the counterpart of
// [mcp.AddTool], with the same schema inference from In and Out.
//
// Errors returned by h reach the client as structured results: an [*Error]
// as it is, any other error as INTERNAL_ERROR without its text. A result
// with IsError set is passed on untouched, structuredContent included.
func AddTool[In, Out any](s *mcp.Server, g *Gate, t *mcp.Tool, h mcp.ToolHandlerFor[In, Out]) {
	tt := *t
	if tt.InputSchema == nil {
		if reflect.TypeFor[In]() == reflect.TypeFor[any]() {
			tt.InputSchema = &jsonschema.Schema{Type: "object"}
		} else {
			schema, err := jsonschema.For[In](nil)
			if err != nil {
				panic(fmt.Sprintf("interlock: AddTool %q: input schema: %v", t.Name, err))
			}
			tt.InputSchema = schema
		}
	}
	var output *jsonschema.Resolved
	if tt.OutputSchema == nil && reflect.TypeFor[Out]() != reflect.TypeFor[any]() {
		schema, err := jsonschema.For[Out](nil)
		if err != nil {
			panic(fmt.Sprintf("interlock: AddTool %q: output schema: %v", t.Name, err))
		}
		tt.OutputSchema = schema
	}
	if tt.OutputSchema != nil {
		r, err := strictjson.ResolveSchema(tt.OutputSchema)
		if err != nil {
			panic(fmt.Sprintf("interlock: AddTool %q: output schema: %v", t.Name, err))
		}
		output = r
	}
	g.AddTool(s, &tt, func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		var in In
		if err := json.Unmarshal(req.Params.Arguments, &in); err != nil {
			return nil, &Error{
				Code:    CodeValidationFailed,
				Message: fmt.Sprintf("The arguments do not fit %s.", t.Name),
				Hint:    fmt.Sprintf("Call %s with arguments that match its input schema.", t.Name),
				Err:     err,
			}
		}
		res, out, err := h(ctx, req, in)
		if err != nil {
			return nil, err
		}
		if res != nil && res.IsError {
			return res, nil
		}
		if res == nil {
			res = &mcp.CallToolResult{}
		}
		if reflect.TypeFor[Out]() == reflect.TypeFor[any]() && any(out) == nil {
			return res, nil
		}
		b, err := json.Marshal(out)
		if err != nil {
			return nil, fmt.Errorf("encoding output of %s: %w", t.Name, err)
		}
		if output != nil {
			var v any
			if err := json.Unmarshal(b, &v); err != nil {
				return nil, fmt.Errorf("decoding output of %s: %w", t.Name, err)
			}
			if err := output.Validate(v); err != nil {
				return nil, fmt.Errorf("output of %s does not match its schema: %w", t.Name, err)
			}
		}
		res.StructuredContent = json.RawMessage(b)
		if res.Content == nil {
			res.Content = []mcp.Content{&mcp.TextContent{Text: string(b)}}
		}
		return res, nil
	})
}
