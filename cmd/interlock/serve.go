package main

import (
	"context"
	"crypto/ed25519"
	_ "embed"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"net/url"
	"os"
	"os/signal"
	"path/filepath"
	"runtime/debug"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/interlock-mcp/interlock"
	"github.com/interlock-mcp/interlock/audit"
	"github.com/interlock-mcp/interlock/config"
	"github.com/interlock-mcp/interlock/console"
	"github.com/interlock-mcp/interlock/gateway"
	"github.com/interlock-mcp/interlock/metrics"
	"github.com/interlock-mcp/interlock/notify"
	"github.com/interlock-mcp/interlock/postgres"
	"github.com/interlock-mcp/interlock/redis"
	"github.com/interlock-mcp/interlock/roster"
	"github.com/interlock-mcp/interlock/sqlite"
	"github.com/interlock-mcp/interlock/tracing"
)

//go:embed builtin.yaml
var builtinConfig []byte

// builtinName is how messages refer to the embedded configuration.
const builtinName = "built-in config"

// loadConfig reads the file named by --config, or the built-in one, whose
// demo upstream runs this binary with its database in dataDir.
func loadConfig(name, dataDir string) (*config.File, error) {
	data, shown := builtinConfig, builtinName
	if name != "" {
		var err error
		if data, err = os.ReadFile(name); err != nil {
			return nil, fmt.Errorf("reading configuration: %w", err)
		}
		shown = name
	}
	f, err := config.Parse(shown, data, os.LookupEnv)
	if err != nil {
		return nil, err
	}
	if err := runThisProgram(f); err != nil {
		return nil, err
	}
	if name == "" && dataDir != "" {
		f.Upstreams[0].Command = append(f.Upstreams[0].Command, "--db", filepath.Join(dataDir, "demo.db"))
	}
	return f, nil
}

// runThisProgram makes an upstream command "interlock" this program,
// wherever it is installed, so the built-in config works when copied as it
// is, and so do the servers init wraps.
func runThisProgram(f *config.File) error {
	for _, u := range f.Upstreams {
		if len(u.Command) > 0 && u.Command[0] == "interlock" {
			exe, err := os.Executable()
			if err != nil {
				return fmt.Errorf("finding this program to run upstream %q: %w", u.Name, err)
			}
			u.Command[0] = exe
		}
	}
	return nil
}

// serve runs the gateway, in Caddy's order: the flags are read and
// checked, what the gateway needs is provisioned (the sealing key, the
// data directory, the configuration, the log, the stores, the audit log),
// the gateway is started (its listener, notifier, reloads and
// announcement), it serves until ctx ends, and what was provisioned is
// cleaned up in the reverse order.
func serve(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	flags, err := serveFlagsOf(args, stderr)
	if err != nil {
		return err
	}
	s := &serving{serveFlags: flags, stderr: stderr}
	defer s.cleanUp()
	if err := s.provision(ctx); err != nil {
		return err
	}
	if err := s.provisionStores(ctx); err != nil {
		return err
	}
	if err := s.provisionAudit(ctx); err != nil {
		return err
	}
	if err := s.start(ctx); err != nil {
		return err
	}
	return s.run(ctx, stdin, stdout)
}

// serveFlags are serve's command line.
type serveFlags struct {
	configFile, listen, data, publicURL, logFormat, logLevel, pprofAddr string
	stdio, stateless, watch                                             bool
}

