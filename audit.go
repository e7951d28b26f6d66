package interlock

import (
	"context"
	"encoding/hex"
	"fmt"
	"log/slog"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/interlock-mcp/interlock/audit"
	"github.com/interlock-mcp/interlock/redact"
)

// What confirmed a call, as an audit record's ConfirmedBy says.
const (
	ConfirmedByFlag   = "flag"
	ConfirmedByToken  = "token"
	ConfirmedByElicit = "elicit"
	// ConfirmedByRelay marks the continuation of a call the gate already
	// let through, after a question the tool itself asked was answered.
	ConfirmedByRelay = "relay"
)

// trail is what the audit log records of one call, gathered on its way
// through the gate.
type trail struct {
	// call is nil when the arguments were refused before there was one.
	call *Call
	// ran is set once the gate let the call run; decision says how.
	ran      bool
	decision string
	// recorded is set once the decision to run is on record.
	recorded bool
	// ranFor is how long the tool ran.
	ranFor time.Duration
	// budget names the budget that refused the call.
	budget string
}

// decisionOf returns the decision an audit record names for a call that
// ended with res or err.
func (tr *trail) decisionOf(res *mcp.CallToolResult, err error) string {
	if tr.ran {
		return tr.decision
	}
	if tr.budget != "" {
		return audit.DecisionDenied
	}
	if err == nil {
		if res != nil && res.InputRequests != nil {
			return audit.DecisionAsked
		}
		return ""
	}
	switch ErrorCode(err) {
	case CodeToolNotAllowed:
		return audit.DecisionDenied
	case CodeDryRunPreview:
		return audit.DecisionPreviewed
	case CodeConfirmationRequired, CodeApprovalPending:
		return audit.DecisionAsked
	case CodeDeclined:
		return audit.DecisionDeclined
	case CodeCancelled:
		return audit.DecisionCancelled
	case CodeConsentTokenExpired:
		return audit.DecisionExpired
	case CodeConsentTokenMismatch:
		return audit.DecisionMismatched
	case CodeConsentTokenInvalid, CodeValidationFailed, CodeNotFound:
		return audit.DecisionInvalid
	}
	return ""
}

// outcomeOf returns the outcome an audit record names.
func outcomeOf(res *mcp.CallToolResult, err error) string {
	switch {
	case err != nil:
		return string(ErrorCode(err))
	case res == nil:
		return ""
	case res.InputRequests != nil:
		return audit.OutcomeInputRequired
	case res.IsError:
		if body, ours := GateBody(res); ours && body.Code != "" {
			return string(body.Code)
		}
		// A tool's own body may name its verdict on the call (NOT_FOUND,
		// VALIDATION_FAILED, …), never one of the gate's answers about
		// confirming it: a call that ran was not left pending or declined.
		if code := BodyOfResult(res).Code; code.Verdict() {
			return string(code)
		}
		return audit.OutcomeToolError
	}
	return audit.OutcomeOK
}

// callRecord returns the record of c with what every record of a call
// carries.
func (g *Gate) callRecord(c *Call, t *Tool, id Identity, ex Exchange, d Decision) *audit.Record {
	hints := audit.Hints(t.Hints)
	rec := &audit.Record{Time: time.Now(), Event: "call", Tenant: id.Tenant, Principal: id.Principal,
		Tool: t.Name, Upstream: t.Upstream, Rule: d.RuleName(), Mode: string(d.Mode), Hints: &hints}
	if d.Mode == ModeApproval {
		rec.RuleApprovers = d.Approvers
	}
	if req := ex.Request(); req != nil && req.Session != nil {
		rec.Session = req.Session.ID()
		if p := req.Session.InitializeParams(); p != nil && p.ClientInfo != nil {
			rec.Client = p.ClientInfo.Name + "/" + p.ClientInfo.Version
		}
	}
	if c != nil {
		rec.Args = g.redactedArgs(c)
		if digest, err := c.digest(); err == nil {
			rec.ArgsDigest = hex.EncodeToString(digest[:])
		}
		rec.ConfirmedBy = c.confirmedBy
		rec.Approvers, rec.Grant, rec.Approval = c.approvers, c.grant, c.approval
		if len(c.replaced) > 0 {
			rec.Replaced = redact.Args(c.replaced, c.policy.IsSecret)
		}
	}
	return rec
}

