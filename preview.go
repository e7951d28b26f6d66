package interlock

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// describe runs the decision's preview tool, if it names one, and renders
// the summary a human reads before confirming. A preview that finds
// nothing ends the call with NOT_FOUND: there is nothing to confirm.
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
		return &Error{
			Code:    CodeUpstreamError,
			Message: fmt.Sprintf("%s did not run: its preview %s failed, so there is nothing to confirm yet.", c.Tool, p.Tool),
			Hint:    "Retry once; if the preview keeps failing, tell the operator.",
			Err:     err,
		}
	}
	res, err := g.run(ctx, r.run, args)
	if err != nil {
		if ErrorCode(err) == CodeNotFound {
			return nil, notFound(c, p, BodyOf(err))
		}
		return nil, failed(err)
	}
	if res.IsError {
		body := BodyOfResult(res)
		if body.Code == CodeNotFound {
			return nil, notFound(c, p, body)
		}
		return nil, failed(fmt.Errorf("preview %s answered %s: %s", p.Tool, body.Code, body.Message))
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
	var text []string
	for _, content := range res.Content {
		if tc, ok := content.(*mcp.TextContent); ok {
			text = append(text, tc.Text)
		}
	}
	return strings.Join(text, "\n"), nil
}

func notFound(c *Call, p *PreviewCall, body Body) error {
	msg := fmt.Sprintf("Nothing for %s to act on: %s found nothing.", c.Tool, p.Tool)
	if body.Message != "" {
		msg = fmt.Sprintf("Nothing for %s to act on: %s", c.Tool, body.Message)
	}
	hint := body.RecoveryHint
	if hint == "" || hint == internalHint {
		hint = fmt.Sprintf("Check the arguments of %s (a list tool shows what exists), then call again; nothing was changed.", c.Tool)
	}
	return &Error{Code: CodeNotFound, Message: msg, Hint: hint}
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
		Message: fmt.Sprintf("Dry run: %s did not run. Missing %s.", c.Tool, strings.Join(missing, " and ")),
		Hint:    hint,
		Preview: g.redactedArgs(c),
		Summary: summary,
	}
}

const operatorKeyMissing = `the operator key (MCP_DRY_RUN is not "false")`
