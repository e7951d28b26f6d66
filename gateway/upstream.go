package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/interlock-mcp/interlock"
	"github.com/interlock-mcp/interlock/config"
	"github.com/interlock-mcp/interlock/resilience"
	"github.com/interlock-mcp/interlock/tracing"
)

// connectTimeout bounds starting a child and the MCP handshake with it. A
// variable so that tests of an upstream that hangs need not wait as long.
var connectTimeout = 30 * time.Second

// upstream is one MCP server the gateway runs as a child over stdio.
type upstream struct {
	cfg     *config.Upstream
	file    string
	version string
	logger  *slog.Logger
	// onToolsChanged is called, off the client's goroutine, when the child
	// announces that its tool list changed (see toolsChanged).
	// via is the link that announced it, nil for the shared one.
	onToolsChanged func(u *upstream, via *mcp.ClientSession)
	// relisting holds the links whose changes onToolsChanged is hearing,
	// each true when another change came since it began.
	relistMu  sync.Mutex
	relisting map[*mcp.ClientSession]bool
	// onEvent hears the upstream's restarts; onUp whether a session with it
	// is held. Either may be nil.
	onEvent func(name, detail string)
	onUp    func(up bool)
	// guard applies the upstream's timeout, retries, circuit breaker,
	// bulkhead and rate limit to every call.
	guard *resilience.Guard

	mu      sync.Mutex
	session *mcp.ClientSession
	client  *http.Client // an HTTP upstream's, made once for its connection pool
	started bool         // a session was made before
	upSince time.Time    // when session was made
	// life ends when the gateway closes, and with it any reconnect loop
	// (see reconnectLater); reconnecting says one runs, quickDeaths how
	// many links in a row died young, closed that the gateway closed.
	life         context.Context
	reconnecting bool
	relinked     chan struct{} // closed by relink; nil when nobody waits
	quickDeaths  int
	closed       bool

	// flights are the requests in flight on this upstream's links, so that
	// what the upstream sends during one reaches only the client it belongs
	// to (see flights.go); onDropped, when set, hears each log message that
	// belonged to none.
	flights   flights
	onDropped func()

	// links are the upstream sessions of client sessions that own one
	// (see ownsLink); levels the log level each of them chose.
	linksMu sync.Mutex
	links   map[*mcp.ServerSession]*peerLink
	// push is the link shared by clients of protocols before 2026-07-28
	// on sessions, for an upstream of 2026-07-28 (see linkFor).
	push     *peerLink
	levelsMu sync.Mutex
	levels   map[*mcp.ServerSession]mcp.LoggingLevel

	// sides are the raw sides of the links: for a link to a child, its
	// wrapped connection, which counts the notifications read and not yet
	// passed on, and carries the calls whose results travel verbatim (see
	// childConn); for every link, what its requests say of its client.
	sidesMu sync.Mutex
	sides   map[*mcp.ClientSession]rawSide
	// headerBound holds the upstream's names of the tools of its last
	// listing with an argument the SDK's client also sends in a header
	// (see headed); each listing replaces it.
	headerBound atomic.Pointer[map[string]bool]

	// heldCalls are the calls of clients of 2026-07-28 parked at a
	// question of an upstream of an earlier protocol (see held.go).
	heldCalls

	// stderr remembers what the shared link's last child wrote on
	// standard error.
	stderr stderrMemory
	// down is why the shared link could not be made, from the last
	// failed attempt until one succeeds; "" while it is up or untried.
	down string

	// hooks hear what the shared link announces for every client.
	hooks upstreamHooks
	// extras are the fields of the upstream's tools the SDK does not model.
	extras toolExtras
}

// where names the upstream's definition for messages to the operator.
func (u *upstream) where() string {
	if u.cfg.Line > 0 {
		return fmt.Sprintf("%s:%d", u.file, u.cfg.Line)
	}
	return u.file
}