// serveFlagsOf reads serve's command line and refuses flags that do not
// go together.
func serveFlagsOf(args []string, stderr io.Writer) (serveFlags, error) {
	var o serveFlags
	fs := newFlags("serve", stderr)
	fs.StringVar(&o.configFile, "config", "", "configuration `file` (default: the built-in config that fronts the demo)")
	fs.StringVar(&o.listen, "listen", "127.0.0.1:8740", "HTTP `address`; MCP is served at /mcp")
	fs.BoolVar(&o.stdio, "stdio", false, "serve one client on stdin/stdout instead of HTTP")
	fs.BoolVar(&o.stateless, "stateless", false, "streamable HTTP without sessions")
	fs.StringVar(&o.data, "data", ".interlock", "state `directory` (demo database, audit log)")
	fs.StringVar(&o.publicURL, "public-url", "", "`URL` where approvers reach this gateway, for the console links it hands out (default: http:// and the listen address)")
	fs.StringVar(&o.logFormat, "log-format", "text", "log `format`: text or json")
	fs.StringVar(&o.logLevel, "log-level", "info", "least `level` logged: debug, info, warn or error")
	fs.StringVar(&o.pprofAddr, "pprof", "", "serve Go's profiler (net/http/pprof) on this loopback `address`, for performance work")
	fs.BoolVar(&o.watch, "watch", false, "reload the --config file whenever it changes (SIGHUP reloads it in any case)")
	if err := parseFlags(fs, args); err != nil {
		return o, err
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	for _, pair := range [][2]string{{"stdio", "listen"}, {"stdio", "stateless"}} {
		if set[pair[0]] && set[pair[1]] {
			fmt.Fprintf(stderr, "interlock serve: --%s and --%s do not go together: --stdio serves one client on standard input, not HTTP\n", pair[0], pair[1])
			return o, errUsage
		}
	}
	if o.watch && o.configFile == "" {
		fmt.Fprintln(stderr, "interlock serve: --watch needs --config: the built-in config does not change")
		return o, errUsage
	}
	return o, nil
}

// serving is one run of serve: what each step provisions for the next,
// and what to clean up when it ends.
type serving struct {
	serveFlags
	stderr io.Writer

	hup        chan os.Signal
	secret     string
	sealing    string // where the sealing key came from, for the banner
	dataDir    string
	f          *config.File
	log        *slog.Logger
	opts       gateway.Options
	store      string       // what keeps the gateway's state, for the banner
	gateways   roster.Store // where the gateways sharing the store announce themselves
	auditWhere string
	ln         net.Listener
	notifier   *notify.Notifier
	gw         *gateway.Gateway
	reloaded   chan string

	cleanups []func()
}

// atEnd runs f when serving ends, before what was provisioned earlier.
func (s *serving) atEnd(f func()) { s.cleanups = append(s.cleanups, f) }

// cleanUp undoes what the steps did, the last first.
func (s *serving) cleanUp() {
	for i := len(s.cleanups) - 1; i >= 0; i-- {
		s.cleanups[i]()
	}
}

// provision takes the sealing key, makes the data directory, reads the
// configuration and makes the log, the profiler and tracing.
func (s *serving) provision(ctx context.Context) error {
	// Before anything else: from here on, processes of the same user
	// cannot read this one's memory or its environment, where the sealing
	// keys may have arrived.
	if err := forbidDumps(); err != nil {
		return fmt.Errorf("making the gateway non-dumpable: %w", err)
	}
	secret, err := takeSecret()
	if err != nil {
		return err
	}
	// SIGHUP is caught from the start: its default action would end a
	// gateway still starting. One that came early reloads once started.
	s.hup = make(chan os.Signal, 1)
	signal.Notify(s.hup, syscall.SIGHUP)
	s.atEnd(func() { signal.Stop(s.hup) })
	if s.dataDir, err = filepath.Abs(s.data); err != nil {
		return err
	}
	if err := os.MkdirAll(s.dataDir, 0o700); err != nil {
		return fmt.Errorf("creating data directory: %w", err)
	}
	s.sealing = "INTERLOCK_SECRET"
	if secret == "" {
		var made bool
		if secret, made, err = dataSecret(s.dataDir); err != nil {
			return err
		}
		s.sealing = filepath.Join(s.dataDir, dataSecretName)
		if made {
			s.sealing += " (made now; set INTERLOCK_SECRET to share it with gateways on other machines)"
		}
	}
	s.secret = secret
	if s.f, err = loadConfig(s.configFile, s.dataDir); err != nil {
		return err
	}
	if !s.stdio {
		if err := gateway.CheckListen(s.listen, s.f); err != nil {
			return err
		}
	}
	if s.log, err = newLogger(s.stderr, s.logFormat, s.logLevel); err != nil {
		return err
	}
	tuneGC(os.Getenv)
	if s.pprofAddr != "" {
		if err := startProfiler(s.pprofAddr, s.log); err != nil {
			return err
		}
	}
	stopTracing, traced, err := startTracing(ctx)
	if err != nil {
		return err
	}
	s.atEnd(stopTracing)
	s.opts = gateway.Options{Version: version, Logger: s.log, Getenv: func(name string) string {
		if name == interlock.SecretEnv {
			return s.secret
		}
		return os.Getenv(name)
	}}
	if !s.stdio {
		s.opts.Metrics = metrics.New()
	}
	if traced {
		s.opts.Tracer = tracing.GlobalTracer()
	}
	return nil
}

// provisionStores opens the stores of what must outlive a request: the
// data directory's state when no store is configured, else Redis and
// PostgreSQL. The gateways sharing them announce themselves in the
// store's PostgreSQL, else its Redis, else the data directory's state.
func (s *serving) provisionStores(ctx context.Context) error {
	f, opts := s.f, &s.opts
	if f.Store.Redis == "" && f.Store.Postgres == "" {
		// No store configured: confirm tokens, budgets, approvals and
		// grants live beside the audit log in the data directory, shared
		// by every process on it, and outlive a restart.
		state := filepath.Join(s.dataDir, "state.db")
		st, err := sqlite.OpenState(ctx, state)
		if err != nil {
			return err
		}
		s.atEnd(func() { st.Close() })
		approvals := st.Approvals()
		s.gateways = approvals
		opts.Tokens, opts.Budgets = st.Tokens(), st.Budgets()
		opts.Approvals, opts.Grants, opts.Tasks = approvals, approvals, st.Tasks()
		opts.ConsoleState, opts.ConsoleSignal = st.Console(), st.Console()
		s.store = "tokens, budgets, approvals, grants and console sessions in sqlite " + state + " (shared by every gateway on this data directory)"
	}
	if f.Store.Redis != "" {
		tokens, err := redis.Open(ctx, f.Store.Redis, f.Store.Prefix)
		if err != nil {
			return err
		}
		s.atEnd(func() { tokens.Close() })
		opts.Tokens, opts.Approvals, opts.Grants, opts.Budgets, opts.Tasks = tokens, tokens.Approvals(), tokens.Grants(), tokens.Budgets(), tokens.Tasks()
		opts.ConsoleState, opts.ConsoleSignal = tokens.Console(), tokens.Console()
		s.gateways = tokens.Roster()
		// A binding no token is issued under: a round trip that changes nothing.
		opts.Probes = append(opts.Probes, gateway.Probe{Name: "token store", Check: func(ctx context.Context) error {
			_, err := tokens.Consume(ctx, "readiness-probe", "")
			return err
		}})
		s.store = "redis " + redactURL(f.Store.Redis) + " (prefix " + f.Store.Prefix + ")"
	}
	if f.Store.Postgres != "" {
		approvals, err := postgres.OpenApprovals(ctx, f.Store.Postgres)
		if err != nil {
			return err
		}
		s.atEnd(func() { approvals.Close() })
		opts.Approvals, opts.Grants, opts.Tasks = approvals, approvals, approvals.Tasks()
		s.gateways = approvals
		// The console's state follows the approvals it shows.
		opts.ConsoleState, opts.ConsoleSignal = approvals.Console(), approvals.Console()
		if s.store == "" {
			s.store = "tokens in memory (this process only)"
		}
		s.store += "; approvals, grants and console sessions in postgres " + redactURL(f.Store.Postgres)
	}
	opts.Drift = func(ctx context.Context) string { return roster.Drift(s.seen(ctx)) }
	return nil
}

// seen are the gateways on the store now; none when it cannot say.
func (s *serving) seen(ctx context.Context) []roster.Gateway {
	gws, _ := s.gateways.Gateways(ctx, consoleSeen)
	return gws
}

// provisionAudit opens the audit log and, when configured, starts its
// checkpoints; the last one is signed after the gateway stopped serving.
func (s *serving) provisionAudit(ctx context.Context) error {
	auditLog, where, err := openAudit(ctx, s.f, s.dataDir)
	if err != nil {
		return err
	}
	s.atEnd(func() { auditLog.Close() })
	s.auditWhere = where
	s.opts.Audit, s.opts.AuditOptional, s.opts.QueueAllowed = auditLog, !s.f.Audit.IsRequired(), s.f.Audit.QueuesAllowed()
	s.opts.Probes = append(s.opts.Probes, gateway.Probe{Name: "audit log", Check: func(ctx context.Context) error {
		_, _, err := auditLog.Head(ctx)
		return err
	}})
	cp := s.f.Audit.Checkpoint
	if cp == nil {
		return nil
	}
	key, err := readKeyFile(cp.KeyFile)
	if err != nil {
		return err
	}
	sink, closeSinks, err := sinks(ctx, cp)
	if err != nil {
		return err
	}
	s.atEnd(closeSinks)
	c := &audit.Checkpointer{Head: auditLog.Head, Store: auditLog, Key: key, Sink: sink}
	cctx, stopCheckpoints := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		c.Run(cctx, cp.Every, func(err error) { s.log.Error("audit checkpoint", "error", err) })
	}()
	s.atEnd(func() { stopCheckpoints(); <-done })
	s.auditWhere += fmt.Sprintf(", checkpoints every %s by key %s", cp.Every, audit.KeyID(key.Public().(ed25519.PublicKey)))
	return nil
}

