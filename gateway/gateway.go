// Package gateway puts interlock's gate in front of MCP servers whose code
// you do not control.
//
// A [Gateway] starts each upstream server as a child over stdio, or connects
// to it over streamable HTTP, mirrors its tools (refreshing when the child announces a change), advertises each tool
// with the hints the policy sees and the meta-arguments it accepts, and sends
// every call through the same [interlock.Gate] the library uses. Everything
// else the upstreams offer (resources, prompts, completion, logging,
// progress, and their requests of the client) passes through; see
// passthrough.go and link.go for how client sessions map to upstream ones. Clients
// reach it over stdio or streamable HTTP; see [Gateway.Handler] for HTTP
// authentication.
package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sort"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.opentelemetry.io/otel/trace"

	"github.com/interlock-mcp/interlock"
	"github.com/interlock-mcp/interlock/approval"
	"github.com/interlock-mcp/interlock/audit"
	"github.com/interlock-mcp/interlock/config"
	"github.com/interlock-mcp/interlock/console"
	"github.com/interlock-mcp/interlock/consolestate"
	"github.com/interlock-mcp/interlock/metrics"
	"github.com/interlock-mcp/interlock/policy"
	"github.com/interlock-mcp/interlock/resilience"
	"github.com/interlock-mcp/interlock/seal"
)

// Options configure a [Gateway].
type Options struct {
	// Version is reported to clients and upstreams.
	Version string
	// Logger receives the gateway's records; slog.Default() when nil.
	Logger *slog.Logger
	// Getenv reads the operator key and the sealing keys; os.Getenv when
	// nil.
	Getenv func(string) string
	// Tokens keeps live confirm tokens; in memory when nil.
	Tokens interlock.TokenStore
	// Audit receives a record of every decision, outcome and event; none
	// when nil. AuditOptional lets confirmed calls run when it cannot be
	// written.
	Audit         audit.Log
	AuditOptional bool
	// Metrics, when set, counts the gate's calls and the gateway's events
	// and is served at /metrics.
	Metrics *metrics.Metrics
	// Tracer, when set, makes spans for every call; see
	// interlock.GlobalTracer.
	Tracer trace.Tracer
	// Approvals keeps the approvals of mode approval, Grants the standing
	// grants approvers make; in memory when nil.
	Approvals approval.Store
	Grants    approval.GrantStore
	// Budgets counts the calls of the policy's budgets; in memory when
	// nil.
	Budgets interlock.BudgetStore
	// OnApproval hears every new pending approval (to notify approvers);
	// it must not block.
	OnApproval func(context.Context, *approval.Approval)
	// PublicURL is where approvers reach this gateway over HTTP, such as
	// http://127.0.0.1:8740: the approval_url of a pending approval points
	// into its console. Empty leaves approval_url out. With auth.oauth it
	// is also the base of the default audience (PublicURL/mcp) and of the
	// console's redirect URI; without it and without auth.oauth.audience,
	// every access token is refused.
	PublicURL string
	// FindConsole, for a gateway without a PublicURL (one on stdio),
	// returns the base URL of a console where approvers decide now, such
	// as the one another gateway on the same data directory announced;
	// "" when there is none. A pending approval's approval_url points
	// there.
	FindConsole func(context.Context) string
	// OperatorLinks, when set, spends a one-time console link made
	// outside the gateway (interlock console link): true when token was
	// one, live and not spent before. The console signs in the local
	// operator with it, and asks only while the gateway has neither API
	// keys nor an OAuth issuer.
	OperatorLinks func(ctx context.Context, token string) (bool, error)
	// ConsoleState keeps the console's sessions, passkeys and one-time
	// links, and ConsoleSignal carries the word that approvals changed,
	// between the gateways sharing them: with both in a shared store, an
	// approver's requests may land on any gateway. In this process's
	// memory when nil.
	ConsoleState  consolestate.Store
	ConsoleSignal consolestate.Signal
	// Probes check the stores for /readyz.
	Probes []Probe
}