// connect returns the shared link, starting the child and completing the
// MCP handshake when there is none. While the loop in the background makes
// it again, a request that has not reached the upstream waits for it
// within ctx and the upstream's call timeout: a restart takes a moment (a
// child that starts with npx, seconds), and failing every call in that
// window would fail them for nothing.
func (u *upstream) connect(ctx context.Context) (*mcp.ClientSession, error) {
	var bounded context.CancelFunc
	for {
		u.mu.Lock()
		if u.session != nil {
			cs := u.session
			u.mu.Unlock()
			return cs, nil
		}
		if !u.reconnecting {
			defer u.mu.Unlock()
			return u.connectLocked(ctx)
		}
		if u.relinked == nil {
			u.relinked = make(chan struct{})
		}
		relinked := u.relinked
		u.mu.Unlock()
		if bounded == nil {
			ctx, bounded = context.WithTimeout(ctx, u.timeout())
			defer bounded()
		}
		select {
		case <-relinked:
		case <-ctx.Done():
			return nil, u.reconnectingErr()
		}
	}
}

// reconnectingErr is the failure to have the shared link while the loop in the
// background makes it again.
func (u *upstream) reconnectingErr() error {
	return unreachable{fmt.Errorf("upstream %q is down; reconnecting in the background", u.cfg.Name)}
}

// relink wakes the requests waiting for the shared link: it was made
// again, or the loop making it ended. The caller holds u.mu.
func (u *upstream) relink() {
	if u.relinked != nil {
		close(u.relinked)
		u.relinked = nil
	}
}

// connectLocked makes the shared link. The caller holds u.mu.
func (u *upstream) connectLocked(ctx context.Context) (*mcp.ClientSession, error) {
	cs, err := u.dial(ctx, nil, "")
	if err != nil {
		if said, ok := errors.AsType[stderrSaid](err); !ok || said.said != sameAsLastStart || u.down == "" {
			// A child that says again what it said before leaves the
			// first words in place, for the operator who asks later.
			u.down = err.Error()
		}
		return nil, unreachable{err}
	}
	u.session, u.upSince, u.down = cs, time.Now(), ""
	u.relink()
	if u.started || u.reconnecting {
		// A restarted child may offer other tools than the one before, and
		// one that was down at start has offered none yet. It has not
		// failed yet either: its breaker starts closed.
		if u.guard != nil {
			u.guard.Reset()
		}
		u.toolsChanged(nil)
		if u.onEvent != nil && u.started {
			_, what := u.describe()
			u.onEvent("upstream_restarted", "reconnected to "+what)
		}
	}
	u.started = true
	if u.onUp != nil {
		u.onUp(true)
	}
	go func() {
		// When the child exits, a loop in the background starts it again.
		_ = cs.Wait()
		u.forget(cs)
	}()
	return cs, nil
}

// initialized is what the upstream said of itself on the shared link;
// nil while there is none.
func (u *upstream) initialized() *mcp.InitializeResult {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.session == nil {
		return nil
	}
	return u.session.InitializeResult()
}

// transport makes the connection to the upstream: a child over stdio, or
// streamable HTTP with the configured headers. what names it for messages;
// stderr, a child's only, keeps what the child says on standard error.
// shared says the connection is the shared link, whose starts are compared
// with each other (see stderrLog).
func (u *upstream) transport(shared bool) (t mcp.Transport, what string, stderr *stderrLog) {
	_, what = u.describe()
	if u.cfg.URL != "" {
		return &mcp.StreamableClientTransport{
			Endpoint:   u.cfg.URL,
			HTTPClient: u.httpClient(),
		}, what, nil
	}
	t, stderr = u.child(shared)
	return t, what, stderr
}

// describe says whether the upstream is a child, and names it for
// messages to the operator.
func (u *upstream) describe() (child bool, what string) {
	if u.cfg.URL != "" {
		return false, fmt.Sprintf("url %s", u.cfg.URL)
	}
	return true, "command " + CommandText(u.cfg.Command)
}

// maxIdleConnsPerUpstream keeps enough connections to an HTTP upstream
// open for concurrent calls; net/http's default of 2 would make most calls
// under load open a new connection.
const maxIdleConnsPerUpstream = 64

// maxRedirects is how many same-origin redirects an HTTP upstream may send
// for one request, as net/http allows by default.
const maxRedirects = 10

