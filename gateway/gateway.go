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
	"context"
	"errors"
	"log/slog"
	"os"
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
	"github.com/interlock-mcp/interlock/task"
)

// Options configure a [Gateway].
type Options struct {
	// Version is reported to clients and upstreams.
	Version string
	// Logger receives the gate's decisions and the gateway's own records;
	// slog.Default() when nil.
	Logger *slog.Logger
	// Getenv reads the operator key (MCP_DRY_RUN) and the sealing keys
	// (INTERLOCK_SECRET); os.Getenv when nil.
	Getenv func(string) string
	// Audit receives a record of every decision, outcome and event; none
	// when nil. AuditOptional and QueueAllowed are the gate's options of
	// the same names ([interlock.GateOptions]).
	Audit         audit.Log
	AuditOptional bool
	QueueAllowed  bool
	// The stores of confirm tokens, budgets, approvals and standing
	// grants; each in this process's memory when nil.
	Tokens    interlock.TokenStore
	Budgets   interlock.BudgetStore
	Approvals approval.Store
	Grants    approval.GrantStore
	// OnApproval hears every new pending approval (to notify approvers);
	// it must not block.
	OnApproval func(context.Context, *approval.Approval)
	// Tasks keeps the tasks of calls that wait for approval (tasks.go);
	// in this process's memory when nil.
	Tasks task.Store
	// Metrics, when set, counts the gate's calls and the gateway's events
	// and is served at /metrics.
	Metrics *metrics.Metrics
	// Tracer, when set, makes a span for every call and for its run at
	// the upstream; see tracing.GlobalTracer.
	Tracer trace.Tracer
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
	// Instance is the id this gateway announces itself under in the store
	// it shares: its console proves it to a gateway on stdio that found
	// the console there, before that one sends approvers to it.
	Instance string
	// ConsoleState keeps the console's sessions, passkeys and one-time
	// links, and ConsoleSignal carries the word that approvals changed,
	// between the gateways sharing them: with both in a shared store, an
	// approver's requests may land on any gateway. In this process's
	// memory when nil.
	ConsoleState  consolestate.Store
	ConsoleSignal consolestate.Signal
	// Probes check the stores for /readyz.
	Probes []Probe
	// Drift, if set, says how the gateways sharing the store differ in
	// version or configuration ("" when they agree), for /readyz.
	Drift func(context.Context) string
}

// Gateway mirrors upstream tools behind the gate.
type Gateway struct {
	// running is the configuration in force; [Gateway.Reload] swaps it,
	// one reload at a time.
	running   atomic.Pointer[running]
	reloading sync.Mutex
	gate      *interlock.Gate
	approvals *interlock.ApprovalService
	tasks     *tasks
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
	drift    func(context.Context) string
	inFlight inFlight

	// tools is every mirrored tool (tools.go), swapped whole when an
	// upstream's tools change.
	tools atomic.Pointer[toolTable]
	// mu serializes changes to tools and guards pinned, the strictest
	// hints each upstream tool has claimed since the gateway started or
	// last reloaded, so a later listing can only tighten them.
	mu     sync.Mutex
	pinned map[upstreamTool]interlock.Hints

	catalog catalog

	// shadowing writes the differences of the shadow policy, if any.
	shadowing shadowRecorder

	// listens keeps each session's subscriptions/listen streams (listen.go).
	listens listens
	// stateless knows the calls served without a session (stateless.go).
	stateless statelessCalls

	// warnings are what is wrong with the configuration that does not stop
	// the gateway (check.go).
	warnings warnings
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
	if f.Policy.Log == nil {
		f.Policy.Log = log
	}
	getenv := opts.Getenv
	if getenv == nil {
		getenv = os.Getenv
	}
	if opts.ConsoleState == nil {
		// The console's sessions and the passkeys decisions are checked
		// against live in one store, whoever reads them.
		opts.ConsoleState = consolestate.NewMemory()
	}
	g := &Gateway{log: log,
		pinned: map[upstreamTool]interlock.Hints{}, shadowing: shadowRecorder{slots: make(chan struct{}, maxShadowRecords)}}
	g.running.Store(runningOf(f))
	g.tools.Store(&toolTable{})
	// The approval service comes first: the console and the gate both
	// hold it, and the console hears of each new approval from the gate.
	g.approvals = interlock.NewApprovalService(interlock.ApprovalOptions{Store: opts.Approvals, Grants: opts.Grants,
		CompileCondition: policy.CompileCondition, Identities: g.currentIdentity,
		Passkeys: console.Passkeys(opts.ConsoleState), Audit: opts.Audit, Logger: log})
	var err error
	if g.authn, err = newAuthenticator(f, opts.PublicURL, g.verifyKey); err != nil {
		return nil, err
	}
	// One sealer seals the gate's tokens and boxes the console's sign-ins
	// under way and the calls of tasks.
	sealer, err := interlock.SealerFromEnv(getenv, log)
	if err != nil {
		return nil, err
	}
	g.console = g.newConsole(opts, sealer)
	g.tasks = newTasks(opts.Tasks, sealer, log)
	gateOpts := g.gateOptions(f, opts, getenv)
	gateOpts.Sealer = sealer
	if g.gate, err = interlock.NewGate(g.decider(f), &gateOpts); err != nil {
		return nil, err
	}
	g.impl = &mcp.Implementation{Name: "interlock", Version: opts.Version}
	g.server = g.newServer()
	hooks := upstreamHooks{promptsChanged: g.promptsChanged, resourcesChanged: g.resourcesChanged, resourceUpdated: g.resourceUpdated}
	g.life, g.stop = context.WithCancel(context.Background())
	for _, cfg := range f.Upstreams {
		g.upstreams = append(g.upstreams, g.newUpstream(cfg, f.Policy.Path, opts, hooks))
	}
	g.metrics, g.probes, g.drift = opts.Metrics, opts.Probes, opts.Drift
	return g, nil
}

