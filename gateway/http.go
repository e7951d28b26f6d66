package gateway

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"fmt"
	"net"
	"net/http"
	"sort"
	"time"

	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.opentelemetry.io/otel/propagation"

	"github.com/interlock-mcp/interlock"
	"github.com/interlock-mcp/interlock/config"
	"github.com/interlock-mcp/interlock/console"
	"github.com/interlock-mcp/interlock/gateway/internal/sdkrules"
	"github.com/interlock-mcp/interlock/tracing"
)

// ConnContext is an [http.Server]'s ConnContext: it keeps the connection
// in the context of its requests, so that a request that authenticates can
// tell a connection that implements [Prover].
func ConnContext(ctx context.Context, c net.Conn) context.Context {
	return withState(ctx, func(s *requestState) { s.conn = c })
}

// Prover is a connection that can be told whether the request it carries
// authenticated, such as the listener of interlock serve keeps, which
// holds a share of its connections for those that did and does not close
// one for a newer connection while its request is being decided.
type Prover interface {
	// Prove says the request authenticated.
	Prove()
	// Unproven says it did not, or carries no credential to check.
	Unproven()
}

// proveConn tells the request's connection that it carried an
// authenticated request, if it listens.
func proveConn(ctx context.Context) {
	if p, ok := stateOf(ctx).conn.(Prover); ok {
		p.Prove()
	}
}

// unprovenConn tells the request's connection that the request did not
// authenticate, if it listens; nothing once the connection proved itself.
func unprovenConn(ctx context.Context) {
	if p, ok := stateOf(ctx).conn.(Prover); ok {
		p.Unproven()
	}
}

// MCPPath is where the gateway serves MCP over streamable HTTP.
const MCPPath = "/mcp"

// CheckListen refuses an address that other machines can reach when no
// authentication (API keys or an OAuth issuer) is configured: such a
// gateway would let anyone on the network call tools as "anonymous".
func CheckListen(addr string, f *config.File) error {
	if f.Auth.Configured() {
		return nil
	}
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("--listen %q: %w (use host:port, such as 127.0.0.1:8740)", addr, err)
	}
	if host == "localhost" {
		return nil
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsLoopback() {
		return nil
	}
	return fmt.Errorf("--listen %s is reachable from other machines and no authentication is configured; "+
		"add keys under auth.keys in the config (run `interlock key` to make one), or an issuer under auth.oauth, or listen on 127.0.0.1", addr)
}

// Handler returns the gateway's HTTP face: MCP at /mcp (with sessions for
// clients of protocols before 2026-07-28 and stateless for later ones, or
// stateless for all), the REST face under /v1/ for callers that do not speak MCP,
// the approvers' console under /console/, and a health check at /healthz. With API keys or an OAuth issuer
// configured every MCP and REST request must carry "Authorization: Bearer"
// and a key or an access token; the principal and tenant it names become
// the caller's identity (see requireAuth). With OAuth, the protected
// resource metadata is served under /.well-known/oauth-protected-resource.
//
// Sessions belong to the key's tenant and principal together, close after
// http.session_idle_timeout without a request, and number at most
// http.max_sessions_per_principal per caller. Cross-origin browser requests
// are refused on /mcp as on the REST face.
func (g *Gateway) Handler(stateless bool) http.Handler {
	// Room for the largest arguments the gate accepts and the envelope
	// around them, so an oversized call gets the gate's VALIDATION_FAILED,
	// not a bare 413.
	maxBody := max(int64(g.config().Policy.MaxArgumentBytes)*2+64<<10, mcp.DefaultMaxRequestBodyBytes)
	mcpHandler := g.mcpHandler(stateless, maxBody)
	rest := g.restHandler()
	var metricsHandler http.Handler
	if g.metrics != nil {
		metricsHandler = g.metrics.Handler()
	}
	if g.config().Auth.Configured() {
		mcpHandler, rest = g.requireAuth(mcpHandler), g.requireAuth(rest)
		if metricsHandler != nil {
			metricsHandler = g.requireAuth(g.operatorOnly(metricsHandler))
		}
	}
	mcpHandler, rest = withTraceContext(mcpHandler), withTraceContext(rest)
	mux := http.NewServeMux()
	if metricsHandler != nil {
		mux.Handle("GET /metrics", metricsHandler)
	}
	mux.Handle(MCPPath, crossOriginRefused(mcpHandler, func(w http.ResponseWriter) {
		writeRPCError(w, http.StatusForbidden, nil, jsonrpc.CodeInvalidRequest, crossOriginMessage+" "+crossOriginHint)
	}))
	mux.Handle("/v1/", rest)
	mux.Handle(console.Path, g.consoleHandler())
	if g.authn.tokens != nil {
		for _, p := range g.metadataPaths() {
			mux.Handle(p, g.metadataHandler())
		}
	}
	mux.HandleFunc("GET /healthz", g.healthz)
	mux.HandleFunc("GET /readyz", g.readyz)
	// Every request's connection learns whether it authenticated by the
	// time its handler returns, at the latest: what the server reads after
	// (the rest of a body it discards) is read for a caller without one.
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer unprovenConn(r.Context())
		mux.ServeHTTP(w, r)
	})
}