// start listens (approval links name the listener's address), starts the
// notifier and the gateway, its reloads and its announcement, and prints
// the banner.
func (s *serving) start(ctx context.Context) error {
	opts := &s.opts
	if !s.stdio {
		ln, err := net.Listen("tcp", s.listen)
		if err != nil {
			return fmt.Errorf("listening on %s: %w", s.listen, err)
		}
		s.ln = ln
		s.atEnd(func() { ln.Close() })
		opts.PublicURL = s.publicURL
		if opts.PublicURL == "" {
			opts.PublicURL = publicURLOf(ln.Addr())
		}
	} else {
		// A gateway on stdio serves no console: approvers decide at
		// --public-url, or at the console a gateway on the same data
		// store announces.
		opts.PublicURL = s.publicURL
		consoles := console.NewProber()
		opts.FindConsole = func(ctx context.Context) string { return answeringConsole(ctx, s.seen(ctx), consoles) }
	}
	// The id this gateway announces itself under: its console proves it
	// to gateways on stdio before they send approvers there.
	opts.Instance = randomText()[:12]
	// Approvers are told of new approvals with a link to them, by the
	// webhooks configured now or after a reload.
	base := strings.TrimSuffix(opts.PublicURL, "/")
	s.notifier = notify.New(webhooks(s.f), func(id string) string {
		if base == "" {
			return ""
		}
		return base + "/console/approvals/" + id
	}, s.log)
	nctx, stopNotify := context.WithCancel(ctx)
	s.atEnd(stopNotify)
	go s.notifier.Run(nctx)
	opts.OnApproval = s.notifier.Pending
	gw, err := gateway.New(s.f, *opts)
	if err != nil {
		return err
	}
	s.gw = gw
	s.atEnd(func() { gw.Close() })
	if err := gw.Start(ctx); err != nil {
		return err
	}
	startDigest, _ := versionOf(s.f)
	gw.RecordStart(ctx, version, startDigest)
	s.startReloads(ctx)
	where, consoleAt, err := s.whereAndConsole(ctx)
	if err != nil {
		return err
	}
	me := roster.Gateway{ID: opts.Instance, Version: version, ConfigDigest: startDigest, Authenticates: s.f.Auth.Configured()}
	if !s.stdio {
		me.ConsoleURL = strings.TrimSuffix(opts.PublicURL, "/")
	}
	s.atEnd(announce(ctx, s.gateways, me, gw.Warnings, s.reloaded, opts.Metrics, s.log))
	printBanner(s.stderr, where, consoleAt, s.dataDir, s.store, s.sealing, s.auditWhere, s.f, gw)
	if s.stdio && opts.PublicURL == "" && len(approvalRules(s.f)) > 0 {
		if opts.FindConsole == nil || opts.FindConsole(ctx) == "" {
			fmt.Fprintln(s.stderr, "  approvals "+noConsoleRuns(s.f))
		}
	}
	return nil
}

