package interlock

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// ElicitDryRunHint is the recovery hint of an elicit-mode DRY_RUN_PREVIEW.
const ElicitDryRunHint = "Set MCP_DRY_RUN=false AND call again: the user will be asked to confirm in a form " +
	"(or, where the client cannot show one, you will get a confirm token to show them)"

// formRequestID names interlock's question among a result's input requests.
const formRequestID = "interlock_confirm"

// Names of the form's fixed fields.
const (
	fieldConfirm  = "confirm"
	fieldTypeBack = "type_back"
)

// elicit applies mode elicit: a human confirms in a form the client renders.
// A client of protocol 2026-07-28 gets the form as a multi round-trip input
// request with a sealed request state and retries with the human's answer;
// a client of an earlier protocol is sent elicitation/create on its session
// and answers within the same call. Either way the answer is read by
// readForm, and only a clean accept lets the call run. A client that
// cannot show a form gets the decision's fallback instead.
func (g *Gate) elicit(ctx context.Context, c *Call, d Decision, ex Exchange) (*mcp.CallToolResult, error) {
	if ex.State != "" || len(ex.Responses) > 0 {
		if err := g.readForm(ctx, c, d, ex); err != nil {
			return nil, err
		}
		return g.redecide(ctx, c, d, ex)
	}
	if ex = ex.Resolved(); !ex.Form {
		return g.fallback(ctx, c, d, ex)
	}
	res, err := g.askForm(ctx, c, d)
	if err != nil || ex.Ask == nil {
		return res, err
	}
	answer, err := askNow(ctx, c, d, ex.Ask, res.InputRequests[formRequestID].(*mcp.ElicitParams))
	if err != nil {
		return nil, err
	}
	if err := g.readForm(ctx, c, d, Exchange{Responses: mcp.InputResponseMap{formRequestID: answer}, State: res.RequestState}); err != nil {
		return nil, err
	}
	return g.redecide(ctx, c, d, ex)
}

// askNow sends the form on the client's session and waits for the answer,
// no longer than the decision's timeout.
func askNow(ctx context.Context, c *Call, d Decision, ask func(context.Context, *mcp.ElicitParams) (*mcp.ElicitResult, error), form *mcp.ElicitParams) (*mcp.ElicitResult, error) {
	timeout := formTimeout(d)
	actx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	answer, err := ask(actx, form)
	switch {
	case err == nil && answer != nil:
		return answer, nil
	case actx.Err() != nil && ctx.Err() == nil:
		return nil, &Error{Code: CodeCancelled,
			Message: fmt.Sprintf("Nobody answered the confirmation for %s within %s; nothing ran.", c.Tool, timeout),
			Hint:    "Ask the user whether to proceed, then call again."}
	}
	// The client could not show the form or sent an answer that does not
	// fit it; either way nobody confirmed.
	return nil, &Error{Code: CodeCancelled, Err: err,
		Message: fmt.Sprintf("The client did not complete the confirmation form for %s; nothing ran.", c.Tool),
		Hint:    "Ask the user whether to proceed, then call again."}
}

