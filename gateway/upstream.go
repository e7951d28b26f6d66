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
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/interlock-mcp/interlock"
	"github.com/interlock-mcp/interlock/policy"
)

// connectTimeout bounds starting a child and the MCP handshake with it.
const connectTimeout = 30 * time.Second

// upstream is one MCP server the gateway runs as a child over stdio.
type upstream struct {
	cfg     *policy.Upstream
	file    string
	version string
	logger  *slog.Logger
	// onToolsChanged is called, off the client's goroutine, when the child
	// announces that its tool list changed.
	onToolsChanged func(*upstream)

	mu      sync.Mutex
	session *mcp.ClientSession
	client  *http.Client // an HTTP upstream's, made once for its connection pool
	started bool         // a session was made before

	callsMu sync.Mutex
	// calls are the downstream calls in flight on this upstream, so that a
	// question the upstream pushes (elicitation/create) can be carried to
	// the client whose call it belongs to.
	calls map[*inflight]struct{}
}

// inflight is one downstream call being served by the upstream.
type inflight struct {
	// req is the downstream request; nil for a preview.
	req *mcp.CallToolRequest
	// cancelled records that a question of the upstream could not be
	// carried and was answered with cancel.
	cancelled bool
}

// where names the upstream's definition for messages to the operator.
func (u *upstream) where() string {
	if u.cfg.Line > 0 {
		return fmt.Sprintf("%s:%d", u.file, u.cfg.Line)
	}
	return u.file
}

// connect starts the child and completes the MCP handshake.
func (u *upstream) connect(ctx context.Context) (*mcp.ClientSession, error) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.session != nil {
		return u.session, nil
	}
	transport, what := u.transport()
	client := mcp.NewClient(&mcp.Implementation{Name: "interlock", Version: u.version}, &mcp.ClientOptions{
		ToolListChangedHandler: func(context.Context, *mcp.ToolListChangedRequest) {
			go u.onToolsChanged(u)
		},
		// Questions of the upstream are the downstream human's to answer:
		// input requests come back in the result and go to the client
		// through the gate; pushed elicitations are carried by elicit.
		ElicitationHandler: u.elicit,
		MultiRoundTrip:     &mcp.MultiRoundTripOptions{Disabled: true},
	})
	cctx, cancel := context.WithTimeout(ctx, connectTimeout)
	defer cancel()
	cs, err := client.Connect(cctx, transport, nil)
	if err != nil {
		return nil, fmt.Errorf("upstream %q (%s): %s did not answer as an MCP server: %w; fix it in %s",
			u.cfg.Name, u.where(), what, err, u.where())
	}
	u.session = cs
	if u.started {
		// A restarted child may offer other tools than the one before.
		go u.onToolsChanged(u)
	}
	u.started = true
	go func() {
		// When the child exits, the next call reconnects.
		_ = cs.Wait()
		u.forget(cs)
	}()
	return cs, nil
}

// transport makes the connection to the upstream: a child over stdio, or
// streamable HTTP with the configured headers. what names it for messages.
func (u *upstream) transport() (mcp.Transport, string) {
	if u.cfg.URL != "" {
		return &mcp.StreamableClientTransport{
			Endpoint:   u.cfg.URL,
			HTTPClient: u.httpClient(),
		}, fmt.Sprintf("url %s", u.cfg.URL)
	}
	cmd := exec.Command(u.cfg.Command[0], u.cfg.Command[1:]...)
	cmd.Dir = u.cfg.Dir
	cmd.Env = childEnv(os.Environ(), u.cfg)
	cmd.Stderr = os.Stderr
	return &mcp.CommandTransport{Command: cmd}, fmt.Sprintf("command %q", strings.Join(u.cfg.Command, " "))
}

// ChildEnvBase lists the variables of the gateway's environment that every
// child gets: what a program needs to find its tools, its home, a locale, a
// time zone and a place for temporary files. The rest of the gateway's
// environment (cloud credentials, tokens of other services) stays with the
// gateway unless an upstream sets inherit_env.
var ChildEnvBase = []string{"PATH", "HOME", "USER", "LOGNAME", "LANG", "LC_ALL", "LC_CTYPE", "TZ", "TMPDIR", "TEMP", "TMP", "SYSTEMROOT"}

// childEnv is the environment of an upstream's child: the base list taken
// from environ (or all of it with inherit_env), then the upstream's own
// env. The sealing keys and the name of their file are never passed on: a
// server behind the gate must never be able to mint confirm tokens.
func childEnv(environ []string, cfg *policy.Upstream) []string {
	var env []string
	for _, kv := range environ {
		name, _, _ := strings.Cut(kv, "=")
		if name == interlock.SecretEnv || name == policy.SecretFileEnv {
			continue
		}
		if cfg.InheritEnv || slices.Contains(ChildEnvBase, name) {
			env = append(env, kv)
		}
	}
	for k, v := range cfg.Env {
		env = append(env, k+"="+v)
	}
	return env
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
		Transport: withHeaders{headers: u.cfg.Headers, next: pool},
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
	if len(h.headers) > 0 {
		r = r.Clone(r.Context())
		for k, v := range h.headers {
			r.Header.Set(k, v)
		}
	}
	return h.next.RoundTrip(r)
}