// startReloads reloads the configuration on SIGHUP and, with --watch, on
// a change of the file; reloading ends before the gateway closes.
func (s *serving) startReloads(ctx context.Context) {
	rctx, stopReloads := context.WithCancel(ctx)
	reloads := make(chan struct{})
	s.reloaded = make(chan string, 1)
	go func() {
		defer close(reloads)
		r := &reloader{name: s.configFile, dataDir: s.dataDir, gw: s.gw, notifier: s.notifier, log: s.log, reloaded: s.reloaded}
		r.digest, r.shadow = versionOf(s.f)
		r.run(rctx, s.hup, s.watch)
	}()
	s.atEnd(func() { stopReloads(); <-reloads })
}

// whereAndConsole says, for the banner, where the gateway serves MCP and
// where approvers decide: on stdio, neither.
func (s *serving) whereAndConsole(ctx context.Context) (where, consoleAt string, err error) {
	if s.stdio {
		return "stdio", "", nil
	}
	f, public := s.f, strings.TrimSuffix(s.opts.PublicURL, "/")
	kind := "sessions"
	if s.stateless {
		kind = "stateless"
	}
	auth := "no authentication (loopback only)"
	if n := len(f.Auth.Keys); n > 0 {
		auth = fmt.Sprintf("%d API key(s)", n)
	}
	if o := f.Auth.OAuth; o != nil {
		auth = "access tokens of " + o.Issuer
		if n := len(f.Auth.Keys); n > 0 {
			auth += fmt.Sprintf(" and %d API key(s)", n)
		}
	}
	where = fmt.Sprintf("http://%s%s (%s, %s)", s.ln.Addr(), gateway.MCPPath, kind, auth)
	signIn := "their API key"
	if o := f.Auth.OAuth; o != nil && o.Console != nil {
		signIn = "the identity provider, redirect URI " + public + console.CallbackPath
	}
	consoleAt = public + "/console/ (approvers sign in with " + signIn + ")"
	link, err := s.gw.OperatorLoginLink(ctx, s.opts.PublicURL)
	if err != nil {
		return "", "", err
	}
	if link != "" {
		consoleAt = link + " (signs in the operator, once, within a day; interlock console link makes another)"
	}
	return where, consoleAt, nil
}

