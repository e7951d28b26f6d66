package interlock

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// describe runs the decision's preview tool, if it names one, and renders
// the summary a human reads before confirming. A preview that says the call
// cannot succeed ends it with the preview's own error (see runPreview):
// nobody is asked to confirm a call that would only fail.
func (g *Gate) describe(ctx context.Context, c *Call, d Decision) (string, error) {
	var data any
	if d.Preview != nil {
		var err error
		if data, err = g.runPreview(ctx, c, d.Preview); err != nil {
			return "", err
		}
	}
	if d.Summarize != nil {
		if s := d.Summarize(data); s != "" {
			return s, nil
		}
	}
	return fmt.Sprintf("Call %s with the arguments shown in preview.", c.Tool), nil
}

// runPreview calls a read-only tool that describes what c would touch and
// returns its structured result (or its text when it has none).
//
// How a preview's failure ends the call:
//   - an interlock error with a deterministic code (VALIDATION_FAILED,
//     NOT_FOUND, PERMISSION_DENIED, …) is the preview's verdict on the call:
//     the call ends with that code, message and hint (see refusedByPreview);
//   - a retriable code, INTERNAL_ERROR, an unknown code, or an error result
//     with no interlock body (a tool's plain error text, which may quote its
//     internals) is a preview that failed: UPSTREAM_ERROR in the gate's
//     words, the preview's own text kept for the log only;
//   - a confirmation answer (DRY_RUN_PREVIEW, CONFIRMATION_REQUIRED, …)
//     means the preview tool is itself gated, a misconfiguration:
//     INTERNAL_ERROR, like a preview tool that is not read-only.
func (g *Gate) runPreview(ctx context.Context, c *Call, p *PreviewCall) (any, error) {
	g.mu.RLock()
	r, ok := g.tools[p.Tool]
	g.mu.RUnlock()
	if !ok {
		return nil, fmt.Errorf("preview tool %q for %s is not offered", p.Tool, c.Tool)
	}
	if !r.tool.Hints.ReadOnly {
		return nil, fmt.Errorf("preview tool %q for %s is not read-only; refusing to run it as a preview", p.Tool, c.Tool)
	}
	args, err := json.Marshal(p.Args)
	if err != nil {
		return nil, fmt.Errorf("encoding preview arguments for %s: %w", p.Tool, err)
	}
	failed := func(err error) error {
		// The client sees only the gate's words; the operator needs the
		// preview's.
		g.log.WarnContext(ctx, "preview failed", "tool", c.Tool, "preview", p.Tool, "error", clip(err.Error()))
		return &Error{
			Code:    CodeUpstreamError,
			Message: fmt.Sprintf("%s did not run: its preview %s failed, so there is nothing to confirm yet.", c.Tool, p.Tool),
			Hint:    "Retry once; if the preview keeps failing, tell the operator.",
			Err:     err,
		}
	}
	judge := func(body Body, cause error) error {
		switch {
		case body.Code.Verdict():
			return refusedByPreview(c, p, body, cause)
		case body.Code.handshake():
			return fmt.Errorf("preview tool %q for %s answered %s: a preview must run without a confirmation of its own", p.Tool, c.Tool, body.Code)
		}
		return failed(cause)
	}
	res, err := g.run(ctx, r.run, args)
	if err != nil {
		return nil, judge(BodyOf(err), err)
	}
	if res.IsError {
		body := BodyOfResult(res)
		return nil, judge(body, fmt.Errorf("preview %s answered %q: %s", p.Tool, body.Code, clip(resultText(res))))
	}
	if res.StructuredContent != nil {
		var data any
		b, err := json.Marshal(res.StructuredContent)
		if err == nil {
			err = json.Unmarshal(b, &data)
		}
		if err != nil {
			return nil, failed(err)
		}
		return data, nil
	}
	return resultText(res), nil
}

// resultText joins the text blocks of a result.
func resultText(res *mcp.CallToolResult) string {
	var text []string
	for _, content := range res.Content {
		if tc, ok := content.(*mcp.TextContent); ok {
			text = append(text, tc.Text)
		}
	}
	return strings.Join(text, "\n")
}

// refusedByPreview ends c with the verdict of its preview: the preview's
// code, message and hint, said of c. Validation issues stay only where
// they name an argument of c, since a preview may call its arguments
// differently; the rest is in the message.
func refusedByPreview(c *Call, p *PreviewCall, body Body, cause error) error {
	e := &Error{
		Code:               body.Code,
		Hint:               body.RecoveryHint,
		SuggestedTool:      body.SuggestedTool,
		MissingPermissions: body.MissingPermissions,
		Err:                cause,
	}
	for _, issue := range body.ValidationIssues {
		if _, ok := c.Args[topArgument(issue.Path)]; ok {
			e.ValidationIssues = append(e.ValidationIssues, issue)
		}
	}
	if body.Code == CodeNotFound {
		e.Message = fmt.Sprintf("Nothing for %s to act on: %s found nothing.", c.Tool, p.Tool)
		if body.Message != "" {
			e.Message = fmt.Sprintf("Nothing for %s to act on: %s", c.Tool, body.Message)
		}
		if e.Hint == "" || e.Hint == internalHint {
			e.Hint = fmt.Sprintf("Check the arguments of %s (a list tool shows what exists), then call again; nothing was changed.", c.Tool)
		}
		return e
	}
	e.Message = fmt.Sprintf("%s cannot succeed with these arguments (its preview %s answered %s), so nobody was asked to confirm it.", c.Tool, p.Tool, body.Code)
	if body.Message != "" {
		e.Message = fmt.Sprintf("%s cannot succeed with these arguments, so nobody was asked to confirm it: %s", c.Tool, body.Message)
	}
	if e.Hint == "" || e.Hint == internalHint {
		e.Hint = fmt.Sprintf("Change the arguments of %s as the message says, then call it again; nothing was changed.", c.Tool)
	}
	return e
}

// topArgument returns the top-level argument an issue path names: "to" of
// "to", "items" of "items[].sku" and of "items.sku".
func topArgument(path string) string {
	if i := strings.IndexAny(path, ".["); i >= 0 {
		return path[:i]
	}
	return path
}

// dryRunPreview answers DRY_RUN_PREVIEW: the call did not run, this is what
// it would have done, and these keys are missing.
func (g *Gate) dryRunPreview(ctx context.Context, c *Call, d Decision, hint string, missing []string) error {
	summary, err := g.describe(ctx, c, d)
	if err != nil {
		return err
	}
	return &Error{
		Code:    CodeDryRunPreview,
		Message: previewMessage(g.dryRun, c.Tool, missing),
		Hint:    hint,
		Preview: g.redactedArgs(c),
		Summary: summary,
	}
}

// previewMessage says why a call only previewed: dry run, or (with dry
// run off) the per-call key the agent did not give.
func previewMessage(dryRun bool, tool string, missing []string) string {
	if dryRun {
		return fmt.Sprintf("Dry run: %s did not run. Missing %s.", tool, strings.Join(missing, " and "))
	}
	return fmt.Sprintf("Preview only: %s did not run. Missing %s.", tool, strings.Join(missing, " and "))
}

const operatorKeyMissing = `the operator key (MCP_DRY_RUN is not "false")`