// mcpHandler serves MCP over streamable HTTP: requests without a session
// (and, unless stateless, sessions beside them), the lane in front of the
// SDK's handler for each, in one envelope that reads a POST's messages
// once.
func (g *Gateway) mcpHandler(stateless bool, maxBody int64) http.Handler {
	streamable := func(stateless bool) http.Handler {
		return mcp.NewStreamableHTTPHandler(
			func(*http.Request) *mcp.Server { return g.server },
			&mcp.StreamableHTTPOptions{
				Stateless:                    stateless,
				Logger:                       g.log,
				MaxRequestBodyBytes:          maxBody,
				PropagateRequestCancellation: true,
				// The lane keeps the idle timeout of sessions, since some of
				// their requests never reach the SDK.
			},
		)
	}
	h := g.stateless.wrap(g.newLane(0).wrapStateless(streamable(true)))
	if !stateless {
		sessions := g.newLane(g.config().HTTP.SessionIdleTimeout).wrap(
			newSessionCap(g.config().HTTP.MaxSessionsPerPrincipal, g.server, g.sessionRefused).wrap(streamable(false)))
		h = byGeneration(sessions, h)
	}
	return mcpEnvelope(maxBody, h)
}

// isOperator reports whether r comes from the operator. With
// authentication configured, only the operator learns what is behind the
// gateway: a caller holding a key or a valid access token of a tenant that
// sees every upstream and tool (see seesAll). A health check by anyone
// else gets the status.
func (g *Gateway) isOperator(r *http.Request) bool {
	if !g.config().Auth.Configured() {
		return true
	}
	credential, _ := bearerCredential(r)
	ti, err := g.authn.verify(r.Context(), credential)
	if err != nil {
		unprovenConn(r.Context())
		return false
	}
	proveConn(r.Context())
	return seesAll(g.config(), identityOf(ti).Tenant)
}

// healthz says the gateway is up, and to the operator its dry run and
// each upstream's count of tools.
func (g *Gateway) healthz(w http.ResponseWriter, r *http.Request) {
	if !g.isOperator(r) {
		writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
		return
	}
	counts := g.ToolCounts()
	names := make([]string, 0, len(counts))
	for n := range counts {
		names = append(names, n)
	}
	sort.Strings(names)
	type up struct {
		Name  string `json:"name"`
		Tools int    `json:"tools"`
	}
	body := struct {
		Status    string `json:"status"`
		DryRun    bool   `json:"dry_run"`
		Upstreams []up   `json:"upstreams"`
	}{Status: "ok", DryRun: g.gate.DryRun()}
	for _, n := range names {
		body.Upstreams = append(body.Upstreams, up{n, counts[n]})
	}
	writeJSON(w, http.StatusOK, body)
}

// readyz says whether the gateway can serve, 503 when not; the operator
// also reads what is not ready, the drift between gateways sharing a
// store, and the file's warnings.
func (g *Gateway) readyz(w http.ResponseWriter, r *http.Request) {
	full := g.isOperator(r)
	notReady := g.Ready(r.Context())
	body := struct {
		Status   string     `json:"status"`
		NotReady []NotReady `json:"not_ready,omitempty"`
		Drift    string     `json:"drift,omitempty"`
		// Warnings do not take a gateway out of rotation either;
		// they name the file's lines, for the operator alone.
		Warnings []string `json:"warnings,omitempty"`
	}{Status: "ready"}
	if full {
		body.Warnings = g.Warnings()
	}
	// Gateways that drifted apart still serve: drift is for the
	// operator to read, never a reason to take one out of rotation.
	if g.drift != nil && full {
		body.Drift = g.drift(r.Context())
	}
	status := http.StatusOK
	if len(notReady) > 0 {
		body.Status, status = "not ready", http.StatusServiceUnavailable
		if full {
			body.NotReady = notReady
		}
	}
	writeJSON(w, status, body)
}