// run serves one client on stdio, or HTTP until ctx ends; then tool calls
// in flight finish, within drainTimeout, while new ones are refused, and
// the upstreams stop after (gw.Close, at clean-up).
func (s *serving) run(ctx context.Context, stdin io.Reader, stdout io.Writer) error {
	gw := s.gw
	if s.stdio {
		err := gw.ServeStdio(ctx, stdin, stdout)
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	srv := httpServer(s.f.HTTP, gw.Handler(s.stateless))
	// Console pages hold event streams open; they end when shutdown starts.
	srv.RegisterOnShutdown(gw.Console().Close)
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(limitListener(s.ln, s.f.HTTP.MaxConnections, s.f.Auth.Configured())) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	drain, cancelDrain := context.WithTimeout(context.Background(), drainTimeout)
	defer cancelDrain()
	if err := gw.Drain(drain); err != nil {
		s.log.Warn("stopping with tool calls still in flight", "error", err)
	}
	// Open sessions hold long-lived event streams that Shutdown would wait
	// for; close them first, then give requests in flight a moment.
	for ss := range gw.Server().Sessions() {
		_ = ss.Close()
	}
	shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(shutdown); err != nil {
		_ = srv.Close()
	}
	return nil
}

// gatewayGCPercent is the garbage collector's target when GOGC is not set.
// A gateway's live heap is small (sessions, the mirrored tools, a few
// buffers) while every call allocates and drops tens of kilobytes of JSON
// decoding buffers in the MCP SDK; with Go's default of 100 the collector
// runs every few dozen calls and takes a third of the gateway's CPU. At 400
// it runs a quarter as often, and the heap stays a few megabytes.
const gatewayGCPercent = 400

// tuneGC sets the collector's target for a gateway, unless the operator
// chose one with GOGC.
func tuneGC(getenv func(string) string) {
	if getenv("GOGC") == "" {
		debug.SetGCPercent(gatewayGCPercent)
	}
}

// startProfiler serves net/http/pprof on a loopback address only: a
// profile shows what the gateway is doing, which is not for the network.
func startProfiler(addr string, log *slog.Logger) error {
	host, _, err := net.SplitHostPort(addr)
	if ip := net.ParseIP(host); err != nil || (host != "localhost" && (ip == nil || !ip.IsLoopback())) {
		return fmt.Errorf("--pprof %q: give a loopback address, such as 127.0.0.1:6060", addr)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("--pprof: %w", err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	log.Info("profiler listening", "address", "http://"+ln.Addr().String()+"/debug/pprof/")
	go func() { _ = http.Serve(ln, mux) }()
	return nil
}

// drainTimeout bounds how long a gateway told to stop waits for the tool
// calls in flight.
const drainTimeout = 10 * time.Second

// startTracing installs an OpenTelemetry tracer provider that exports
// spans over OTLP/HTTP when the standard variables name an endpoint
// (OTEL_EXPORTER_OTLP_ENDPOINT or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT);
// otherwise tracing stays off and costs nothing. The returned func flushes
// what is pending.
func startTracing(ctx context.Context) (func(), bool, error) {
	if os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT") == "" && os.Getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") == "" {
		return func() {}, false, nil
	}
	exp, err := otlptracehttp.New(ctx)
	if err != nil {
		return nil, false, fmt.Errorf("tracing: %w", err)
	}
	res := resource.NewSchemaless(attribute.String("service.name", "interlock"), attribute.String("service.version", version))
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	otel.SetTracerProvider(tp)
	return func() {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = tp.Shutdown(sctx)
	}, true, nil
}

// newLogger makes the gateway's logger. Log records never hold argument
// values: the gate logs decisions, and quotes only bounded, non-secret text.
func newLogger(w io.Writer, format, level string) (*slog.Logger, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("--log-level %q: use debug, info, warn or error", level)
	}
	opts := &slog.HandlerOptions{Level: l}
	switch format {
	case "text":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	}
	return nil, fmt.Errorf("--log-format %q: use text or json", format)
}

// redactURL hides a password in a store URL before it is printed.
func redactURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "(unparsable URL)"
	}
	return u.Redacted()
}