// tools lists every tool the upstream offers, following pagination.
func (u *upstream) tools(ctx context.Context) ([]*mcp.Tool, error) {
	cs, err := u.connect(ctx)
	if err != nil {
		return nil, err
	}
	var out []*mcp.Tool
	for t, err := range cs.Tools(ctx, nil) {
		if err != nil {
			return nil, fmt.Errorf("upstream %q: listing tools: %w", u.cfg.Name, err)
		}
		out = append(out, t)
	}
	return out, nil
}

// elicit carries a question the upstream pushes during a call to the
// client whose call it is. Only the client of an earlier protocol with a
// session can be asked this way; for any other client, or when several
// calls are in flight so the question cannot be told apart, the upstream is
// answered with cancel and the call ends CANCELLED.
func (u *upstream) elicit(ctx context.Context, req *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
	u.callsMu.Lock()
	var only *inflight
	if len(u.calls) == 1 {
		for c := range u.calls {
			only = c
		}
	}
	n := len(u.calls)
	u.callsMu.Unlock()
	if only == nil {
		u.log().Warn("upstream asked a question that cannot be matched to one call; answering cancel", "upstream", u.cfg.Name, "calls_in_flight", n)
		return &mcp.ElicitResult{Action: "cancel"}, nil
	}
	// Only a client of an earlier protocol, on a session, that declared
	// elicitation can be sent the question now.
	if only.req != nil && only.req.Session != nil {
		if ex := interlock.ExchangeOf(only.req); ex.Form && !ex.Native {
			return only.req.Session.Elicit(ctx, req.Params)
		}
	}
	u.callsMu.Lock()
	only.cancelled = true
	u.callsMu.Unlock()
	return &mcp.ElicitResult{Action: "cancel"}, nil
}

func (u *upstream) log() *slog.Logger {
	if u.logger != nil {
		return u.logger
	}
	return slog.Default()
}

// track records a downstream call in flight; the returned func ends it.
func (u *upstream) track(req *mcp.CallToolRequest) (*inflight, func()) {
	fl := &inflight{req: req}
	u.callsMu.Lock()
	if u.calls == nil {
		u.calls = map[*inflight]struct{}{}
	}
	u.calls[fl] = struct{}{}
	u.callsMu.Unlock()
	return fl, func() {
		u.callsMu.Lock()
		delete(u.calls, fl)
		u.callsMu.Unlock()
	}
}

// call forwards a call the gate let through and returns the upstream's
// result untouched. Failures become server-side interlock errors; the
// upstream's internal error text stays in the gateway's log. req is the
// downstream request, when there is one (a preview has none).
func (u *upstream) call(ctx context.Context, name string, args json.RawMessage, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	cs, err := u.connect(ctx)
	if err != nil {
		u.log().Warn("upstream not reachable", "upstream", u.cfg.Name, "tool", name, "error", logText(err.Error()))
		return nil, &interlock.Error{
			Code:    interlock.CodeUpstreamUnavailable,
			Message: fmt.Sprintf("The server behind %s is not running or cannot be reached.", name),
			Hint:    "Retry in a few seconds; if it keeps failing, tell the operator that the upstream is down.",
			Err:     err,
		}
	}
	params := &mcp.CallToolParams{Name: name, Arguments: args}
	if r, ok := interlock.RetryOf(ctx); ok {
		params.InputResponses, params.RequestState = r.Responses, r.State
	}
	fl, done := u.track(req)
	cctx, cancel := context.WithTimeout(ctx, u.timeout())
	res, err := cs.CallTool(cctx, params)
	timedOut := errors.Is(cctx.Err(), context.DeadlineExceeded)
	cancel()
	done()
	if err == nil {
		u.callsMu.Lock()
		cancelled := fl.cancelled
		u.callsMu.Unlock()
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
	failure := u.failure(cs, name, err, timedOut)
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
	switch {
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
	case !answered && u.cfg.URL != "":
		// Not an answer from the server but a failure to reach it (a
		// refused connection, an expired session): start a new session on
		// the next call.
		u.forget(cs)
		return &interlock.Error{
			Code:    interlock.CodeUpstreamUnavailable,
			Message: fmt.Sprintf("The server behind %s could not be reached; it may or may not have run.", name),
			Hint:    "Check the current state with a read-only tool before retrying, then retry once.",
			Err:     err,
		}
	}
	return &interlock.Error{
		Code:    interlock.CodeUpstreamError,
		Message: fmt.Sprintf("The server behind %s failed to handle the call.", name),
		Hint:    "Retry once; if it fails again, tell the operator.",
		Err:     err,
	}
}

// maxLoggedError bounds the upstream text one log record carries, so an
// upstream cannot flood the gateway's log through its error messages.
const maxLoggedError = 2048

// logText makes an upstream's text fit for one log record: valid UTF-8, at
// most maxLoggedError bytes, with a note of what was cut.
func logText(s string) string {
	s = strings.ToValidUTF8(s, "\ufffd")
	if len(s) <= maxLoggedError {
		return s
	}
	cut := maxLoggedError
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
	return policy.DefaultCallTimeout
}

// forget drops a session that broke, so the next call starts the child again.
func (u *upstream) forget(cs *mcp.ClientSession) {
	u.mu.Lock()
	if u.session == cs {
		u.session = nil
	}
	u.mu.Unlock()
	_ = cs.Close()
}

func (u *upstream) close() error {
	u.mu.Lock()
	cs := u.session
	u.session = nil
	u.mu.Unlock()
	if cs == nil {
		return nil
	}
	return cs.Close()
}