// httpClient returns the upstream's own HTTP client, made once: a pool of
// connections to it alone, its configured headers on every request, and no
// redirect to another origin, which would carry those headers (an
// Authorization among them) to a host the operator never named.
func (u *upstream) httpClient() *http.Client {
	if u.client != nil {
		return u.client
	}
	pool := http.DefaultTransport.(*http.Transport).Clone()
	pool.MaxIdleConnsPerHost = maxIdleConnsPerUpstream
	origin, _ := url.Parse(u.cfg.URL)
	u.client = &http.Client{
		Transport: extrasTrip{next: ownerTrip{next: refusalTrip{next: withHeaders{headers: u.cfg.Headers, next: pool}}}, extras: &u.extras},
		CheckRedirect: func(req *http.Request, via []*http.Request) error {
			if !sameOrigin(req.URL, origin) {
				u.log().Warn("refused a redirect to another origin: the upstream's headers are sent only to its configured origin",
					"upstream", u.cfg.Name, "from", via[len(via)-1].URL.Redacted(), "to", req.URL.Redacted())
				return fmt.Errorf("upstream %q redirected to %s, another origin than its url %s", u.cfg.Name, originOf(req.URL), originOf(origin))
			}
			if len(via) >= maxRedirects {
				return fmt.Errorf("upstream %q: stopped after %d redirects", u.cfg.Name, maxRedirects)
			}
			return nil
		},
	}
	return u.client
}

// sameOrigin reports whether a and b share scheme, host and port, the
// port made explicit when it is the scheme's default.
func sameOrigin(a, b *url.URL) bool {
	return originOf(a) == originOf(b)
}

// originOf is scheme://host:port, lower-cased, with the default port spelled out.
func originOf(u *url.URL) string {
	scheme := strings.ToLower(u.Scheme)
	port := u.Port()
	if port == "" {
		switch scheme {
		case "http":
			port = "80"
		case "https":
			port = "443"
		}
	}
	return scheme + "://" + net.JoinHostPort(strings.ToLower(u.Hostname()), port)
}

// withHeaders adds fixed headers to every request to an HTTP upstream.
type withHeaders struct {
	headers map[string]string
	next    http.RoundTripper
}

func (h withHeaders) RoundTrip(r *http.Request) (*http.Response, error) {
	traced := trace.SpanContextFromContext(r.Context()).IsValid()
	if len(h.headers) > 0 || traced {
		r = r.Clone(r.Context())
		for k, v := range h.headers {
			r.Header.Set(k, v)
		}
		if traced {
			tracing.ToHeaders(r.Context(), propagation.HeaderCarrier(r.Header))
		}
	}
	return h.next.RoundTrip(r)
}

// toolsChanged hears that the tool list of the link via (nil: the shared
// one) changed, and has onToolsChanged list it again, off the caller's
// goroutine. One listing of a link runs at a time, and the changes heard
// while it runs set off one more, relistGap after it: an upstream that
// announces a thousand changes in a burst is listed twice, not a thousand
// times, and one that never stops is listed ten times a second.
func (u *upstream) toolsChanged(via *mcp.ClientSession) {
	u.relistMu.Lock()
	defer u.relistMu.Unlock()
	if _, running := u.relisting[via]; running {
		u.relisting[via] = true
		return
	}
	if u.relisting == nil {
		u.relisting = map[*mcp.ClientSession]bool{}
	}
	u.relisting[via] = false
	go func() {
		for {
			u.onToolsChanged(u, via)
			u.relistMu.Lock()
			again := u.relisting[via]
			if !again {
				delete(u.relisting, via)
			} else {
				u.relisting[via] = false
			}
			u.relistMu.Unlock()
			if !again {
				return
			}
			select {
			case <-time.After(relistGap):
			case <-u.life.Done():
				return
			}
		}
	}()
}

// relistGap is the least time between two listings of a link that its
// changes set off.
const relistGap = 100 * time.Millisecond

// tools lists every tool the upstream offers, following pagination, over
// the link via, or the shared one when via is nil.
func (u *upstream) tools(ctx context.Context, via *mcp.ClientSession) ([]*mcp.Tool, error) {
	var out []*mcp.Tool
	err := u.forward(ctx, "tools/list", nil, onLink(via), func(ctx context.Context, cs *mcp.ClientSession) error {
		for t, err := range cs.Tools(ctx, nil) {
			if err != nil {
				return fmt.Errorf("upstream %q: listing tools: %w", u.cfg.Name, err)
			}
			out = append(out, t)
		}
		return nil
	})
	return out, err
}