// publicURLOf is the URL of a listener's address as others reach it: a
// wildcard address is named by the machine's host name.
func publicURLOf(addr net.Addr) string {
	tcp, ok := addr.(*net.TCPAddr)
	if !ok || !tcp.IP.IsUnspecified() {
		return "http://" + addr.String()
	}
	host, err := os.Hostname()
	if err != nil {
		host = "localhost"
	}
	return "http://" + net.JoinHostPort(host, strconv.Itoa(tcp.Port))
}

type nopWriteCloser struct{ io.Writer }

func (nopWriteCloser) Close() error { return nil }

func printBanner(w io.Writer, where, consoleAt, dataDir, store, sealing, audit string, f *config.File, gw *gateway.Gateway) {
	fmt.Fprintf(w, "interlock %s\n", version)
	fmt.Fprintf(w, "  serving   %s\n", where)
	if consoleAt != "" {
		fmt.Fprintf(w, "  console   %s\n", consoleAt)
	}
	fmt.Fprintf(w, "  data      %s\n", dataDir)
	fmt.Fprintf(w, "  state     %s\n", store)
	fmt.Fprintf(w, "  sealing   %s\n", sealing)
	fmt.Fprintf(w, "  audit     %s\n", audit)
	fmt.Fprintf(w, "  config    %s (%d rules)\n", f.Policy.Path, len(f.Policy.Rules))
	counts := gw.ToolCounts()
	names := make([]string, 0, len(counts))
	for n := range counts {
		names = append(names, n)
	}
	sort.Strings(names)
	down := gw.Unreachable()
	for _, n := range names {
		if why, ok := down[n]; ok {
			// The operator's terminal is where a child that exits at once
			// is noticed; clients only learn that it is down.
			fmt.Fprintf(w, "  upstream  %s: down, retrying in the background: %s\n", n, why)
			continue
		}
		fmt.Fprintf(w, "  upstream  %s: %d tools\n", n, counts[n])
	}
	for _, warning := range gw.Warnings() {
		fmt.Fprintf(w, "  warning   %s\n", warning)
	}
	if gw.Gate().DryRun() {
		why := "MCP_DRY_RUN is not set"
		if v, ok := os.LookupEnv("MCP_DRY_RUN"); ok {
			why = fmt.Sprintf("MCP_DRY_RUN=%q is not exactly \"false\"", v)
		}
		fmt.Fprintf(w, "  dry run   ON (%s): gated calls only preview; set MCP_DRY_RUN=false to let confirmed calls run\n", why)
	} else {
		fmt.Fprintln(w, "  dry run   OFF: confirmed calls run")
	}
}