// fallback applies the decision's fallback mode (token unless it says
// deny) for a client that cannot show a form: never a silent allow. The
// choices the form would have asked become the agent's to relay: each must
// be in the arguments, and the summary the user confirms names them.
func (g *Gate) fallback(ctx context.Context, c *Call, d Decision, ex Exchange) (*mcp.CallToolResult, error) {
	fb := d
	fb.Mode = d.Fallback
	if fb.Mode != ModeDeny {
		fb.Mode = ModeToken
	}
	g.log.DebugContext(ctx, "client cannot show a form; falling back", "tool", c.Tool, "fallback", string(fb.Mode))
	if fb.Mode == ModeDeny {
		return nil, &Error{
			Code: CodeToolNotAllowed,
			Message: fmt.Sprintf("%s needs a human to confirm in a form, and this client cannot show one "+
				"(it declared no form elicitation, or its transport cannot carry a question during a call)%s; nothing ran.",
				c.Tool, ruleClause(d.Rule)),
			Hint: fmt.Sprintf("Do not retry %s from this client; tell the user it must be run from a client that supports "+
				"MCP form elicitation, or ask the operator to allow a confirm-token fallback.", c.Tool),
		}
	}
	if fb.Mode == ModeToken && len(d.Form.Choices) > 0 {
		var picked []string
		for _, ch := range d.Form.Choices {
			v, ok := c.Args[ch.Arg].(string)
			if !ok || !slices.Contains(ch.Options, v) {
				options := strings.Join(ch.Options, ", ")
				return nil, &Error{
					Code: CodeValidationFailed,
					Message: fmt.Sprintf("This client cannot show the confirmation form, so %s must come from the user: %s is one of %s.",
						c.Tool, ch.Arg, options),
					Hint: fmt.Sprintf("Ask the user which %s they want (%s) and call %s again with %s set to their answer; never choose it yourself.",
						ch.Title, options, c.Tool, ch.Arg),
					ValidationIssues: []ValidationIssue{{Path: ch.Arg, Message: "must be the user's choice of " + options, Code: "human_choice"}},
				}
			}
			picked = append(picked, fmt.Sprintf("%s: %s", ch.Title, v))
		}
		summarize := d.Summarize
		fb.Summarize = func(preview any) string {
			base := ""
			if summarize != nil {
				base = summarize(preview)
			}
			if base == "" {
				base = fmt.Sprintf("Call %s with the arguments shown in preview.", c.Tool)
			}
			return base + " " + strings.Join(picked, "; ") + "."
		}
	}
	return g.apply(ctx, c, fb, ex)
}

func (g *Gate) askForm(ctx context.Context, c *Call, d Decision) (*mcp.CallToolResult, error) {
	message, err := g.describe(ctx, c, d)
	if err != nil {
		return nil, err
	}
	state, _, err := g.issue(ctx, formGrant, c, formTimeout(d), nil)
	if err != nil {
		return nil, err
	}
	return &mcp.CallToolResult{
		InputRequests: mcp.InputRequestMap{formRequestID: &mcp.ElicitParams{
			Mode:            "form",
			Message:         message,
			RequestedSchema: formSchema(c, d.Form),
		}},
		RequestState: state,
	}, nil
}

// formTimeout is how long the decision's form may stay unanswered.
func formTimeout(d Decision) time.Duration {
	if d.Timeout > 0 {
		return d.Timeout
	}
	return DefaultElicitTimeout
}

// formSchema is the flat form of spec form mode: a checkbox, the value to
// type back, and the choices.
func formSchema(c *Call, f Form) map[string]any {
	label := f.Confirm
	if label == "" {
		label = fmt.Sprintf("I confirm: run %s as described above.", c.Tool)
	}
	props := map[string]any{
		fieldConfirm: map[string]any{"type": "boolean", "title": label, "default": false},
	}
	required := []string{fieldConfirm}
	if f.TypeBack != "" {
		props[fieldTypeBack] = map[string]any{
			"type": "string", "title": fmt.Sprintf("Type %s to confirm", f.TypeBack), "minLength": 1,
		}
		required = append(required, fieldTypeBack)
	}
	for _, ch := range f.Choices {
		props[ch.Arg] = map[string]any{"type": "string", "title": ch.Title, "enum": ch.Options}
		required = append(required, ch.Arg)
	}
	return map[string]any{"type": "object", "properties": props, "required": required}
}

