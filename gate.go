package interlock

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"os/user"
	"sync"
	"sync/atomic"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/interlock-mcp/interlock/approval"
	"github.com/interlock-mcp/interlock/audit"
	"github.com/interlock-mcp/interlock/budget"
	"github.com/interlock-mcp/interlock/exchange"
	"github.com/interlock-mcp/interlock/internal/strictjson"
	"github.com/interlock-mcp/interlock/redact"
	"github.com/interlock-mcp/interlock/seal"
	"github.com/interlock-mcp/interlock/tracing"
)

// DefaultMaxArgumentBytes is the largest raw argument object the gate reads
// unless configured otherwise.
const DefaultMaxArgumentBytes = 1 << 20

// DryRunFromEnv reads the operator key from getenv (os.Getenv when nil).
// Dry run stays on unless MCP_DRY_RUN is the literal string "false": "0",
// "no", "FALSE" and typos all keep it on.
func DryRunFromEnv(getenv func(string) string) bool {
	if getenv == nil {
		getenv = os.Getenv
	}
	return getenv("MCP_DRY_RUN") != "false"
}

// GateOptions configure a [Gate]. The zero value is ready to use.
type GateOptions struct {
	// Getenv reads the environment for the operator key and the sealing
	// keys; os.Getenv when nil.
	Getenv func(string) string
	// MaxArgumentBytes bounds the raw arguments of one call;
	// DefaultMaxArgumentBytes when zero.
	MaxArgumentBytes int
	// Logger receives one record per decision; slog.Default() when nil.
	Logger *slog.Logger
	// Identify says who makes a call; [DefaultIdentify] when nil.
	Identify func(context.Context, *mcp.CallToolRequest) Identity
	// Sealer seals confirm tokens. When nil, the keys come from
	// INTERLOCK_SECRET (comma-separated, the first seals); when that is
	// unset too, a random key is made and a warning says tokens will not
	// survive a restart or cross replicas.
	Sealer *seal.Sealer
	// Tokens keeps live confirm tokens; an in-memory store when nil.
	Tokens TokenStore
	// Meter receives the statistics of every call; none when nil.
	Meter Meter
	// Tracer makes a span for every call and for the tool's run, such as
	// otel.Tracer("github.com/interlock-mcp/interlock"); none when nil,
	// which costs nothing.
	Tracer trace.Tracer
	// Audit receives a record of every decision and outcome; none are kept
	// when nil. A confirmed call runs only once its record is durably
	// written, unless AuditOptional is set: then a log that cannot be
	// written is logged and the call runs anyway.
	Audit         audit.Log
	AuditOptional bool
	// QueueAllowed lets the answer to an allowed call (one no key had to
	// confirm) go out once its record is queued, not committed, when
	// Audit is an [audit.Queuer]: the append leaves the call's path, and a
	// crash of the process loses the records still queued. The records of
	// every other call are committed before their answers, as without it.
	QueueAllowed bool

	// Approvals keeps the approvals of mode approval and the standing grants
	// that stand in for them; in memory, without grants, when nil.
	Approvals *ApprovalService
	// ApprovalURL is where approvers open an approval: the approval's id
	// is appended, as in https://gw.example/console/approvals/ID. Empty
	// leaves approval_url out, unless FindApprovalURL names one.
	ApprovalURL string
	// FindApprovalURL is asked, when ApprovalURL is empty, for where
	// approvers open approvals now, such as the console of another
	// gateway on the same data directory: a gateway on stdio serves none
	// of its own. "" when there is none.
	FindApprovalURL func(context.Context) string
	// OnApproval hears every new pending approval (to notify approvers);
	// it must not block.
	OnApproval func(context.Context, *approval.Approval)
	// Budgets counts the confirmed calls of each budget a decision names;
	// in memory when nil.
	Budgets BudgetStore
}