// answeringConsole returns the console base URL of the gateway in gws
// seen most recently whose console answers at it as that gateway's; ""
// when none does. An announcement outlives a gateway killed without
// departing by up to consoleSeen, and whatever binds its port meanwhile
// must not be sent approvers and their credentials.
func answeringConsole(ctx context.Context, gws []roster.Gateway, p *console.Prober) string {
	for _, g := range gws {
		if g.ConsoleURL != "" && p.Answers(ctx, g.ConsoleURL, g.ID) {
			return g.ConsoleURL
		}
	}
	return ""
}

// consoleSeen is how recently a gateway must have announced its console
// for a gateway on stdio to send approvers there.
const consoleSeen = 2 * time.Minute

// announce records g in the store the gateways share now, every half
// minute, and with the digest of each configuration reloaded, until the
// returned function is called, which removes it: gateways on stdio find
// the console there, and interlock status, /readyz and the metrics the
// gateways. Each announcement carries the gateway's warnings as they are
// then. After each announcement m (if any) counts the gateways.
func announce(ctx context.Context, store roster.Store, g roster.Gateway, warnings func() []string, reloaded <-chan string, m *metrics.Metrics, log *slog.Logger) func() {
	actx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	once := func() {
		g.Warnings = warnings()
		if err := store.Announce(actx, g); err != nil {
			if actx.Err() == nil {
				log.Warn("cannot announce this gateway in the store", "error", err)
			}
			return
		}
		if m == nil {
			return
		}
		if gws, err := store.Gateways(actx, consoleSeen); err == nil {
			m.Gateways(gws)
		}
	}
	// The first announcement is made before the banner says the gateway
	// serves: a stdio gateway asked for a console from then on finds it.
	once()
	go func() {
		defer close(done)
		tick := time.NewTicker(consoleSeen / 4)
		defer tick.Stop()
		for {
			select {
			case <-actx.Done():
				return
			case <-tick.C:
			case g.ConfigDigest = <-reloaded:
			}
			once()
		}
	}()
	return func() {
		cancel()
		<-done
		if err := store.Depart(context.WithoutCancel(ctx), g.ID); err != nil {
			log.Warn("cannot remove this gateway's announcement", "error", err)
		}
	}
}

// noConsoleRuns says that no console runs where the gateways of f keep
// their approvals, so calls that need one wait, and what decides them:
// the stdio banner and check say it alike.
func noConsoleRuns(f *config.File) string {
	on, same := "this data directory", "--data"
	if f.Store.Redis != "" || f.Store.Postgres != "" {
		on, same = "this store", "store"
	}
	return fmt.Sprintf("no console is running on %s: calls that need approval wait until someone starts `interlock serve` "+
		"with the same %s: its console decides them, and its banner prints a one-time sign-in link", on, same)
}