// readForm checks the request state of a retried call and the human's
// answer in it. Anything but a clean accept with every required answer
// refuses; an accept injects the human's choices into the arguments.
func (g *Gate) readForm(ctx context.Context, c *Call, d Decision, ex Exchange) error {
	again := fmt.Sprintf("Call %s again, without input responses, to ask the user anew.", c.Tool)
	if _, err := g.spend(ctx, formGrant, c, ex.State, again); err != nil {
		return err
	}
	answer, _ := ex.Responses[formRequestID].(*mcp.ElicitResult)
	if answer == nil {
		return &Error{Code: CodeCancelled, Hint: again,
			Message: fmt.Sprintf("The confirmation for %s came back without an answer; nothing ran.", c.Tool)}
	}
	refuse := fmt.Sprintf("The user refused: do not call %s again unless the user gives new instructions.", c.Tool)
	switch answer.Action {
	case "decline":
		return &Error{Code: CodeDeclined, Hint: refuse, Message: fmt.Sprintf("The user declined %s; nothing ran.", c.Tool)}
	case "cancel":
		return &Error{Code: CodeCancelled, Hint: "Nobody decided: ask the user whether to proceed, then call again.",
			Message: fmt.Sprintf("The user dismissed the confirmation for %s without deciding; nothing ran.", c.Tool)}
	case "accept":
	default:
		return &Error{Code: CodeCancelled, Hint: again,
			Message: fmt.Sprintf("The confirmation for %s came back with the unknown action %q; nothing ran.", c.Tool, answer.Action)}
	}

	if ok, _ := answer.Content[fieldConfirm].(bool); !ok {
		return &Error{Code: CodeDeclined, Hint: refuse,
			Message: fmt.Sprintf("The user did not tick the confirmation box for %s; nothing ran.", c.Tool)}
	}
	if want := d.Form.TypeBack; want != "" {
		if typed, _ := answer.Content[fieldTypeBack].(string); typed != want {
			return &Error{Code: CodeDeclined, Hint: refuse,
				Message: fmt.Sprintf("The value the user typed did not match %s; nothing ran.", want)}
		}
	}
	if len(d.Form.Choices) == 0 {
		c.confirmedBy = ConfirmedByElicit
		return nil
	}
	// The human's choices go into a copy: what the client sent stays what
	// grants are bound to.
	final := make(map[string]any, len(c.Args)+len(d.Form.Choices))
	for k, v := range c.Args {
		final[k] = v
	}
	for _, ch := range d.Form.Choices {
		picked, _ := answer.Content[ch.Arg].(string)
		if !slices.Contains(ch.Options, picked) {
			return &Error{Code: CodeDeclined, Hint: refuse,
				Message: fmt.Sprintf("The user made no valid choice for %s; nothing ran.", ch.Arg)}
		}
		if sent, ok := c.Args[ch.Arg]; ok && sent != picked {
			g.log.WarnContext(ctx, "replaced the model's value with the human's choice",
				"tool", c.Tool, "argument", ch.Arg, "model", clip(fmt.Sprint(sent)), "human", picked)
			if c.replaced == nil {
				c.replaced = map[string]any{}
			}
			c.replaced[ch.Arg] = sent
		}
		final[ch.Arg] = picked
	}
	raw, err := encodeArgs(final)
	if err != nil {
		return fmt.Errorf("%s: %w", c.Tool, err)
	}
	c.Args, c.raw = final, raw
	c.confirmedBy = ConfirmedByElicit
	return nil
}

// redecide asks the policy again about a call whose arguments a human
// completed: the policy decides on the call that will run, not on the one
// the model proposed. A stricter answer than the one the human confirmed
// applies instead.
func (g *Gate) redecide(ctx context.Context, c *Call, confirmed Decision, ex Exchange) (*mcp.CallToolResult, error) {
	d, err := c.policy.Decide(ctx, c)
	if err != nil {
		return nil, fmt.Errorf("deciding %s on the final arguments: %w", c.Tool, err)
	}
	if !d.Mode.StricterThan(confirmed.Mode) {
		return nil, nil
	}
	g.log.WarnContext(ctx, "the user's choices make the call stricter than what they confirmed",
		"tool", c.Tool, "confirmed_mode", string(confirmed.Mode), "final_mode", string(d.Mode), "final_rule", d.Rule)
	return g.apply(ctx, c, d, ex)
}