// headed reports whether a call of the upstream's tool sends an argument
// in a header as well, on a link of 2026-07-28 (the schema's x-mcp-header):
// the SDK's client writes such headers from the tool's schema, so such a
// call goes through it rather than on the link's raw side.
func (u *upstream) headed(tool string) bool {
	bound := u.headerBound.Load()
	return bound != nil && (*bound)[tool]
}

func (u *upstream) log() *slog.Logger {
	if u.logger != nil {
		return u.logger
	}
	return slog.Default()
}

// call forwards a call the gate let through, under the upstream's guard
// (timeout, retries, circuit breaker, bulkhead, rate limit), and returns
// the upstream's result untouched. repeatable says the call may be made
// again after a transient failure (a read-only or idempotent tool). The
// guard's circuit and shares are the caller's tenant's: what one tenant
// provokes (failures, slow or many calls) stops only its own calls.
// Failures become server-side interlock errors; the upstream's own error
// text stays in the gateway's log. req is the downstream request, when
// there is one (a preview has none).
func (u *upstream) call(ctx context.Context, name string, args json.RawMessage, req *mcp.CallToolRequest, repeatable bool) (*mcp.CallToolResult, error) {
	var res *mcp.CallToolResult
	attempts := 0
	caller, _ := interlock.CallerOf(ctx)
	err := u.guard.Do(ctx, caller.Tenant, repeatable, func(ctx context.Context) error {
		attempts++
		if attempts > 1 && !u.connected() {
			// The first attempt waited for the link, or reached the
			// upstream and lost it (a call that crashes its server):
			// a retry does not wait for a restart again.
			return u.unavailable(name, u.reconnectingErr())
		}
		var err error
		res, err = u.attempt(ctx, name, args, req)
		return err
	})
	var rejected *resilience.Rejected
	switch {
	case err == nil:
		return res, nil
	case errors.As(err, &rejected):
		return nil, u.rejection(name, rejected)
	case errors.Is(err, resilience.ErrTimeout):
		return nil, &interlock.Error{
			Code:    interlock.CodeUpstreamTimeout,
			Message: fmt.Sprintf("The server behind %s did not answer within %s; it may or may not have run.", name, u.timeout()),
			Hint:    "Check the current state with a read-only tool before retrying.",
			Err:     err,
		}
	case errors.Is(err, context.Canceled) && errors.Is(ctx.Err(), context.Canceled):
		// The guard gave up as the client did, before the attempt said so.
		return nil, cancelled(name, err)
	}
	return nil, err
}

// cancelled is the answer to a call its client cancelled.
func cancelled(name string, err error) *interlock.Error {
	return &interlock.Error{
		Code:    interlock.CodeCancelled,
		Message: fmt.Sprintf("The call of %s was cancelled; it may or may not have run.", name),
		Hint:    "Check the current state with a read-only tool before calling it again.",
		Err:     err,
	}
}

// rejection is the answer to a call the guard did not make.
func (u *upstream) rejection(name string, r *resilience.Rejected) *interlock.Error {
	retryAfter := r.RetryAfter.Milliseconds()
	switch r.Reason {
	case resilience.CircuitOpen:
		return &interlock.Error{Code: interlock.CodeCircuitOpen, RetryAfterMS: retryAfter,
			Message: fmt.Sprintf("The server behind %s failed repeatedly, so interlock stopped calling it for a while; nothing ran.", name),
			Hint:    "Wait retry_after_ms before calling it again; if it stays down, tell the operator."}
	case resilience.RateLimited:
		return &interlock.Error{Code: interlock.CodeRateLimited, RetryAfterMS: retryAfter,
			Message: fmt.Sprintf("Calls to the server behind %s are over the rate the operator allows; nothing ran.", name),
			Hint:    "Wait retry_after_ms, then call again; spread calls out."}
	}
	return &interlock.Error{Code: interlock.CodeBulkheadFull, RetryAfterMS: retryAfter,
		Message: fmt.Sprintf("The server behind %s has as many calls in flight as the operator allows; nothing ran.", name),
		Hint:    "Retry in a moment, after some of your calls have finished."}
}