// Gate is the one decision path every tool call takes, in the library and in
// the gateway alike.
type Gate struct {
	// current is the policy and argument bound calls start under; a
	// reload swaps it whole, and a call keeps the one it started with.
	current  atomic.Pointer[policyBound]
	dryRun   bool
	log      *slog.Logger
	identify func(context.Context, *mcp.CallToolRequest) Identity
	sealer   *seal.Sealer
	tokens   TokenStore

	audit         audit.Log
	auditOptional bool
	// queue is the audit log, when the records of allowed calls are only
	// queued (Options.QueueAllowed).
	queue  audit.Queuer
	meter  Meter
	tracer trace.Tracer

	approvals    *ApprovalService
	approvalBase string
	findApproval func(context.Context) string
	onApproval   func(context.Context, *approval.Approval)
	// asking is taken by a caller's call while it counts the approvals
	// the caller has waiting and asks for a new one (askingFor).
	asking [64]sync.Mutex

	budgets BudgetStore

	mu sync.RWMutex
	// tools are the tools the gate guards, by name, so a decision can
	// name one as its preview.
	tools map[string]registered
}

// policyBound is a policy with the bound on one call's raw arguments that
// comes with it.
type policyBound struct {
	policy   Policy
	maxBytes int
}

type registered struct {
	tool *Tool
	run  Runner
}

// SecretEnv names the environment variable that holds the sealing keys.
const SecretEnv = "INTERLOCK_SECRET"

// NewGate returns a gate that decides with p. It reads the operator key and
// the sealing keys once, here: a running gate never changes its mind about
// dry run. It fails only on a sealing key that is too short.
func NewGate(p Policy, opts *GateOptions) (*Gate, error) {
	if opts == nil {
		opts = &GateOptions{}
	}
	getenv := opts.Getenv
	if getenv == nil {
		getenv = os.Getenv
	}
	g := &Gate{
		dryRun:   DryRunFromEnv(getenv),
		log:      opts.Logger,
		identify: opts.Identify,
		sealer:   opts.Sealer,
		tokens:   opts.Tokens,
		tools:    map[string]registered{},

		audit:         opts.Audit,
		auditOptional: opts.AuditOptional,
		meter:         opts.Meter,
		tracer:        opts.Tracer,

		approvals:    opts.Approvals,
		approvalBase: opts.ApprovalURL,
		findApproval: opts.FindApprovalURL,
		onApproval:   opts.OnApproval,

		budgets: opts.Budgets,
	}
	g.SetPolicy(p, opts.MaxArgumentBytes)
	if g.log == nil {
		g.log = slog.Default()
	}
	if q, ok := opts.Audit.(audit.Queuer); ok && opts.QueueAllowed {
		g.queue = q
	}
	if g.identify == nil {
		g.identify = DefaultIdentify
	}
	if g.tokens == nil {
		g.tokens = seal.NewMemoryTokens()
	}
	if g.approvals == nil {
		g.approvals = NewApprovalService(ApprovalOptions{Audit: g.audit, Logger: g.log})
	}
	if g.budgets == nil {
		g.budgets = budget.NewMemory()
	}
	if g.sealer == nil {
		s, err := SealerFromEnv(getenv, g.log)
		if err != nil {
			return nil, err
		}
		g.sealer = s
	}
	return g, nil
}

// SealerFromEnv returns the sealer of the keys [SecretEnv] holds. Without
// any it is a random key's, made for this process, and log hears that
// what it seals will not survive a restart or reach another replica.
func SealerFromEnv(getenv func(string) string, log *slog.Logger) (*seal.Sealer, error) {
	keys := seal.ParseKeys(getenv(SecretEnv))
	if len(keys) == 0 {
		keys = [][]byte{seal.RandomKey()}
		log.Warn(SecretEnv + " is not set: confirm tokens are sealed with a random key made for this process, " +
			"so they will not survive a restart or work across replicas")
	}
	s, err := seal.New(keys...)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", SecretEnv, err)
	}
	return s, nil
}

// Register records a guarded tool and how to run it, so that decisions can
// name it as a preview. [Gate.Guard] registers the tools it wraps.
func (g *Gate) Register(t *Tool, run Runner) {
	if err := t.setHumanArgs(g.Policy().HumanArgs(t.Name, t.Upstream, t.Hints)); err != nil {
		// The schema compiled once already; without the relaxed copy the
		// model's arguments are checked in full, which only fails closed.
		g.log.Warn("cannot relax input schema for human-picked arguments", "tool", t.Name, "error", err)
	}
	g.mu.Lock()
	g.tools[t.Name] = registered{t, run}
	g.mu.Unlock()
}

