package interlock

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/interlock-mcp/interlock/seal"
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

func relayBinding(tenant, principal, tool string) string {
	return "relay:" + BindingKey(tenant, principal, tool)
}

// relay wraps the request state of a result in which the tool asks the
// client for input. The client's retry then carries interlock's sealed
// state, bound like a confirm token to {tenant, principal, tool, the
// arguments the client sent}, and is let through to the tool without asking
// the gate's own keys again: the gate already let this call through.
//
// A client that cannot show a form gets CANCELLED instead: the question
// cannot reach a human through it.
func (g *Gate) relay(ctx context.Context, c *Call, sent json.RawMessage, ex Exchange, res *mcp.CallToolResult) (*mcp.CallToolResult, error) {
	if !ex.Form {
		return nil, &Error{Code: CodeCancelled,
			Message: fmt.Sprintf("%s asked a question that this client cannot show to a human, so it did not finish.", c.Tool),
			Hint:    "Use a client that supports MCP elicitation for this tool, or ask the operator how to run it."}
	}
	payload, err := json.Marshal(relayed{State: res.RequestState, Args: c.raw})
	if err != nil {
		return nil, fmt.Errorf("wrapping request state of %s: %w", c.Tool, err)
	}
	digest, err := seal.Digest(sent)
	if err != nil {
		return nil, fmt.Errorf("digesting arguments of %s: %w", c.Tool, err)
	}
	now := time.Now()
	claims := seal.Claims{
		Kind: seal.KindUpstreamState, Tenant: c.Tenant, Principal: c.Principal, Tool: c.Tool,
		Digest: digest, IssuedAt: now, Expires: now.Add(DefaultElicitTimeout), Nonce: seal.NewNonce(), Payload: payload,
	}
	if err := g.tokens.Issue(ctx, relayBinding(c.Tenant, c.Principal, c.Tool), claims.NonceString(), DefaultElicitTimeout); err != nil {
		return nil, fmt.Errorf("storing request state of %s: %w", c.Tool, err)
	}
	out := *res
	out.RequestState = g.sealer.Seal(claims)
	return &out, nil
}

// resume checks the wrapped state of a retried call and returns what the
// tool needs to continue: the arguments it ran with and its own state.
func (g *Gate) resume(ctx context.Context, c *Call, sent json.RawMessage, claims seal.Claims, ex Exchange) (json.RawMessage, Retry, error) {
	again := fmt.Sprintf("Call %s again, without input responses, to start over.", c.Tool)
	if !time.Now().Before(claims.Expires) {
		return nil, Retry{}, &Error{Code: CodeCancelled, Hint: again,
			Message: fmt.Sprintf("Nobody answered the question of %s in time; it did not finish.", c.Tool)}
	}
	live, err := g.tokens.Consume(ctx, relayBinding(claims.Tenant, claims.Principal, claims.Tool), claims.NonceString())
	if err != nil {
		return nil, Retry{}, fmt.Errorf("consuming request state of %s: %w", c.Tool, err)
	}
	if !live {
		return nil, Retry{}, &Error{Code: CodeConsentTokenInvalid, Hint: again,
			Message: "The request state was already used, or a newer question for this tool replaced it."}
	}
	if digest, err := seal.Digest(sent); err != nil || digest != claims.Digest ||
		claims.Tool != c.Tool || claims.Principal != c.Principal || claims.Tenant != c.Tenant {
		return nil, Retry{}, &Error{Code: CodeConsentTokenMismatch, Hint: again,
			Message: "The request state belongs to another call (caller, tool or arguments); it is used up now."}
	}
	var r relayed
	if err := json.Unmarshal(claims.Payload, &r); err != nil {
		return nil, Retry{}, fmt.Errorf("reading wrapped state of %s: %w", c.Tool, err)
	}
	return r.Args, Retry{Responses: ex.Responses, State: r.State}, nil
}