// Gateway mirrors upstream tools behind the gate.
type Gateway struct {
	// running is the configuration in force; [Gateway.Reload] swaps it,
	// one reload at a time.
	running   atomic.Pointer[running]
	reloading sync.Mutex
	gate      *interlock.Gate
	server    *mcp.Server
	log       *slog.Logger
	upstreams []*upstream
	metrics   *metrics.Metrics
	console   *console.Console
	authn     *authenticator
	// stop ends the gateway's background work, which runs under life: the
	// loops that reconnect upstreams.
	life     context.Context
	stop     context.CancelFunc
	impl     *mcp.Implementation // what the gateway says of itself
	probes   []Probe
	inFlight inFlight

	mu sync.Mutex
	// owner maps each mirrored tool name to the upstream it came from.
	owner map[string]*upstream
	// advertised holds each mirrored tool as clients see it.
	advertised map[string]*mcp.Tool
	// pinned holds the strictest hints each upstream tool has claimed
	// since the gateway started or last reloaded, so a later listing can
	// only tighten them.
	pinned map[upstreamTool]interlock.Hints
	// handlers holds each mirrored tool's handler by name, for calls
	// served without the SDK's server (see lane.go).
	handlers sync.Map

	catalog catalog

	// shadowing writes the differences of the shadow policy, if any.
	shadowing shadowRecorder
}

// upstreamTool names a tool as its upstream does.
type upstreamTool struct{ upstream, tool string }

// New prepares a gateway for the configuration f. Nothing starts until
// [Gateway.Start].
func New(f *config.File, opts Options) (*Gateway, error) {
	log := opts.Logger
	if log == nil {
		log = slog.Default()
	}
	if f.Log == nil {
		f.Log = log
	}
	g := &Gateway{log: log, owner: map[string]*upstream{}, advertised: map[string]*mcp.Tool{},
		pinned: map[upstreamTool]interlock.Hints{}, shadowing: shadowRecorder{slots: make(chan struct{}, maxShadowRecords)}}
	g.running.Store(runningOf(f))
	gate, err := interlock.NewGate(g.decider(f), &interlock.GateOptions{
		Getenv:           opts.Getenv,
		MaxArgumentBytes: f.MaxArgumentBytes,
		Logger:           log,
		Identify:         identify,
		Tokens:           opts.Tokens,
		Audit:            opts.Audit,
		AuditOptional:    opts.AuditOptional,
		Meter:            meterOf(opts.Metrics),
		Tracer:           opts.Tracer,
		Approvals:        opts.Approvals,
		Grants:           opts.Grants,
		Budgets:          opts.Budgets,
		ApprovalURL:      approvalURL(opts.PublicURL),
		FindApprovalURL: func(ctx context.Context) string {
			if opts.FindConsole == nil {
				return ""
			}
			return approvalURL(opts.FindConsole(ctx))
		},
		// Pages that show approvals learn of a new one at once.
		OnApproval: func(ctx context.Context, a *approval.Approval) {
			g.console.Notify()
			if opts.OnApproval != nil {
				opts.OnApproval(ctx, a)
			}
		},
		CompileCondition: policy.CompileCondition,
		Identities:       g.currentIdentity,
	})
	if err != nil {
		return nil, err
	}
	g.gate = gate
	if g.authn, err = newAuthenticator(f, opts.PublicURL, g.verifyKey); err != nil {
		return nil, err
	}
	// The console seals sign-ins under way with keys of the gate's.
	getenv := opts.Getenv
	if getenv == nil {
		getenv = os.Getenv
	}
	sealing := seal.ParseKeys(getenv(interlock.SecretEnv))
	g.console = g.newConsole(opts.Audit, opts.PublicURL, opts.OperatorLinks, opts.ConsoleState, opts.ConsoleSignal, sealing)
	g.impl = &mcp.Implementation{Name: "interlock", Version: opts.Version}
	g.server = mcp.NewServer(g.impl, &mcp.ServerOptions{
		Instructions: "Tools behind interlock may answer with a structured error instead of running: read its code and " +
			"follow its recovery_hint. Destructive tools need the user's explicit consent before you confirm them.",
		// The SDK reports every session at info level; the gateway's own
		// records are the ones an operator reads.
		Logger:             slog.New(quieter{log.Handler()}),
		HasTools:           true,
		CompletionHandler:  g.complete,
		SubscribeHandler:   g.subscribe,
		UnsubscribeHandler: g.unsubscribe,
	})
	g.server.AddReceivingMiddleware(g.passThrough)
	g.server.AddReceivingMiddleware(g.tenantView)
	g.server.AddReceivingMiddleware(g.verbatimResults)
	hooks := upstreamHooks{promptsChanged: g.promptsChanged, resourcesChanged: g.resourcesChanged, resourceUpdated: g.resourceUpdated}
	life, stop := context.WithCancel(context.Background())
	g.life, g.stop = life, stop
	for _, cfg := range f.Upstreams {
		u := &upstream{cfg: cfg, file: f.Path, version: opts.Version, logger: log, onToolsChanged: g.refreshLogged, hooks: hooks, life: life}
		u.onEvent = func(name, detail string) {
			g.event(context.Background(), name, &audit.Record{Upstream: cfg.Name, Detail: detail})
		}
		if opts.Metrics != nil {
			u.onUp = func(up bool) { opts.Metrics.UpstreamUp(cfg.Name, up) }
		}
		u.guard = resilience.New(guardConfig(cfg), transient, func(state string) {
			log.Warn("upstream circuit changed", "upstream", cfg.Name, "state", state)
			if opts.Metrics != nil {
				opts.Metrics.Breaker(cfg.Name, state)
			}
		})
		g.upstreams = append(g.upstreams, u)
	}
	g.metrics, g.probes = opts.Metrics, opts.Probes
	return g, nil
}