// Tool returns a registered tool and how to run it.
func (g *Gate) Tool(name string) (*Tool, Runner, bool) {
	g.mu.RLock()
	r, ok := g.tools[name]
	g.mu.RUnlock()
	return r.tool, r.run, ok
}

// Forget removes a tool that is no longer offered.
func (g *Gate) Forget(name string) {
	g.mu.Lock()
	delete(g.tools, name)
	g.mu.Unlock()
}

// DryRun reports whether the operator key keeps every gated call from running.
func (g *Gate) DryRun() bool { return g.dryRun }

// Policy returns the policy the gate decides with.
func (g *Gate) Policy() Policy { return g.current.Load().policy }

// SetPolicy makes p, with maxArgumentBytes as the bound on one call's raw
// arguments ([DefaultMaxArgumentBytes] when not positive), the policy of
// every call that starts from now on. A call already under way finishes
// under the policy it started with. Tools registered before keep the
// arguments the earlier policy had a human pick until they are registered
// again.
func (g *Gate) SetPolicy(p Policy, maxArgumentBytes int) {
	if maxArgumentBytes <= 0 {
		maxArgumentBytes = DefaultMaxArgumentBytes
	}
	g.current.Store(&policyBound{policy: p, maxBytes: maxArgumentBytes})
}

// Identify says who makes the call in req.
func (g *Gate) Identify(ctx context.Context, req *mcp.CallToolRequest) Identity {
	return g.identify(ctx, req)
}

var osUser = sync.OnceValue(func() string {
	if u, err := user.Current(); err == nil && u.Username != "" {
		return u.Username
	}
	if name := os.Getenv("USER"); name != "" {
		return name
	}
	return "local"
})

// TenantLocal is the tenant of callers on the local machine (stdio, or HTTP
// without authentication).
const TenantLocal = "local"

// DefaultIdentify takes the identity from the bearer token the transport
// verified (its UserID, and its Extra["tenant"]); without one the caller is
// the operating-system user in tenant "local", as on stdio.
func DefaultIdentify(_ context.Context, req *mcp.CallToolRequest) Identity {
	if req != nil && req.Extra != nil && req.Extra.TokenInfo != nil {
		ti := req.Extra.TokenInfo
		id := Identity{Principal: ti.UserID, Tenant: TenantLocal}
		if t, ok := ti.Extra["tenant"].(string); ok && t != "" {
			id.Tenant = t
		}
		return id
	}
	return Identity{Principal: osUser(), Tenant: TenantLocal}
}

// Tool is a tool as the gate sees it: its name, where it lives, its
// effective hints and its compiled input schema.
type Tool struct {
	Name string
	// Upstream names the server the tool belongs to; empty in the library.
	Upstream string
	Hints    Hints

	// Definition is the digest of the tool's definition as clients see it
	// (see [DefinitionDigest]); grants bind it, so a tool that changes
	// between a confirmation and its redemption is a mismatch.
	Definition [32]byte

	inputSchema any
	// full checks the arguments the tool finally runs with; model checks
	// what the model sent, which lacks the arguments a human picks.
	full, model strictjson.Validator
	human       []string
}

// NewTool compiles the input schema (any form the SDK accepts) of a tool the
// gate will guard.
func NewTool(name, upstream string, h Hints, inputSchema any) (*Tool, error) {
	v, err := strictjson.Compile(inputSchema)
	if err != nil {
		return nil, fmt.Errorf("tool %q: %w", name, err)
	}
	return &Tool{Name: name, Upstream: upstream, Hints: h, inputSchema: inputSchema, full: v, model: v}, nil
}

// setHumanArgs records the arguments a human picks in a form: the model's
// arguments are checked without requiring them.
func (t *Tool) setHumanArgs(names []string) error {
	t.human = names
	if len(names) == 0 || t.inputSchema == nil {
		t.model = t.full
		return nil
	}
	relaxed, err := strictjson.SchemaMap(t.inputSchema)
	if err != nil {
		return err
	}
	strictjson.DropRequired(relaxed, names)
	t.model, err = strictjson.Compile(relaxed)
	return err
}