// recordRun is called when the gate lets c run. A confirmed call runs only
// once its record is durably written: when the log cannot take it and the
// audit is required, the call fails closed. An allowed call is recorded
// once, with its outcome.
func (g *Gate) recordRun(ctx context.Context, c *Call, t *Tool, d Decision, ex Exchange, tr *trail) error {
	tr.ran = true
	if c.confirmedBy == "" {
		tr.decision = audit.DecisionAllowed
		return nil
	}
	tr.decision = audit.DecisionConfirmed
	if g.audit == nil {
		return nil
	}
	rec := g.callRecord(c, t, c.Identity, ex, d)
	rec.Decision = audit.DecisionConfirmed
	if err := g.audit.Append(ctx, true, rec); err != nil {
		if g.auditOptional {
			g.log.ErrorContext(ctx, "audit log cannot be written; running the confirmed call anyway (audit.required is false)",
				"tool", c.Tool, "error", clip(err.Error()))
			return nil
		}
		return &Error{
			Code: CodeUpstreamUnavailable,
			Message: fmt.Sprintf("interlock's audit log cannot be written, and a confirmed call runs only once its record is safe: "+
				"%s did not run.", c.Tool),
			Hint:         "Retry in a few seconds; if it keeps failing, tell the operator that interlock's audit log is down.",
			RetryAfterMS: 2000,
			Err:          err,
		}
	}
	tr.recorded = true
	return nil
}

// recordOutcome writes the record of how a call ended.
func (g *Gate) recordOutcome(ctx context.Context, t *Tool, id Identity, ex Exchange, d Decision, tr *trail, res *mcp.CallToolResult, err error, took time.Duration) {
	if g.audit == nil {
		return
	}
	rec := g.callRecord(tr.call, t, id, ex, d)
	rec.Decision = tr.decisionOf(res, err)
	rec.Outcome = outcomeOf(res, err)
	rec.LatencyMS = float64(took.Microseconds()) / 1000
	if tr.budget != "" {
		rec.Detail = fmt.Sprintf("budget %q is spent", tr.budget)
	}
	if err != nil {
		rec.Summary = BodyOf(err).Summary
	} else if res != nil && res.InputRequests != nil {
		if form, ok := res.InputRequests[formRequestID].(*mcp.ElicitParams); ok && !tr.ran {
			rec.Summary = form.Message
		}
	}
	failed := func(err error) {
		if err != nil {
			g.log.ErrorContext(ctx, "audit log cannot be written", "tool", t.Name, "error", clip(err.Error()))
		}
	}
	if g.queue != nil && rec.Decision == audit.DecisionAllowed {
		failed(g.queue.Queue(failed, rec))
		return
	}
	// A call its client cancelled is still recorded: the cancellation ends
	// the call, not the record of how it ended.
	failed(g.audit.Append(context.WithoutCancel(ctx), false, rec))
}

// RecordEvent appends a record of something that happened around the gate
// (a refused API key, an upstream restart). It sets the record's time when
// unset; a failure to write it is logged.
func (g *Gate) RecordEvent(ctx context.Context, rec *audit.Record) {
	recordEvent(ctx, g.audit, g.log, rec)
}

// recordEvent appends rec to log, when there is one, with its time set
// when unset; a failure to write it is logged.
func recordEvent(ctx context.Context, log audit.Log, logger *slog.Logger, rec *audit.Record) {
	if log == nil {
		return
	}
	if rec.Time.IsZero() {
		rec.Time = time.Now()
	}
	if err := log.Append(ctx, false, rec); err != nil {
		logger.ErrorContext(ctx, "audit log cannot be written", "event", rec.Event, "error", clip(err.Error()))
	}
}
