package interlock

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/fnv"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/interlock-mcp/interlock/approval"
	"github.com/interlock-mcp/interlock/audit"
)

// DefaultApprovalTimeout is how long an approval may stay undecided unless
// the rule says otherwise.
const DefaultApprovalTimeout = 15 * time.Minute

// DefaultMaxPending is how many approvals under one rule a caller may have
// waiting at once, unless the decision says otherwise.
const DefaultMaxPending = 10

// approvalKey binds an approval to a call and to the rule that asks for
// it (ruleDigest): a rule that changes asks its approvers anew.
func approvalKey(c *Call, ruleDigest string) (string, error) {
	digest, err := c.digest()
	if err != nil {
		return "", fmt.Errorf("digesting arguments of %s: %w", c.Tool, err)
	}
	h := sha256.New()
	for _, s := range []string{c.Tenant, c.Principal, c.Tool} {
		h.Write([]byte(s))
		h.Write([]byte{0})
	}
	h.Write(digest[:])
	h.Write(c.definition[:])
	h.Write([]byte(ruleDigest))
	return hex.EncodeToString(h.Sum(nil)), nil
}

// approval applies mode approval. A standing grant that stands for the
// deciding rule confirms the call at once. Otherwise the first call
// creates a pending approval and answers APPROVAL_PENDING; the same call
// again while it is pending answers the same approval. Once enough
// approvers said yes, the caller's identical call consumes the approval and
// runs, exactly once, before the approval's deadline to run. One denial
// ends it (DECLINED); no decision in time is CANCELLED; an approved call
// that did not run in time asks anew.
func (g *Gate) approval(ctx context.Context, c *Call, d Decision, ex Exchange) error {
	digest := d.approvalDigest()
	if sg, err := g.approvals.useGrant(ctx, c, d, digest); err != nil || sg != nil {
		if sg != nil {
			c.confirmedBy, c.grant = ConfirmedByGrant, sg.ID
			c.approvers = []string{sg.GrantedBy}
		}
		return err
	}
	a, asked, lapsed, err := g.requestApproval(ctx, c, d, digest)
	if err != nil {
		return err
	}
	c.approval = a.ID
	if asked {
		if g.onApproval != nil {
			g.onApproval(ctx, a)
		}
		g.showApprovalURL(ctx, a, ex)
	}
	if decided, err := g.decided(ctx, c, d, a); decided {
		return err
	}
	return g.pendingApproval(ctx, c, a, lapsed)
}

// requestApproval asks the store for the approval of c: the one an
// identical call asked for before, or a new one (asked). An approval that
// was approved but whose call came back too late is recorded and returned
// as lapsed, and a new one is asked for in its place. A preview that says
// the call cannot succeed ends it before anyone is asked.
func (g *Gate) requestApproval(ctx context.Context, c *Call, d Decision, digest string) (a *approval.Approval, asked bool, lapsed *approval.Approval, err error) {
	key, err := approvalKey(c, digest)
	if err != nil {
		return nil, false, nil, err
	}
	timeout := d.Timeout
	if timeout <= 0 {
		timeout = DefaultApprovalTimeout
	}
	// Approvers see what the call will do.
	summary, err := g.describe(ctx, c, d)
	if err != nil {
		return nil, false, nil, err
	}
	mu := g.askingFor(c.Identity)
	mu.Lock()
	defer mu.Unlock()
	if err := g.underPendingLimit(ctx, c, d, key); err != nil {
		return nil, false, nil, err
	}
	now := time.Now()
	candidate := &approval.Approval{ID: approval.NewID("apr_"), Key: key, Tenant: c.Tenant, Principal: c.Principal, Tool: c.Tool,
		Upstream: c.Upstream, Rule: d.Rule, RuleDigest: digest, Args: g.redactedArgs(c), Summary: summary,
		Approvers: d.Approvers, Quorum: max(d.Quorum, 1), RequirePasskey: d.RequirePasskey,
		CreatedAt: now, ExpiresAt: now.Add(timeout), RunWithin: d.RunWithin}
	if a, err = g.approvals.store.Request(ctx, candidate); err != nil {
		return nil, false, nil, confirmationStoreDown(c, err)
	}
	if a.State(time.Now()) == approval.Lapsed {
		lapsed = a
		g.RecordEvent(ctx, &audit.Record{Event: "approval_lapsed", Tenant: a.Tenant, Principal: a.Principal, Tool: a.Tool,
			Upstream: a.Upstream, Rule: a.Rule, Approval: a.ID, Decision: audit.DecisionExpired, RuleApprovers: a.Approvers,
			Detail: fmt.Sprintf("%s: approved, but its call did not run by %s", a.ID, a.RunBy.UTC().Format(time.RFC3339))})
		if a, err = g.approvals.store.Request(ctx, candidate); err != nil {
			return nil, false, nil, confirmationStoreDown(c, err)
		}
	}
	return a, a.ID == candidate.ID, lapsed, nil
}

