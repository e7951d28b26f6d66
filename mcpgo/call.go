package mcpgo

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"maps"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/interlock-mcp/interlock"
)

// sdkResult is the result type the gate speaks.
type sdkResult = sdk.CallToolResult

// serve sends one call of an mcp-go server through the gate and answers
// with what the gate answered: the handler's own result when it ran, else
// the gate's result (a refusal, a question for the human) in mcp-go's type.
func serve(ctx context.Context, s *server.MCPServer, g *interlock.Gate, gt *interlock.Tool, req mcp.CallToolRequest, h server.ToolHandlerFunc) *mcp.CallToolResult {
	raw, err := rawArgs(req)
	if err != nil {
		return fromSDK(interlock.Result(&interlock.Error{Code: interlock.CodeValidationFailed, Err: err,
			Message: "The tool arguments must be a JSON object.",
			Hint:    `Send the arguments as a JSON object of named values, such as {"id": "acct_9931"}.`}))
	}
	responses, err := sdkResponses(req.Params.InputResponses)
	if err != nil {
		return fromSDK(interlock.Result(&interlock.Error{Code: interlock.CodeValidationFailed, Err: err,
			Message: "The input responses of this call cannot be read.",
			Hint:    fmt.Sprintf("Call %s again, without input responses, to start over.", req.Params.Name)}))
	}
	view := &sdk.CallToolRequest{Params: &sdk.CallToolParamsRaw{Name: req.Params.Name, Arguments: raw,
		Meta: sdkMeta(req.Params.Meta), InputResponses: responses, RequestState: req.Params.RequestState}}
	ex := exchangeOf(ctx, s, responses, req.Params.RequestState)

	// The handler's own result goes back as it returned it; the gate sees
	// a copy in the go-sdk's type and returns that very copy when it ran.
	var ran *mcp.CallToolResult
	var seen *sdkResult
	res := g.CallRequestWith(ctx, gt, view, ex, func(ctx context.Context, args json.RawMessage) (*sdkResult, error) {
		inner := req
		if err := setArgs(&inner, args); err != nil {
			return nil, err
		}
		inner.Params.MultiRoundTripParams = mcp.MultiRoundTripParams{}
		if r, ok := interlock.RetryOf(ctx); ok {
			responses, err := mcpResponses(r.Responses)
			if err != nil {
				return nil, err
			}
			inner.Params.InputResponses, inner.Params.RequestState = responses, r.State
		}
		out, err := h(ctx, inner)
		if err != nil || out == nil {
			return nil, err
		}
		conv, err := toSDK(out)
		if err != nil {
			return nil, err
		}
		ran, seen = out, conv
		return conv, nil
	})
	if ran != nil && res == seen {
		return ran
	}
	return fromSDK(res)
}

// rawArgs returns the arguments of req as the client sent them: mcp-go
// keeps a request's bytes as they came over the wire, and a request made
// in the process has them encoded.
func rawArgs(req mcp.CallToolRequest) (json.RawMessage, error) {
	if len(req.Params.RawArguments) > 0 {
		return req.Params.RawArguments, nil
	}
	if req.Params.Arguments == nil {
		return nil, nil
	}
	b, err := json.Marshal(req.Params.Arguments)
	if err != nil {
		return nil, fmt.Errorf("encoding arguments: %w", err)
	}
	return b, nil
}

// setArgs gives req the business arguments the gate let through, as
// mcp-go itself reads a request's arguments.
func setArgs(req *mcp.CallToolRequest, args json.RawMessage) error {
	var v any
	if len(bytes.TrimSpace(args)) > 0 {
		if err := json.Unmarshal(args, &v); err != nil {
			return fmt.Errorf("decoding arguments of %s: %w", req.Params.Name, err)
		}
	}
	req.Params.RawArguments, req.Params.Arguments = args, v
	return nil
}

// exchangeOf reads what the client of the call in ctx can carry back to a
// human, as [exchange.Of] reads it from a go-sdk request: a client of
// 2026-07-28 declares its capabilities on each request and answers input
// requests by retrying; an earlier one declared them when it initialized
// and is sent elicitation/create on its session.
func exchangeOf(ctx context.Context, s *server.MCPServer, responses sdk.InputResponseMap, state string) interlock.Exchange {
	ex := interlock.Exchange{Responses: responses, State: state}
	session := server.ClientSessionFromContext(ctx)
	var caps *mcp.ClientCapabilities
	if info := server.RequestProtocolInfoFromContext(ctx); info != nil && info.Modern {
		ex.Native, caps = true, info.ClientCapabilities
	} else if c, ok := session.(server.SessionWithClientInfo); ok {
		declared := c.GetClientCapabilities()
		caps = &declared
	}
	if caps == nil || caps.Elicitation == nil {
		return ex
	}
	_, canAsk := session.(server.SessionWithElicitation)
	// Since 2025-11-25 "elicitation": {} still means form support; a client
	// that lists only URL mode cannot show a form.
	form := caps.Elicitation.Form != nil || caps.Elicitation.URL == nil
	ex.Form = form && (ex.Native || canAsk)
	if ex.Native || !canAsk {
		return ex
	}
	ask := func(ctx context.Context, p *sdk.ElicitParams) (*sdk.ElicitResult, error) {
		var params mcp.ElicitationParams
		if err := convert(p, &params); err != nil {
			return nil, err
		}
		answer, err := s.RequestElicitation(ctx, mcp.ElicitationRequest{
			Request: mcp.Request{Method: string(mcp.MethodElicitationCreate)}, Params: params})
		if err != nil {
			return nil, fmt.Errorf("eliciting: %w", err)
		}
		var out sdk.ElicitResult
		if err := convert(answer, &out); err != nil {
			return nil, err
		}
		return &out, nil
	}
	if ex.Form {
		ex.Ask = ask
	}
	if caps.Elicitation.URL != nil {
		ex.ShowURL = ask
	}
	return ex
}