// transient reports whether an attempt's error is a failure of the server
// (counted by the circuit breaker, and retried when the call may be
// repeated), rather than an answer.
func transient(err error) bool {
	switch interlock.ErrorCode(err) {
	case interlock.CodeUpstreamUnavailable, interlock.CodeUpstreamTimeout:
		return true
	case interlock.CodeUpstreamError:
		return !callersToMend(err)
	}
	return false
}

// callersToMend reports whether err is an HTTP upstream's refusal of the
// call by a 4xx status other than 429 (a body over its limit, say): the
// caller's to mend, not a failure of the server. Trying it again would be
// refused again, and counting it would let one caller open the circuit
// for every other.
func callersToMend(err error) bool {
	var rpcErr *jsonrpc.Error
	if !errors.As(err, &rpcErr) {
		return false
	}
	status, ok := refusedStatus(rpcErr)
	return ok && status >= 400 && status < 500 && status != http.StatusTooManyRequests
}

// attempt makes one attempt of a call.
func (u *upstream) attempt(ctx context.Context, name string, args json.RawMessage, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	r, retried := interlock.RetryOf(ctx)
	if retried && strings.HasPrefix(r.State, heldPrefix) {
		return u.continueHeld(ctx, name, req, r)
	}
	var downstream *mcp.ServerSession
	var from mcp.Request
	if req != nil {
		downstream, from = req.Session, req
	}
	// The call is in flight before its link is: a per_client link opens
	// on its client's first call, and a question the upstream asks as it
	// opens (server-filesystem asks for roots at once) belongs to that
	// call, on whose stream the client surely listens (see callOpening).
	fl := newFlight(ctx, "tools/call", from)
	done := u.flights.track(fl)
	ctx = withState(ctx, func(s *requestState) { s.flight = fl })
	cs, err := u.linkFor(ctx, downstream)
	if err != nil {
		done()
		return nil, u.unavailable(name, err)
	}
	token, untrack := u.flights.trackProgress(ctx, req)
	params := upstreamParams(ctx, cs, name, args, req, token)
	if retried {
		params.InputResponses, params.RequestState = r.Responses, r.State
	}
	u.flights.boarded(fl, cs)
	if holds(req, cs) {
		h := u.hold(ctx, fl, token, func(hctx context.Context) (*mcp.CallToolResult, error) {
			// The link speaks an earlier protocol; the result is
			// decoded, for whichever request of the client waits when
			// it comes (lane.completed completes it there).
			res, err := u.sendCall(hctx, cs, nil, false, params, nil)
			if err == nil {
				u.settle(cs)
			}
			return res, err
		}, func() { done(); untrack() })
		res, parked, err := u.wait(ctx, h)
		if parked {
			return res, nil
		}
		return u.outcome(ctx, cs, name, fl, res, err)
	}
	defer untrack()
	latest := cs.InitializeResult().ProtocolVersion >= protocolNew
	v := verbatimFor(ctx, cs)
	if v != nil && v.task != nil && (latest || req == nil) {
		// Only a link of the experimental tasks' protocol carries one.
		done()
		return nil, &interlock.Error{Code: interlock.CodeUpstreamError,
			Message: fmt.Sprintf("The server behind %s runs it as a task, which interlock cannot pass on over this link; nothing ran.", name),
			Hint:    "Call the tool without \"task\"."}
	}
	res, err := u.sendCall(ctx, cs, v, latest, params, req)
	if err == nil {
		u.settle(cs)
	}
	done()
	return u.outcome(ctx, cs, name, fl, res, err)
}

// sendCall sends the call with params on the link cs, which speaks the
// latest protocol or not, and returns the upstream's answer. The link's
// raw side carries the client's own call, whose result may travel
// verbatim as bytes v keeps for the client (verbatim.go), and, on a link
// of an earlier protocol, every other call (a held call, a preview, a call
// from REST), whose answer is decoded. The SDK's client carries the rest: on a link of
// 2026-07-28 it answers the upstream's rounds of questions for a call
// that has no client to ask, and it writes the headers of a tool bound to
// them (see httpSession.ready).
func (u *upstream) sendCall(ctx context.Context, cs *mcp.ClientSession, v *verbatim, latest bool, params *mcp.CallToolParams, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	own := v != nil && req != nil
	if v != nil && v.task != nil {
		// The upstream answers with the task it made, passed on as bytes.
		body, err := callBody(params, v.task)
		if err != nil {
			return nil, err
		}
		raw, err := u.rawLinkOf(cs).request(ctx, "tools/call", body)
		if err != nil {
			return nil, err
		}
		v.keep(raw)
		return v.standIn(), nil
	}
	if !own && latest {
		return cs.CallTool(ctx, params)
	}
	var raw json.RawMessage
	var err error
	if wire := u.wireOf(cs); wire != nil && wire.ready(latest) {
		raw, err = wire.call(ctx, params, latest)
	} else if h := u.httpSideOf(cs); h != nil && h.ready(params.Name) {
		raw, err = h.call(ctx, params)
	} else {
		return cs.CallTool(ctx, params)
	}
	switch {
	case err != nil:
		return nil, err
	case own:
		return v.plainResult(v.keep(raw), v.latest || v.older)
	}
	return decodeResult(raw)
}