// operatorOnly serves h to a caller whose credential, verified by
// requireAuth, is the operator's: its tenant sees every upstream and tool.
// Others are refused with PERMISSION_DENIED, since what h shows (the
// metrics) names every tool, upstream and gateway.
func (g *Gateway) operatorOnly(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if ti := stateOf(r.Context()).token; ti == nil || !seesAll(g.config(), identityOf(ti).Tenant) {
			writeError(w, errNotOperator)
			return
		}
		h.ServeHTTP(w, r)
	})
}

// errNotOperator refuses a caller whose tenant is limited to some
// upstreams or tools what names all of them.
var errNotOperator = &interlock.Error{Code: interlock.CodePermissionDenied,
	Message: "The metrics name every upstream and tool, and this credential's tenant may use only some of them.",
	Hint:    "Read /metrics with a key or access token of a tenant that the tenants section does not limit to some upstreams or tools."}

// byGeneration serves each request to /mcp by its protocol generation: one
// of 2026-07-28 or later, which the SDK serves only without sessions, goes
// to stateless; an earlier one to sessions. A request is of the later
// generation when its Mcp-Protocol-Version header names one, or any of its
// messages does in its params' _meta (server/discover, which such clients
// send first, carries the version there as well as in the header).
func byGeneration(sessions, stateless http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if newProtocol(r) {
			stateless.ServeHTTP(w, r)
			return
		}
		sessions.ServeHTTP(w, r)
	})
}

// newProtocol reports whether r speaks protocol 2026-07-28 or later.
func newProtocol(r *http.Request) bool {
	if r.Header.Get(protocolVersionHeader) >= protocolNew {
		return true
	}
	for _, m := range requestMessages(r) {
		if m.protocolVersion() >= protocolNew {
			return true
		}
	}
	return false
}

// protocolVersionHeader names the protocol version of a streamable HTTP
// request.
const protocolVersionHeader = sdkrules.ProtocolVersionHeader

// withTraceContext continues the trace a request's W3C traceparent header
// names, if any.
func withTraceContext(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("traceparent") != "" {
			r = r.WithContext(tracing.FromHeaders(r.Context(), propagation.HeaderCarrier(r.Header)))
		}
		h.ServeHTTP(w, r)
	})
}

// keyVerifier checks a bearer token against the configured key hashes. Every
// hash is compared, in constant time, so the time taken does not say which
// key came close.
func keyVerifier(keys []*config.Key) auth.TokenVerifier {
	type entry struct {
		sum []byte
		key *config.Key
	}
	entries := make([]entry, len(keys))
	for i, k := range keys {
		sum, _ := hex.DecodeString(k.SHA256)
		entries[i] = entry{sum, k}
	}
	return func(_ context.Context, token string, _ *http.Request) (*auth.TokenInfo, error) {
		sum := sha256.Sum256([]byte(token))
		var found *config.Key
		for _, e := range entries {
			if subtle.ConstantTimeCompare(sum[:], e.sum) == 1 {
				found = e.key
			}
		}
		if found == nil {
			return nil, fmt.Errorf("%w: unknown API key", auth.ErrInvalidToken)
		}
		return &auth.TokenInfo{
			// The SDK binds a session to UserID: both halves of the
			// identity go in, so a key of another tenant cannot use it.
			UserID:     sessionOwner(found.Tenant, found.Principal),
			Extra:      map[string]any{"tenant": found.Tenant, "principal": found.Principal, "groups": found.Groups},
			Expiration: time.Now().Add(24 * time.Hour),
		}, nil
	}
}

// HashKey returns the hex SHA-256 of an API key, as the config stores it.
func HashKey(key string) string {
	sum := sha256.Sum256([]byte(key))
	return hex.EncodeToString(sum[:])
}