// underPendingLimit refuses to ask for a new approval for c once its
// caller has the decision's most approvals under its rule waiting: each new
// one tells every approver, and an agent looping over new arguments would
// flood them. A call whose identical approval is waiting (key) asks for
// nothing new.
func (g *Gate) underPendingLimit(ctx context.Context, c *Call, d Decision, key string) error {
	limit := d.MaxPending
	if limit <= 0 {
		limit = DefaultMaxPending
	}
	pending, err := g.approvals.store.Waiting(ctx, c.Tenant, c.Principal)
	if err != nil {
		return confirmationStoreDown(c, err)
	}
	waiting := 0
	for _, a := range pending {
		if a.Key == key {
			return nil
		}
		if a.Rule == d.Rule {
			waiting++
		}
	}
	if waiting < limit {
		return nil
	}
	return &Error{
		Code: CodeRateLimited,
		Message: fmt.Sprintf("You already have %d approvals waiting under rule %q, the most it allows at once, so no approval was asked for %s and it did not run.",
			waiting, d.Rule, c.Tool),
		Hint: "Do not try other arguments: wait until the approvers decide the calls already waiting (call them again to learn their state), " +
			"or ask the user.",
	}
}

// askingFor is the lock a caller's calls take to count its waiting
// approvals and ask for a new one, so that calls made at once cannot all
// count the same approvals and pass the limit together. Callers share
// the locks in stripes; gateways that share a store may still pass the
// limit by one approval each.
func (g *Gate) askingFor(id Identity) *sync.Mutex {
	h := fnv.New32a()
	h.Write([]byte(id.Tenant))
	h.Write([]byte{0})
	h.Write([]byte(id.Principal))
	return &g.asking[h.Sum32()%uint32(len(g.asking))]
}

// decided is what a decided approval a means for c: an approved one is
// consumed, exactly once, and lets the call run (err nil); a denied or
// expired one ends it. decided is false while a waits for its approvers.
func (g *Gate) decided(ctx context.Context, c *Call, d Decision, a *approval.Approval) (decided bool, err error) {
	switch a.State(time.Now()) {
	case approval.Approved:
		if d.RequirePasskey {
			if err := g.approvals.verifySignedVotes(ctx, a); err != nil {
				return true, err
			}
		}
		ok, err := g.approvals.store.Consume(ctx, a.ID)
		if err != nil {
			return true, confirmationStoreDown(c, err)
		}
		if !ok {
			return true, &Error{Code: CodeConsentTokenInvalid,
				Message: fmt.Sprintf("The approval %s was already used by an identical call, or its time to run ran out; this one did not run.", a.ID),
				Hint:    fmt.Sprintf("Call %s again to ask for a new approval, if the user still wants it to run.", c.Tool)}
		}
		c.confirmedBy = ConfirmedByApproval
		for _, v := range a.Approvals {
			c.approvers = append(c.approvers, v.Principal)
		}
		return true, nil
	case approval.Denied:
		reason := ""
		if a.Denial.Reason != "" {
			reason = " Their reason: " + clip(a.Denial.Reason)
		}
		return true, &Error{Code: CodeDeclined,
			Message: fmt.Sprintf("%s denied %s; nothing ran.%s", a.Denial.Principal, c.Tool, reason),
			Hint:    fmt.Sprintf("The approver refused: do not call %s again unless the user gives new instructions.", c.Tool)}
	case approval.Expired:
		return true, &Error{Code: CodeCancelled,
			Message: fmt.Sprintf("Nobody decided the approval of %s before %s; nothing ran.", c.Tool, a.ExpiresAt.UTC().Format(time.RFC3339)),
			Hint:    "Ask the user whether to proceed; calling again asks the approvers anew."}
	}
	return false, nil
}