// continueHeld gives the client's answer r to the held call it names, and
// waits for that call's outcome or its next question.
func (u *upstream) continueHeld(ctx context.Context, name string, req *mcp.CallToolRequest, r interlock.Retry) (*mcp.CallToolResult, error) {
	h, err := u.resume(ctx, name, req, r)
	if err != nil {
		return nil, err
	}
	res, parked, err := u.wait(ctx, h)
	if parked {
		return res, nil
	}
	return u.outcome(ctx, h.fl.link, name, h.fl, res, err)
}

// upstreamParams are the params of a call of name on link: the caller's trace,
// the progress token interlock gave the upstream, and the log level the
// link's protocol carries in each request.
func upstreamParams(ctx context.Context, link *mcp.ClientSession, name string, args json.RawMessage, req *mcp.CallToolRequest, token string) *mcp.CallToolParams {
	params := &mcp.CallToolParams{Name: name, Arguments: args, Meta: mcp.Meta{}}
	if trace.SpanContextFromContext(ctx).IsValid() {
		// The upstream continues the caller's trace.
		tracing.ToMeta(ctx, params.Meta)
	}
	if token != "" {
		params.Meta["progressToken"] = token
	}
	if level := requestLevel(link, req); level != "" {
		params.Meta[mcp.MetaKeyLogLevel] = level
	}
	return params
}

// unavailable is the answer to a call of name whose link could not be had.
func (u *upstream) unavailable(name string, err error) *interlock.Error {
	u.log().Warn("upstream not reachable", "upstream", u.cfg.Name, "tool", name, "error", logText(err.Error()))
	return &interlock.Error{
		Code:    interlock.CodeUpstreamUnavailable,
		Message: fmt.Sprintf("The server behind %s is not running or cannot be reached.", name),
		Hint:    "Retry in a few seconds; if it keeps failing, tell the operator that the upstream is down.",
		Err:     err,
	}
}

// outcome is what the client gets of a call on link that the upstream
// answered with res or err; fl is the call, when its questions may have
// been answered for it.
func (u *upstream) outcome(ctx context.Context, link *mcp.ClientSession, name string, fl *inflight, res *mcp.CallToolResult, err error) (*mcp.CallToolResult, error) {
	timedOut := errors.Is(ctx.Err(), context.DeadlineExceeded)
	if err == nil {
		cancelled := false
		if fl != nil {
			cancelled = u.flights.wasCancelled(fl)
		}
		if cancelled {
			return nil, &interlock.Error{
				Code: interlock.CodeCancelled,
				Message: fmt.Sprintf("The server behind %s asked a question during the call that this client cannot show; "+
					"it was answered with cancel, and its result is withheld.", name),
				Hint: "Use a client that supports MCP elicitation on a session, or ask the operator how to run this tool.",
			}
		}
		return res, nil
	}
	if errors.Is(ctx.Err(), context.Canceled) {
		// The client cancelled the call: the link is sound, and the
		// upstream was told (the SDK sends notifications/cancelled).
		return nil, cancelled(name, err)
	}
	failure := u.failure(link, name, err, timedOut)
	// The upstream's own words (a JSON-RPC message, a transport error) can
	// carry paths, stack frames or secrets: they go to the operator's log,
	// never to the client, who gets interlock's message for the code.
	u.log().Warn("upstream call failed", "upstream", u.cfg.Name, "tool", name, "code", failure.Code, "error", logText(err.Error()))
	return nil, failure
}