// gateOptions are the gate's options: what the caller gave, and what the
// gateway decides itself (who calls, the argument bound, the metrics,
// where approvals are decided).
func (g *Gateway) gateOptions(f *config.File, opts Options, getenv func(string) string) interlock.GateOptions {
	return interlock.GateOptions{Getenv: getenv, Logger: g.log, Tracer: opts.Tracer,
		Audit: opts.Audit, AuditOptional: opts.AuditOptional, QueueAllowed: opts.QueueAllowed,
		Tokens: opts.Tokens, Budgets: opts.Budgets, Approvals: g.approvals,
		MaxArgumentBytes: f.Policy.MaxArgumentBytes, Identify: identify, Meter: meterOf(opts.Metrics),
		ApprovalURL: approvalURL(opts.PublicURL),
		FindApprovalURL: func(ctx context.Context) string {
			if opts.FindConsole == nil {
				return ""
			}
			return approvalURL(opts.FindConsole(ctx))
		},
		OnApproval: func(ctx context.Context, a *approval.Approval) {
			// The console's pages, which show pending approvals, learn of
			// a new one at once.
			g.console.Notify()
			if opts.OnApproval != nil {
				opts.OnApproval(ctx, a)
			}
		}}
}

// newServer is the go-sdk server that serves every client session, with
// the gateway's middleware in the order a request meets it.
func (g *Gateway) newServer() *mcp.Server {
	server := mcp.NewServer(g.impl, &mcp.ServerOptions{
		Instructions: "Tools behind interlock may answer with a structured error instead of running: read its code and " +
			"follow its recovery_hint. Destructive tools need the user's explicit consent before you confirm them.",
		// The SDK reports every session at info level; the gateway's own
		// records are the ones an operator reads.
		Logger:   slog.New(quieter{g.log.Handler()}),
		HasTools: true,
		// The lists are the upstreams' and offered tells clients which
		// there are; the SDK must still know that there may be prompts and
		// resources, or it refuses a client of 2026-07-28 the
		// subscriptions/listen stream that carries their changes.
		HasPrompts:         true,
		HasResources:       true,
		CompletionHandler:  g.complete,
		SubscribeHandler:   g.subscribe,
		UnsubscribeHandler: g.unsubscribe,
	})
	server.AddReceivingMiddleware(g.receiving()...)
	server.AddSendingMiddleware(g.listens.sending)
	return server
}

// receiving is the gateway's middleware for what clients send, outermost
// first. The SDK's server and the lane (which serves tools/call without
// it) both run this one list, so nothing added here can skip the lane.
func (g *Gateway) receiving() []mcp.Middleware {
	return []mcp.Middleware{g.listens.receiving, g.toolFields, g.verbatimResults, g.tenantView, g.passThrough, boundToRequest}
}

// newUpstream is the upstream of cfg (defined in file), whose events,
// circuit and state go to the gateway's log, audit and metrics.
func (g *Gateway) newUpstream(cfg *config.Upstream, file string, opts Options, hooks upstreamHooks) *upstream {
	log := g.log
	u := &upstream{cfg: cfg, file: file, version: opts.Version, logger: log, onToolsChanged: g.refreshLogged, hooks: hooks, life: g.life}
	u.onEvent = func(name, detail string) {
		// The operator reads the log first; the audit and metrics count.
		log.Warn("upstream event", "event", name, "upstream", cfg.Name, "detail", detail)
		g.event(context.Background(), name, &audit.Record{Upstream: cfg.Name, Detail: detail})
	}
	if opts.Metrics != nil {
		u.onUp = func(up bool) { opts.Metrics.UpstreamUp(cfg.Name, up) }
		u.onDropped = func() { opts.Metrics.Event("upstream_log_dropped") }
	}
	u.guard = resilience.New(guardConfig(cfg), transient, func(tenant, state string) {
		log.Warn("upstream circuit changed", "upstream", cfg.Name, "tenant", tenant, "state", state)
		if opts.Metrics != nil {
			opts.Metrics.Breaker(cfg.Name, tenant, state)
		}
	})
	return u
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
	if s := stateOf(ctx); s.identified {
		return s.who
	}
	if req.Extra != nil && req.Extra.TokenInfo != nil {
		// keyVerifier puts the session owner in UserID; the principal
		// alone is in Extra.
		if who := identityOf(req.Extra.TokenInfo); who.Principal != "" && who.Tenant != "" {
			return interlock.Identity{Principal: who.Principal, Tenant: who.Tenant}
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
	g.logConfigWarnings()
	g.checkOffered(true)
	return errors.Join(errs...)
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