// Runner executes a call that the gate let through, with the business
// arguments only. Its context tells for whom ([CallerOf]).
type Runner func(ctx context.Context, args json.RawMessage) (*mcp.CallToolResult, error)

type callerKey struct{}

// CallerOf returns the identity a [Runner] runs a call for, as the gate
// decided it: what a runner shares between callers (a connection, a
// circuit breaker) it keeps apart by it.
func CallerOf(ctx context.Context) (Identity, bool) {
	id, ok := ctx.Value(callerKey{}).(Identity)
	return id, ok
}

// Exchange is what a call's transport can carry back to a human before the
// call completes, and what came back (package exchange).
type Exchange = exchange.Exchange

// Call sends one call through the gate: it splits off the meta-arguments,
// validates the rest, decides, applies the operator key and the mode, and
// runs the tool only if every key the decision demands is present. The
// result of a call that ran is returned untouched; every refusal or failure
// is a structured error result. Call carries no exchange with a human: mode
// elicit falls back. MCP handlers use [Gate.CallRequestWith].
func (g *Gate) Call(ctx context.Context, t *Tool, id Identity, raw json.RawMessage, run Runner) *mcp.CallToolResult {
	return g.CallWith(ctx, t, id, raw, Exchange{}, run)
}

// CallRequestWith sends the call in req through the gate: [Gate.Call] with
// the caller's identity and the exchange the client can carry (ex, which
// exchange.Via reads from req; a face that carries a call's messages to
// its client itself passes its own way to ask). It is the one entry of
// every face, the gateway's included. req may be a view of a call another
// MCP library received, holding only what the gate reads of it: the
// tool's name, the raw arguments as the client sent them, and _meta (trace
// context); the caller's identity is read from it and from ctx (the
// options' Identify).
func (g *Gate) CallRequestWith(ctx context.Context, t *Tool, req *mcp.CallToolRequest, ex Exchange, run Runner) *mcp.CallToolResult {
	ctx = tracing.FromMeta(ctx, req.Params.Meta)
	return g.CallWith(ctx, t, g.identify(ctx, req), req.Params.Arguments, ex, run)
}

// CallWith is [Gate.Call] with an explicit exchange.
func (g *Gate) CallWith(ctx context.Context, t *Tool, id Identity, raw json.RawMessage, ex Exchange, run Runner) *mcp.CallToolResult {
	start := time.Now()
	ctx = context.WithValue(ctx, callerKey{}, id)
	var span trace.Span
	if g.tracer != nil {
		ctx, span = g.tracer.Start(ctx, "interlock.gate "+t.Name, trace.WithAttributes(
			attribute.String("interlock.tool", t.Name), attribute.String("interlock.upstream", t.Upstream),
			attribute.String("enduser.id", id.Principal), attribute.String("interlock.tenant", id.Tenant)))
	}
	tr := &trail{}
	res, d, err := g.safeCall(ctx, t, id, raw, ex, run, tr)
	if err != nil {
		res = Result(err)
	}
	took := time.Since(start)
	g.recordOutcome(ctx, t, id, ex, d, tr, res, err, took)
	decision, outcome := tr.decisionOf(res, err), outcomeOf(res, err)
	confirmedBy := ""
	if tr.call != nil {
		confirmedBy = tr.call.confirmedBy
	}
	if span != nil {
		span.SetAttributes(attribute.String("interlock.mode", string(d.Mode)), attribute.String("interlock.rule", d.Rule))
		tracing.EndCall(span, decision, outcome, confirmedBy, Code(outcome).ServerSide())
	}
	if g.meter != nil {
		g.meter.ObserveCall(CallStats{Tool: t.Name, Upstream: t.Upstream, Mode: string(d.Mode),
			Decision: decision, Outcome: outcome, ConfirmedBy: confirmedBy, Budget: tr.budget, Took: took, Ran: tr.ranFor})
	}
	// An allowed call that went well is on record in the audit log (and in
	// the metrics): its line is for debugging. Every other call, a
	// refusal, a confirmation or a failure, is a line an operator reads.
	level := slog.LevelInfo
	switch {
	case ErrorCode(err) == CodeInternal:
		level = slog.LevelError
	case decision == audit.DecisionAllowed && outcome == audit.OutcomeOK:
		level = slog.LevelDebug
	}
	if g.log.Enabled(ctx, level) {
		attrs := []slog.Attr{
			slog.String("tool", t.Name),
			slog.String("principal", id.Principal),
			slog.String("tenant", id.Tenant),
			slog.String("mode", string(d.Mode)),
			slog.String("decision", decision),
			slog.String("outcome", outcome),
		}
		if confirmedBy != "" {
			attrs = append(attrs, slog.String("confirmed_by", confirmedBy))
		}
		if d.Rule != "" {
			attrs = append(attrs, slog.String("rule", d.Rule))
		}
		if t.Upstream != "" {
			attrs = append(attrs, slog.String("upstream", t.Upstream))
		}
		if level == slog.LevelError {
			// Bounded: an error can quote arguments of any size.
			attrs = append(attrs, slog.String("error", clip(err.Error())))
		}
		g.log.LogAttrs(ctx, level, "tool call", attrs...)
	}
	return res
}