// failure turns an upstream's failed call into the error the client sees,
// in interlock's words only, and drops a session that broke.
func (u *upstream) failure(cs *mcp.ClientSession, name string, err error, timedOut bool) *interlock.Error {
	var rpcErr *jsonrpc.Error
	answered := errors.As(err, &rpcErr) && rpcErr.Code != codeRejectedByTransport
	var refused int // the HTTP status of a refusal
	if answered {
		refused, _ = refusedStatus(rpcErr)
	}
	var junk *notAResult
	switch {
	case errors.As(err, &junk):
		return notAResultError(name, u.cfg.Name, err)
	case errors.Is(err, mcp.ErrConnectionClosed), errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		u.forget(cs)
		return &interlock.Error{
			Code:    interlock.CodeUpstreamUnavailable,
			Message: fmt.Sprintf("The connection to the server behind %s closed during the call; it may or may not have run.", name),
			Hint:    "Check the current state with a read-only tool before retrying, then retry once.",
			Err:     err,
		}
	case timedOut:
		return &interlock.Error{
			Code:    interlock.CodeUpstreamTimeout,
			Message: fmt.Sprintf("The server behind %s did not answer within %s; it may or may not have run.", name, u.timeout()),
			Hint:    "Check the current state with a read-only tool before retrying.",
			Err:     err,
		}
	case answered && rpcErr.Code == jsonrpc.CodeInvalidParams:
		return &interlock.Error{
			Code:    interlock.CodeValidationFailed,
			Message: fmt.Sprintf("The server behind %s rejected the arguments.", name),
			Hint:    fmt.Sprintf("Check the arguments against the input schema of %s, then call it again; the operator's log has the server's reason.", name),
			Err:     err,
		}
	case answered && refused >= 500, answered && refused == http.StatusTooManyRequests:
		return &interlock.Error{
			Code:    interlock.CodeUpstreamUnavailable,
			Message: fmt.Sprintf("The server behind %s could not take the call (HTTP %d); it may or may not have run.", name, refused),
			Hint:    "Check the current state with a read-only tool before retrying, then retry in a few seconds.",
			Err:     err,
		}
	case answered && refused != 0:
		return &interlock.Error{
			Code: interlock.CodeUpstreamError,
			Message: fmt.Sprintf("The server behind %s refused the call (HTTP %d); its reason is in the gateway's log (upstream %s), not passed on.",
				name, refused, u.cfg.Name),
			Hint: "Do not send the same call again: change what the server refused (its size, its arguments), or tell the operator.",
			Err:  err,
		}
	case !answered && u.cfg.URL != "" && u.stillAnswers(cs):
		// What the SDK's client could not read as a tool's result reads
		// as no answer at all; the link answers still, and every tenant's
		// calls share it.
		if undecodable(err) {
			return notAResultError(name, u.cfg.Name, err)
		}
		return &interlock.Error{
			Code: interlock.CodeUpstreamError,
			Message: fmt.Sprintf("The call to the server behind %s failed, though the server still answers; it may or may not have run. "+
				"What went wrong is in the gateway's log (upstream %s).", name, u.cfg.Name),
			Hint: "Check the current state with a read-only tool before calling it again; if it keeps failing, tell the operator.",
			Err:  err,
		}
	case !answered && u.cfg.URL != "":
		// Not an answer from the server but a failure to reach it (a
		// refused connection, an expired session): a new session is made
		// in the background.
		u.forget(cs)
		return &interlock.Error{
			Code:    interlock.CodeUpstreamUnavailable,
			Message: fmt.Sprintf("The server behind %s could not be reached; it may or may not have run.", name),
			Hint:    "Check the current state with a read-only tool before retrying, then retry once.",
			Err:     err,
		}
	}
	if answered {
		// Its code says what kind of failure it was; its words may hold
		// internals or secrets of the server, so they stay in the log.
		return &interlock.Error{
			Code: interlock.CodeUpstreamError,
			Message: fmt.Sprintf("The server behind %s answered the call with JSON-RPC error %d; its message is in the gateway's log "+
				"(upstream %s), not passed on.", name, rpcErr.Code, u.cfg.Name),
			Hint: "Retry once; if it fails again, tell the operator, who can read the server's message in the log.",
			Err:  err,
		}
	}
	return &interlock.Error{
		Code:    interlock.CodeUpstreamError,
		Message: fmt.Sprintf("The server behind %s failed to handle the call.", name),
		Hint:    "Retry once; if it fails again, tell the operator.",
		Err:     err,
	}
}