// convert copies a value of one library's type into the other's through
// the JSON both write on the wire.
func convert(from, to any) error {
	b, err := json.Marshal(from)
	if err != nil {
		return fmt.Errorf("encoding %T: %w", from, err)
	}
	if err := json.Unmarshal(b, to); err != nil {
		return fmt.Errorf("decoding %T: %w", to, err)
	}
	return nil
}

// sdkTool is t as the go-sdk models it.
func sdkTool(t mcp.Tool) (*sdk.Tool, error) {
	var out sdk.Tool
	if err := convert(t, &out); err != nil {
		return nil, fmt.Errorf("tool %q: %w", t.Name, err)
	}
	return &out, nil
}

// advertised is t as the gate advertises it (adv): its schemas as the gate
// wrote them, every hint stated, the rest as its author registered it.
func advertised(t mcp.Tool, adv *sdk.Tool) (mcp.Tool, error) {
	out := t
	in, err := json.Marshal(adv.InputSchema)
	if err != nil {
		return out, fmt.Errorf("tool %q: input schema: %w", t.Name, err)
	}
	out.InputSchema, out.RawInputSchema = mcp.ToolInputSchema{}, in
	if schema, ok := adv.InputSchema.(map[string]any); ok && schema["additionalProperties"] == false {
		// mcp-go validates a call before any middleware runs: a
		// meta-argument the gate does not know must still reach the gate,
		// which refuses it in its own words.
		metaOpen := maps.Clone(schema)
		patterns, _ := schema["patternProperties"].(map[string]any)
		patterns = maps.Clone(patterns)
		if patterns == nil {
			patterns = map[string]any{}
		}
		patterns["^__"] = map[string]any{}
		metaOpen["patternProperties"] = patterns
		if out.RawInputSchema, err = json.Marshal(metaOpen); err != nil {
			return out, fmt.Errorf("tool %q: input schema: %w", t.Name, err)
		}
	}
	if adv.OutputSchema != nil {
		o, err := json.Marshal(adv.OutputSchema)
		if err != nil {
			return out, fmt.Errorf("tool %q: output schema: %w", t.Name, err)
		}
		out.OutputSchema, out.RawOutputSchema = mcp.ToolOutputSchema{}, o
	}
	if err := convert(adv.Annotations, &out.Annotations); err != nil {
		return out, fmt.Errorf("tool %q: %w", t.Name, err)
	}
	return out, nil
}

// hintsOf reads t's annotations as the go-sdk models them.
func hintsOf(t mcp.Tool) interlock.Hints {
	var a sdk.ToolAnnotations
	if err := convert(t.Annotations, &a); err != nil {
		// Unreadable hints are no hints: the specification's defaults,
		// the strictest.
		return interlock.HintsOf(nil)
	}
	return interlock.HintsOf(&a)
}

// toSDK is a handler's result as the gate reads it.
func toSDK(res *mcp.CallToolResult) (*sdkResult, error) {
	var out sdkResult
	if err := convert(res, &out); err != nil {
		return nil, fmt.Errorf("tool result: %w", err)
	}
	return &out, nil
}

// fromSDK is a result of the gate as mcp-go sends it. The structured
// content keeps the gate's bytes, so the error body is the go-sdk face's.
func fromSDK(res *sdkResult) *mcp.CallToolResult {
	var out mcp.CallToolResult
	if err := convert(res, &out); err != nil {
		// Every result the gate makes encodes; a handler's that does not
		// must not leak its text.
		fallback := interlock.Result(&interlock.Error{Code: interlock.CodeInternal, Err: err,
			Message: "The tool's result could not be sent.", Hint: "Tell the operator; do not retry."})
		b, _ := json.Marshal(fallback.StructuredContent)
		return &mcp.CallToolResult{IsError: true, RawStructuredContent: b, StructuredContent: json.RawMessage(b),
			Content: []mcp.Content{mcp.NewTextContent(string(b))}}
	}
	if len(out.InputRequests) > 0 {
		out.ResultType = mcp.ResultTypeInputRequired
	}
	return &out
}

// sdkMeta is a request's _meta as the gate reads it (trace context).
func sdkMeta(m *mcp.Meta) sdk.Meta {
	if m == nil {
		return nil
	}
	var out sdk.Meta
	if err := convert(m, &out); err != nil {
		return nil
	}
	return out
}

// sdkResponses are a retried call's answers as the gate reads them: each
// answer's kind told by its shape, as the go-sdk tells it.
func sdkResponses(r mcp.InputResponses) (sdk.InputResponseMap, error) {
	if len(r) == 0 {
		return nil, nil
	}
	var out sdk.InputResponseMap
	if err := convert(r, &out); err != nil {
		return nil, err
	}
	return out, nil
}

// mcpResponses are answers the gate passes on to a tool that asked for
// them itself.
func mcpResponses(r sdk.InputResponseMap) (mcp.InputResponses, error) {
	if len(r) == 0 {
		return nil, nil
	}
	var out mcp.InputResponses
	if err := convert(r, &out); err != nil {
		return nil, err
	}
	return out, nil
}