// safeCall is call, with a panic anywhere on the decision path (a policy, a
// store) turned into INTERNAL_ERROR: the gateway keeps serving, and
// nothing ran that the gate had not let through.
func (g *Gate) safeCall(ctx context.Context, t *Tool, id Identity, raw json.RawMessage, ex Exchange, run Runner, tr *trail) (res *mcp.CallToolResult, d Decision, err error) {
	defer func() {
		if r := recover(); r != nil {
			res, err = nil, fmt.Errorf("deciding %s panicked: %v", t.Name, r)
		}
	}()
	return g.call(ctx, t, id, raw, ex, run, tr)
}

func (g *Gate) call(ctx context.Context, t *Tool, id Identity, raw json.RawMessage, ex Exchange, run Runner, tr *trail) (*mcp.CallToolResult, Decision, error) {
	var d Decision
	cur := g.current.Load()
	if len(raw) > cur.maxBytes {
		return nil, d, &Error{
			Code:             CodeValidationFailed,
			Message:          fmt.Sprintf("The arguments are %d bytes; this gateway accepts at most %d.", len(raw), cur.maxBytes),
			Hint:             "Send smaller arguments, for example by splitting the work into several calls.",
			ValidationIssues: []ValidationIssue{{Path: "", Message: "arguments too large", Code: "too_large"}},
		}
	}
	p, err := splitArgs(raw)
	if err != nil {
		return nil, d, err
	}
	if issue := t.model.Check(p.args); issue != nil {
		return nil, d, invalidArguments(t.Name, issue)
	}
	c := &Call{Tool: t.Name, Upstream: t.Upstream, Hints: t.Hints, Identity: id, Args: p.args,
		Confirm: p.confirm, ConfirmToken: p.token, raw: p.raw, human: t.human, sent: p.args, definition: t.Definition, policy: cur.policy}
	tr.call = c
	d, err = c.policy.Decide(ctx, c)
	if err != nil {
		return nil, d, fmt.Errorf("deciding %s: %w", t.Name, err)
	}
	if ex.State != "" {
		// The retry of a call whose tool asked the client something: the
		// gate let it through the first time, and the sealed state says so.
		if claims, err := g.sealer.Open(ex.State); err == nil && claims.Kind == relayGrant.kind {
			args, retry, err := g.resume(ctx, c, ex)
			if err != nil {
				return nil, d, err
			}
			c.raw = args
			c.confirmedBy = ConfirmedByRelay
			// The decision was made, and recorded, when the call was first
			// let through; the continuation leaves one record, with its
			// outcome.
			tr.ran, tr.decision = true, audit.DecisionConfirmed
			ran := time.Now()
			res, err := g.run(context.WithValue(ctx, retryKey{}, retry), run, args)
			tr.ranFor = time.Since(ran)
			if err == nil && res.InputRequests != nil {
				res, err = g.relay(ctx, c, ex, res)
			}
			return res, d, err
		}
	}
	if d.Mode.Gated() && !g.dryRun && len(d.Budgets) > 0 {
		if err := g.checkBudgets(ctx, c, d, tr); err != nil {
			return nil, d, err
		}
	}
	if res, err := g.apply(ctx, c, d, ex); res != nil || err != nil {
		return res, d, err
	}
	if len(t.human) > 0 {
		// What a human picked is in the arguments now; they must fit the
		// tool as a whole.
		if issue := t.full.Check(c.Args); issue != nil {
			return nil, d, invalidArguments(t.Name, issue)
		}
	}
	if c.confirmedBy != "" && len(d.Budgets) > 0 {
		if err := g.takeBudgets(ctx, c, d, tr); err != nil {
			return nil, d, err
		}
	}
	if err := g.recordRun(ctx, c, t, d, ex, tr); err != nil {
		return nil, d, err
	}
	ran := time.Now()
	res, err := g.run(ctx, run, c.raw)
	tr.ranFor = time.Since(ran)
	if err == nil && res.InputRequests != nil {
		res, err = g.relay(ctx, c, ex, res)
	}
	return res, d, err
}