// notAResultError is the answer to a call the upstream answered with
// something that is not a tool's result.
func notAResultError(tool, upstream string, err error) *interlock.Error {
	return &interlock.Error{
		Code: interlock.CodeUpstreamError,
		Message: fmt.Sprintf("The server behind %s answered the call with something that is not a tool's result; it may have run. "+
			"Its answer is in the gateway's log (upstream %s), not passed on.", tool, upstream),
		Hint: "Check the current state with a read-only tool before calling it again; if it keeps failing, tell the operator.",
		Err:  err,
	}
}

// undecodable reports whether err is the SDK's client failing to decode
// an answer as a tool's result: the JSON of the answer was not of the
// result's shape.
func undecodable(err error) bool {
	var typeErr *json.UnmarshalTypeError
	var syntaxErr *json.SyntaxError
	return errors.As(err, &typeErr) || errors.As(err, &syntaxErr)
}

// stillAnswersWithin bounds the ping that tells a link that answered
// badly from one that is lost.
const stillAnswersWithin = 2 * time.Second

// stillAnswers reports whether link answers a ping, made as a request of
// the gateway's own, within stillAnswersWithin.
func (u *upstream) stillAnswers(link *mcp.ClientSession) bool {
	ctx, stop := context.WithTimeout(context.Background(), stillAnswersWithin)
	defer stop()
	return u.forward(ctx, "ping", nil, onLink(link), func(ctx context.Context, cs *mcp.ClientSession) error {
		return cs.Ping(ctx, nil)
	}) == nil
}

// passed is the JSON-RPC error the upstream answered a call with, as its
// client is to get it, when the upstream passes its errors through
// (pass_errors): its code, and its message made valid UTF-8 and bounded as
// a log record's. nil otherwise, and for every other failure (a call
// refused by an HTTP status is one: see refusalTrip).
func (u *upstream) passed(err error) *jsonrpc.Error {
	var rpcErr *jsonrpc.Error
	if !u.cfg.PassErrors || !errors.As(err, &rpcErr) || rpcErr.Code == codeRejectedByTransport {
		return nil
	}
	if _, refused := refusedStatus(rpcErr); refused {
		return nil
	}
	return &jsonrpc.Error{Code: rpcErr.Code, Message: logText(rpcErr.Message)}
}

// maxLoggedError bounds the upstream text one log record carries, so an
// upstream cannot flood the gateway's log through its error messages.
const maxLoggedError = 2048

// logText makes an upstream's text fit for one log record: valid UTF-8, at
// most maxLoggedError bytes, with a note of what was cut.
func logText(s string) string {
	return cutText(strings.ToValidUTF8(s, "\ufffd"), maxLoggedError)
}

// cutText keeps at most n bytes of the valid UTF-8 s, cut at a character's
// start, with a note of what was cut.
func cutText(s string, n int) string {
	if len(s) <= n {
		return s
	}
	cut := n
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return fmt.Sprintf("%s… (%d bytes more)", s[:cut], len(s)-cut)
}

// codeRejectedByTransport is the code the SDK gives a request its
// transport could not send (a refused connection, a lost session).
const codeRejectedByTransport = -32005

// timeout bounds one call to the upstream.
func (u *upstream) timeout() time.Duration {
	if u.cfg.CallTimeout > 0 {
		return u.cfg.CallTimeout
	}
	return config.DefaultCallTimeout
}

// forget drops a link that broke; a loop in the background makes it again.
func (u *upstream) forget(cs *mcp.ClientSession) {
	u.mu.Lock()
	lost := u.session == cs
	if lost {
		u.session = nil
		u.lost(u.upSince)
		u.reconnectLater()
	}
	u.mu.Unlock()
	if lost && u.onUp != nil {
		u.onUp(false)
	}
	_ = cs.Close()
}

func (u *upstream) close() error {
	u.closePush()
	u.mu.Lock()
	cs := u.session
	u.session, u.closed = nil, true
	u.mu.Unlock()
	if cs == nil {
		return nil
	}
	return cs.Close()
}
