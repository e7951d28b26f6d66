package interlock

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// Retry carries a client's answers to the questions a tool itself asked
// (input requests in its result), back to the tool: a [Runner] that calls
// a tool passes them on (see [RetryOf]).
type Retry struct {
	Responses mcp.InputResponseMap
	// State is the tool's own request state, as the tool issued it.
	State string
}

type retryKey struct{}

// RetryOf returns the answers a Runner must pass to the tool, when the call
// is the retry of a call whose tool asked for input.
func RetryOf(ctx context.Context) (Retry, bool) {
	r, ok := ctx.Value(retryKey{}).(Retry)
	return r, ok
}

// relayed is what a wrapped request state carries: the tool's own state and
// the arguments the tool ran with (after any human choices), so the retry
// reaches the tool exactly as the first round did.
type relayed struct {
	State string          `json:"state"`
	Args  json.RawMessage `json:"args"`
}

// relay wraps the request state of a result in which the tool asks the
// client for input. The client's retry then carries interlock's sealed
// state, bound like a confirm token to {tenant, principal, tool, the
// arguments the client sent}, and is let through to the tool without asking
// the gate's own keys again: the gate already let this call through.
//
// A client that cannot answer every question gets CANCELLED instead: the
// question cannot reach a human (or a model, or the client's roots)
// through it.
func (g *Gate) relay(ctx context.Context, c *Call, ex Exchange, res *mcp.CallToolResult) (*mcp.CallToolResult, error) {
	if !ex.Answers(res.InputRequests) {
		return nil, &Error{Code: CodeCancelled,
			Message: fmt.Sprintf("%s asked a question that this client cannot show to a human, so it did not finish.", c.Tool),
			Hint:    "Use a client that supports MCP elicitation for this tool, or ask the operator how to run it."}
	}
	payload, err := json.Marshal(relayed{State: res.RequestState, Args: c.raw})
	if err != nil {
		return nil, fmt.Errorf("wrapping request state of %s: %w", c.Tool, err)
	}
	state, _, err := g.issue(ctx, relayGrant, c, DefaultElicitTimeout, payload)
	if err != nil {
		return nil, err
	}
	out := *res
	out.RequestState = state
	return &out, nil
}

// resume spends the wrapped state of a retried call and returns what the
// tool needs to continue: the arguments it ran with and its own state.
func (g *Gate) resume(ctx context.Context, c *Call, ex Exchange) (json.RawMessage, Retry, error) {
	again := fmt.Sprintf("Call %s again, without input responses, to start over.", c.Tool)
	claims, err := g.spend(ctx, relayGrant, c, ex.State, again)
	if err != nil {
		return nil, Retry{}, err
	}
	var r relayed
	if err := json.Unmarshal(claims.Payload, &r); err != nil {
		return nil, Retry{}, fmt.Errorf("reading wrapped state of %s: %w", c.Tool, err)
	}
	return r.Args, Retry{Responses: ex.Responses, State: r.State}, nil
}