// mirrored is a mirrored tool as the lane serves it.
type mirrored struct {
	handler mcp.ToolHandler
	// headerBound says the tool's schema binds arguments to HTTP headers,
	// which the SDK checks for clients of 2026-07-28.
	headerBound bool
}

// toolHandler returns the handler of the mirrored tool name, as the
// server runs it; nil when there is none.
func (g *Gateway) toolHandler(name string) mcp.ToolHandler {
	return g.mirroredTool(name).handler
}

func (g *Gateway) mirroredTool(name string) mirrored {
	m, _ := g.handlers.Load(name)
	t, _ := m.(mirrored)
	return t
}

// guardConfig is an upstream's resilience configuration.
func guardConfig(u *config.Upstream) resilience.Config {
	c := resilience.Config{Timeout: u.CallTimeout, MaxInFlight: uint(max(u.MaxInFlight, 0)), RatePerSecond: u.Rate}
	if u.Retries != nil {
		c.Retries = *u.Retries
		if c.Retries == 0 {
			c.Retries = -1
		}
	}
	if b := u.Breaker; b != nil {
		c.BreakerFailures, c.BreakerDelay = uint(max(b.Failures, 0)), b.Every
	}
	return c
}

// meterOf is m as the gate's Meter; nil when there are no metrics.
func meterOf(m *metrics.Metrics) interlock.Meter {
	if m == nil {
		return nil
	}
	return m
}

// event records something that happened around the gate in the audit log
// and the metrics; rec holds what else is known of it.
func (g *Gateway) event(ctx context.Context, name string, rec *audit.Record) {
	rec.Event = name
	g.gate.RecordEvent(ctx, rec)
	if g.metrics != nil {
		g.metrics.Event(name)
	}
}

// identify says who calls: the verified API key's principal and tenant
// over HTTP with keys, "anonymous" over HTTP without them, and the
// operating-system user on stdio.
func identify(ctx context.Context, req *mcp.CallToolRequest) interlock.Identity {
	if req.Extra != nil && req.Extra.TokenInfo != nil {
		// keyVerifier puts the session owner in UserID; the principal
		// alone is in Extra.
		extra := req.Extra.TokenInfo.Extra
		principal, _ := extra["principal"].(string)
		tenant, _ := extra["tenant"].(string)
		if principal != "" && tenant != "" {
			return interlock.Identity{Principal: principal, Tenant: tenant}
		}
	}
	if req.Extra != nil && req.Extra.TokenInfo == nil && req.Extra.Header != nil {
		return interlock.Identity{Principal: "anonymous", Tenant: interlock.TenantLocal}
	}
	return interlock.DefaultIdentify(ctx, req)
}

// Gate returns the gate every call goes through.
func (g *Gateway) Gate() *interlock.Gate { return g.gate }

// Server returns the MCP server clients talk to.
func (g *Gateway) Server() *mcp.Server { return g.server }