// pendingApproval is the answer to c while a waits for its approvers:
// APPROVAL_PENDING, with where to decide it, or what to start when no
// console runs; lapsed is the approval a replaced, if any.
func (g *Gate) pendingApproval(ctx context.Context, c *Call, a, lapsed *approval.Approval) error {
	wait := time.Until(a.ExpiresAt)
	url := g.approvalURL(ctx, a.ID)
	hint := fmt.Sprintf("Tell the user the call waits for approval (show them approval_url), then call %s again with the same "+
		"arguments after retry_after_ms; it runs once approved. Do not change the arguments: that asks for a new approval.", c.Tool)
	if url == "" {
		hint = fmt.Sprintf("Tell the user the call waits for approval %s by %s, and that no console is running where they can decide it: "+
			"they start `interlock serve` on the same data directory or store (it prints a one-time sign-in link to its console). "+
			"Then call %s again with the same arguments; it runs once approved.", a.ID, a.Deciders(), c.Tool)
	}
	msg := fmt.Sprintf("%s waits for approval by %s; it has not run.", c.Tool, a.Deciders())
	if lapsed != nil {
		msg = fmt.Sprintf("The approval %s was approved, but %s had to run by %s and did not; it waits for a new approval by %s and has not run.",
			lapsed.ID, c.Tool, lapsed.RunBy.UTC().Format(time.RFC3339), a.Deciders())
	}
	return &Error{
		Code:         CodeApprovalPending,
		Message:      msg,
		Hint:         hint,
		Preview:      a.Args,
		Summary:      a.Summary,
		RetryAfterMS: min(wait, 10*time.Second).Milliseconds(),
		ApprovalID:   a.ID,
		ApprovalURL:  url,
		ExpiresAt:    a.ExpiresAt,
	}
}

// approvalDigest identifies what the deciding rule asks of approvers: the
// policy's digest of the rule's whole definition when it gives one (package
// policy does), or else a digest of the decision's own approval fields,
// for policies written in Go.
func (d Decision) approvalDigest() string {
	if d.RuleDigest != "" {
		return d.RuleDigest
	}
	h := sha256.New()
	fmt.Fprintf(h, "interlock decision v1\x00%q\x00%s\x00%q\x00%d\x00%t\x00%d\x00%d", d.Rule, d.Mode, d.Approvers, d.Quorum, d.RequirePasskey, d.Timeout, d.RunWithin)
	return hex.EncodeToString(h.Sum(nil))
}

// urlWait bounds how long the gate waits for a client to acknowledge the
// approval's URL; the call has answered long before.
const urlWait = time.Minute

// showApprovalURL also sends a new approval's URL to a client that
// declared URL-mode elicitation, so its human can open it. The call does
// not wait: it answers APPROVAL_PENDING at once, and whatever the client
// answers changes nothing (only approvers decide).
func (g *Gate) showApprovalURL(ctx context.Context, a *approval.Approval, ex Exchange) {
	url := g.approvalURL(ctx, a.ID)
	if ex = ex.Resolved(); ex.ShowURL == nil || url == "" {
		return
	}
	params := &mcp.ElicitParams{Mode: "url", URL: url, ElicitationID: a.ID,
		Message: fmt.Sprintf("%s waits for approval by %s. Open the link to follow it: %s", a.Tool, a.Deciders(), a.Summary)}
	show := ex.ShowURL
	go func() {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), urlWait)
		defer cancel()
		if _, err := show(sctx, params); err != nil {
			g.log.DebugContext(sctx, "client did not take the approval URL", "approval", a.ID, "error", clip(err.Error()))
		}
	}()
}

// ApprovalDryRunHint is the recovery hint of an approval-mode
// DRY_RUN_PREVIEW.
const ApprovalDryRunHint = "Set MCP_DRY_RUN=false AND call again: the call will wait for approval by the people the policy names"

// ConfirmedByApproval marks a call its approvers confirmed.
const ConfirmedByApproval = "approval"

func (g *Gate) approvalURL(ctx context.Context, id string) string {
	base := g.approvalBase
	if base == "" && g.findApproval != nil {
		base = g.findApproval(ctx)
	}
	if base == "" {
		return ""
	}
	return strings.TrimSuffix(base, "/") + "/" + id
}

// StoreUnavailable is what an approver is told when interlock's approval
// store failed under their request (approvals, grants, or the passkeys a
// decision is checked against): undone says what that left undone
// ("nothing was decided"), and the same request may succeed in a moment.
// An answer of the rules (of approvals, of passkeys, or an [*Error])
// passes as it is; err is kept for the log, never shown.
func StoreUnavailable(err error, undone string) error {
	if _, ok := errors.AsType[*Error](err); ok || err == nil || approval.IsRuleError(err) ||
		errors.Is(err, ErrPasskeyRequired) || errors.Is(err, ErrPasskeyInvalid) || errors.Is(err, ErrPasskeyReplayed) {
		return err
	}
	return &Error{
		Code:         CodeUpstreamUnavailable,
		Message:      "interlock's approval store cannot be reached, so " + undone + ".",
		Hint:         "Retry in a few seconds; if it keeps failing, tell the operator that interlock's store is down.",
		RetryAfterMS: 2000,
		Err:          err,
	}
}

// Approvals returns the service that keeps the gate's approvals and
// standing grants, as [GateOptions.Approvals] gave it or as the gate made
// it.
func (g *Gate) Approvals() *ApprovalService { return g.approvals }