// apply applies the decision's mode. A nil result and nil error let the
// call run; a result is the answer instead of running (a question for a
// human); an error refuses.
func (g *Gate) apply(ctx context.Context, c *Call, d Decision, ex Exchange) (*mcp.CallToolResult, error) {
	switch d.Mode {
	case ModeAllow:
		return nil, nil
	case ModeDeny:
		why := ruleClause(d.Rule)
		if d.Reason != "" {
			why = ": " + d.Reason
		}
		return nil, &Error{
			Code:    CodeToolNotAllowed,
			Message: fmt.Sprintf("Policy does not allow %s%s.", c.Tool, why),
			Hint:    "Do not retry this tool; tell the user it is not allowed here, or ask the operator to change the policy.",
		}
	case ModeFlag:
		// Both keys in one answer: the agent's may be given already.
		return nil, g.flag(ctx, c, d)
	}
	if hint, ok := dryRunHints[d.Mode]; ok && g.dryRun {
		// The operator's key comes first: while dry run is on, no mode
		// issues a token or asks anyone.
		return nil, g.dryRunPreview(ctx, c, d, hint, []string{operatorKeyMissing})
	}
	switch d.Mode {
	case ModeToken:
		return nil, g.token(ctx, c, d)
	case ModeElicit:
		return g.elicit(ctx, c, d, ex)
	case ModeApproval:
		return nil, g.approval(ctx, c, d, ex)
	}
	return nil, fmt.Errorf("decision for %s has unimplemented mode %q", c.Tool, d.Mode)
}

// dryRunHints are the recovery hints of the modes whose own key is asked
// for only once the operator's is given.
var dryRunHints = map[Mode]string{ModeToken: TokenDryRunHint, ModeElicit: ElicitDryRunHint, ModeApproval: ApprovalDryRunHint}

func ruleClause(rule string) string {
	if rule == "" {
		return ""
	}
	return fmt.Sprintf(" (rule %q)", rule)
}

// run executes the tool, in a span of its own. A panicking handler becomes
// INTERNAL_ERROR rather than taking the server down with it.
func (g *Gate) run(ctx context.Context, run Runner, args json.RawMessage) (res *mcp.CallToolResult, err error) {
	if g.tracer != nil {
		var span trace.Span
		ctx, span = g.tracer.Start(ctx, "interlock.run", trace.WithSpanKind(trace.SpanKindClient))
		defer func() {
			span.SetAttributes(attribute.String("interlock.outcome", outcomeOf(res, err)))
			span.End()
		}()
	}
	defer func() {
		if r := recover(); r != nil {
			res, err = nil, fmt.Errorf("tool handler panicked: %v", r)
		}
	}()
	res, err = run(ctx, args)
	if err == nil && res == nil {
		res = &mcp.CallToolResult{Content: []mcp.Content{}}
	}
	return res, err
}

// redactedArgs returns the call's arguments as a client may see them.
func (g *Gate) redactedArgs(c *Call) map[string]any {
	return redact.Args(c.Args, c.policy.IsSecret)
}