// Start connects every upstream and mirrors its tools. Two upstreams that
// expose the same tool name without a prefix to tell them apart is an error.
// An upstream that cannot be reached is not: the gateway serves the others,
// logs it, and keeps trying it in the background, with backoff; its tools
// appear when it answers. [Gateway.Ready] says which upstreams are down.
func (g *Gateway) Start(ctx context.Context) error {
	var errs []error
	for _, u := range g.upstreams {
		err := g.refresh(ctx, u, nil, true)
		if errors.Is(err, errLinkDown) {
			g.log.Warn("upstream unreachable at start; retrying in the background", "upstream", u.cfg.Name, "error", logText(err.Error()))
			u.mu.Lock()
			u.reconnectLater()
			u.mu.Unlock()
			continue
		}
		if err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// ToolCounts returns, for each upstream by name, how many tools it mirrors.
func (g *Gateway) ToolCounts() map[string]int {
	g.mu.Lock()
	defer g.mu.Unlock()
	counts := make(map[string]int, len(g.upstreams))
	for _, u := range g.upstreams {
		counts[u.cfg.Name] = 0
	}
	for _, u := range g.owner {
		counts[u.cfg.Name]++
	}
	return counts
}

func (g *Gateway) refreshLogged(u *upstream, via *mcp.ClientSession) {
	if err := g.refresh(context.Background(), u, via, false); err != nil {
		g.log.Error("refreshing tools", "upstream", u.cfg.Name, "error", err)
	}
}

// refresh mirrors the upstream's current tools: new ones are added, changed
// ones replaced, vanished ones removed. At start a name collision is an
// error; later it is logged and the newcomer skipped, so a misbehaving
// upstream cannot take over another's tool.
func (g *Gateway) refresh(ctx context.Context, u *upstream, via *mcp.ClientSession, starting bool) error {
	tools, err := u.tools(ctx, via)
	if err != nil {
		return err
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	seen := map[string]bool{}
	var errs []error
	for _, t := range tools {
		name := u.cfg.Prefix + t.Name
		if other, taken := g.owner[name]; taken && other != u {
			err := fmt.Errorf("tool %q is offered by upstreams %q and %q: give one of them a prefix (%s)", name, other.cfg.Name, u.cfg.Name, u.where())
			if starting {
				errs = append(errs, err)
			} else {
				g.log.Error("skipping colliding tool", "error", err)
			}
			continue
		}
		if seen[name] {
			continue
		}
		seen[name] = true
		if err := g.mirror(u, name, t); err != nil {
			errs = append(errs, err)
			continue
		}
		g.owner[name] = u
	}
	var gone []string
	for name, owner := range g.owner {
		if owner == u && !seen[name] {
			gone = append(gone, name)
			delete(g.owner, name)
		}
	}
	sort.Strings(gone)
	if len(gone) > 0 {
		g.server.RemoveTools(gone...)
		for _, name := range gone {
			g.handlers.Delete(name)
			g.gate.Forget(name)
			delete(g.advertised, name)
		}
	}
	return errors.Join(errs...)
}

// mirror registers one upstream tool under name behind the gate.
func (g *Gateway) mirror(u *upstream, name string, t *mcp.Tool) error {
	claimed := interlock.HintsOf(nil)
	if u.cfg.TrustsHints() {
		claimed = g.pin(u, t.Name, interlock.HintsOf(t.Annotations))
	}
	hints := g.config().Hints(name, u.cfg.Name, claimed)
	gt, err := interlock.NewTool(name, u.cfg.Name, hints, t.InputSchema)
	if err != nil {
		// The upstream still validates its own input; the gate cannot.
		g.log.Warn("input schema not usable for validation", "upstream", u.cfg.Name, "tool", name, "error", err)
		gt, _ = interlock.NewTool(name, u.cfg.Name, hints, nil)
	}
	view := *t
	view.Name = name
	adv, err := g.gate.Advertise(&view, u.cfg.Name, hints)
	if err != nil {
		return fmt.Errorf("upstream %q: %w", u.cfg.Name, err)
	}
	// A confirmation binds the tool as clients were shown it, so a tool
	// re-announced between ask and redeem cannot inherit the answer.
	gt.Definition = interlock.DefinitionDigest(adv)
	if old, ok := g.advertised[name]; ok && g.owner[name] == u && interlock.DefinitionDigest(old) == gt.Definition {
		// Shown as before, so decided as before: clients are not told of a
		// change, and confirmations given for it stay good.
		return nil
	}
	upstreamName := t.Name
	// Only a call that may be made twice is retried: a read-only or
	// idempotent tool, as the gate sees its hints.
	repeatable := gt.Hints.ReadOnly || gt.Hints.Idempotent
	g.gate.Register(gt, func(ctx context.Context, args json.RawMessage) (*mcp.CallToolResult, error) {
		return u.call(ctx, upstreamName, args, nil, repeatable)
	})
	g.advertised[name] = adv
	handler := func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		if !g.inFlight.enter() {
			return interlock.Result(errDraining), nil
		}
		defer g.inFlight.leave()
		run := func(ctx context.Context, args json.RawMessage) (*mcp.CallToolResult, error) {
			return u.call(ctx, upstreamName, args, req, repeatable)
		}
		// A call the lane serves carries its questions on its own stream.
		if st := laneStreamOf(ctx); st != nil {
			return g.gate.CallRequestVia(ctx, gt, req, st.elicit, run), nil
		}
		return g.gate.CallRequest(ctx, gt, req, run), nil
	}
	g.server.AddTool(adv, handler)
	schema, _ := json.Marshal(adv.InputSchema)
	g.handlers.Store(name, mirrored{handler: handler, headerBound: bytes.Contains(schema, []byte(`"x-mcp-header"`))})
	return nil
}

// pin returns the hints an upstream claims for its tool, less anything
// they loosen since the tool was first listed: an upstream must not be able
// to turn a gated tool into one that runs without a key by re-announcing
// it (a rug pull). Tightening is taken at once and kept. Pins last until
// the gateway restarts or reloads. The caller holds g.mu.
func (g *Gateway) pin(u *upstream, tool string, claimed interlock.Hints) interlock.Hints {
	key := upstreamTool{u.cfg.Name, tool}
	first, seen := g.pinned[key]
	if !seen {
		g.pinned[key] = claimed
		return claimed
	}
	strict := interlock.Hints{
		ReadOnly:    first.ReadOnly && claimed.ReadOnly,
		Destructive: first.Destructive || claimed.Destructive,
		Idempotent:  first.Idempotent && claimed.Idempotent,
		OpenWorld:   first.OpenWorld || claimed.OpenWorld,
	}
	if loosened := loosenedHints(strict, claimed); len(loosened) > 0 {
		g.log.Warn("upstream loosened a tool's hints; the stricter ones stay until the gateway restarts or reloads",
			"upstream", u.cfg.Name, "tool", tool, "hints", strings.Join(loosened, ","))
		g.event(context.Background(), "hints_loosened", &audit.Record{Upstream: u.cfg.Name, Tool: tool,
			Detail: "kept the stricter value of " + strings.Join(loosened, ", ")})
	}
	g.pinned[key] = strict
	return strict
}

// loosenedHints names the hints in which claimed is looser than strict.
func loosenedHints(strict, claimed interlock.Hints) []string {
	var names []string
	if claimed.ReadOnly && !strict.ReadOnly {
		names = append(names, "readOnlyHint")
	}
	if !claimed.Destructive && strict.Destructive {
		names = append(names, "destructiveHint")
	}
	if claimed.Idempotent && !strict.Idempotent {
		names = append(names, "idempotentHint")
	}
	if !claimed.OpenWorld && strict.OpenWorld {
		names = append(names, "openWorldHint")
	}
	return names
}

// advertisedTools returns the mirrored tools as clients see them, by name.
func (g *Gateway) advertisedTools() []*mcp.Tool {
	g.mu.Lock()
	defer g.mu.Unlock()
	names := make([]string, 0, len(g.advertised))
	for n := range g.advertised {
		names = append(names, n)
	}
	sort.Strings(names)
	tools := make([]*mcp.Tool, len(names))
	for i, n := range names {
		tools[i] = g.advertised[n]
	}
	return tools
}

// Close stops every upstream and the console's event streams.
func (g *Gateway) Close() error {
	g.console.Close()
	g.stop()
	g.shadowing.pending.Wait()
	var errs []error
	for _, u := range g.upstreams {
		if err := u.close(); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// quieter passes on only warnings and errors.
type quieter struct{ slog.Handler }

func (q quieter) Enabled(ctx context.Context, l slog.Level) bool {
	return l >= slog.LevelWarn && q.Handler.Enabled(ctx, l)
}

func (q quieter) WithAttrs(attrs []slog.Attr) slog.Handler {
	return quieter{q.Handler.WithAttrs(attrs)}
}

func (q quieter) WithGroup(name string) slog.Handler { return quieter{q.Handler.WithGroup(name)} }
