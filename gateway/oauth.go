package gateway

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/oauthex"

	"github.com/interlock-mcp/interlock"
	"github.com/interlock-mcp/interlock/audit"
	"github.com/interlock-mcp/interlock/config"
	"github.com/interlock-mcp/interlock/console"
	"github.com/interlock-mcp/interlock/oauth"
)

// MetadataPath is where the gateway serves its OAuth protected resource
// metadata (RFC 9728); the same document is also served with the MCP
// endpoint's path appended, as the RFC derives it from the resource URL.
const MetadataPath = "/.well-known/oauth-protected-resource"

// errInsufficientScope refuses an access token that lacks a required
// scope.
var errInsufficientScope = errors.New("the access token lacks a required scope")

// authenticator tells who holds a bearer credential: an API key of the
// config, or an access token of its OAuth issuer.
type authenticator struct {
	keys auth.TokenVerifier
	// tokens is nil without auth.oauth, or when the gateway has no
	// resource URL to check tokens' audience against: then every token is
	// refused.
	tokens *oauth.Provider
	oauth  *config.OAuth
	// metadata is the URL of the protected resource metadata; empty
	// without OAuth.
	metadata string
	// refusals bounds the auth_refused records of each source.
	refusals refusals
}

// newAuthenticator prepares the authentication of f for a gateway reached
// at public.
func newAuthenticator(f *config.File, public string, keys auth.TokenVerifier) (*authenticator, error) {
	a := &authenticator{keys: keys, oauth: f.Auth.OAuth}
	o := f.Auth.OAuth
	if o == nil {
		return a, nil
	}
	audience := o.Audience
	if audience == "" && public != "" {
		audience = strings.TrimSuffix(public, "/") + MCPPath
	}
	if audience == "" {
		return a, nil
	}
	var introspection *oauth.Introspection
	if in := o.Introspection; in != nil {
		introspection = &oauth.Introspection{URL: in.URL, ClientID: in.ClientID, ClientSecret: in.ClientSecret, Cache: in.CacheFor}
	}
	p, err := oauth.New(oauth.Config{Issuer: o.Issuer, Audience: audience, JWKSURL: o.JWKSURL, Profile: o.TokenProfile,
		Claims: oauth.Claims{Principal: o.Claims.Principal, Tenant: o.Claims.Tenant, Groups: o.Claims.Groups,
			DefaultTenant: config.DefaultTenant}, Introspection: introspection})
	if err != nil {
		return nil, err
	}
	a.tokens = p
	u, err := url.Parse(audience)
	if err != nil {
		return nil, fmt.Errorf("auth.oauth.audience: %w", err)
	}
	u.Path = MetadataPath + strings.TrimSuffix(u.Path, "/")
	u.RawQuery = ""
	a.metadata = u.String()
	return a, nil
}

// verify returns who a bearer credential names. API keys are tried
// first; a credential that is no key and has the shape of a JWT goes to
// the issuer's validator.
func (a *authenticator) verify(ctx context.Context, credential string) (*auth.TokenInfo, error) {
	ti, keyErr := a.keys(ctx, credential, nil)
	if keyErr == nil {
		return ti, nil
	}
	if a.oauth == nil || !oauth.LooksLikeJWT(credential) {
		return nil, keyErr
	}
	if a.tokens == nil {
		return nil, fmt.Errorf("%w: no resource URL to check the audience against", auth.ErrInvalidToken)
	}
	id, err := a.tokens.Verify(ctx, credential)
	if errors.Is(err, oauth.ErrIntrospectionFailed) {
		// Not an invalid token: nobody could say whether it is.
		return nil, err
	}
	if err != nil {
		return nil, fmt.Errorf("%w: %w", auth.ErrInvalidToken, err)
	}
	for _, s := range a.oauth.Scopes {
		if !slices.Contains(id.Scopes, s) {
			return nil, fmt.Errorf("%w: %s", errInsufficientScope, s)
		}
	}
	return &auth.TokenInfo{
		UserID:     sessionOwner(id.Tenant, id.Principal),
		Scopes:     id.Scopes,
		Expiration: id.Expiry,
		Extra:      map[string]any{"tenant": id.Tenant, "principal": id.Principal, "groups": id.Groups},
	}, nil
}

// bearerCredential returns the credential of an "Authorization: Bearer"
// header, and whether the request sent an Authorization header at all.
func bearerCredential(r *http.Request) (string, bool) {
	h := r.Header.Get("Authorization")
	scheme, credential, _ := strings.Cut(h, " ")
	if !strings.EqualFold(scheme, "Bearer") {
		return "", h != ""
	}
	return strings.TrimSpace(credential), true
}

// requireAuth lets through requests whose bearer credential verifies and
// answers the others 401 (403 for a token without a required scope) with
// a WWW-Authenticate challenge: with OAuth it points at the protected
// resource metadata, so a client can find the authorization server. A
// token the issuer's introspection endpoint could not confirm is answered
// 503 with Retry-After.
// Every refusal is recorded as auth_refused, never with the credential;
// those of a source past refusalBurst in a window are counted instead.
func (g *Gateway) requireAuth(h http.Handler) http.Handler {
	skew := oauth.DefaultLeeway
	inner := auth.RequireBearerToken(func(ctx context.Context, _ string, _ *http.Request) (*auth.TokenInfo, error) {
		// The credential was verified below; the SDK's middleware puts it
		// where the MCP server and the REST face read it.
		if ti := stateOf(ctx).token; ti != nil {
			return ti, nil
		}
		return nil, auth.ErrInvalidToken
	}, &auth.RequireBearerTokenOptions{AllowMissingExpiration: true, ClockSkew: skew})(h)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		credential, sent := bearerCredential(r)
		err := fmt.Errorf("%w: no credential", auth.ErrInvalidToken)
		var ti *auth.TokenInfo
		if credential != "" {
			ti, err = g.authn.verify(r.Context(), credential)
		}
		if err != nil {
			g.refuse(w, r, sent, err)
			return
		}
		proveConn(r.Context())
		inner.ServeHTTP(w, r.WithContext(withState(r.Context(), func(s *requestState) { s.token = ti })))
	})
}

// introspectionRetryAfter is the Retry-After of a request refused because
// the issuer's introspection endpoint did not answer, in seconds.
const introspectionRetryAfter = "5"

// refuse answers a request whose credential did not verify, and records
// why.
func (g *Gateway) refuse(w http.ResponseWriter, r *http.Request, sent bool, err error) {
	a := g.authn
	var params []string
	if a.oauth != nil {
		if a.metadata != "" {
			params = append(params, fmt.Sprintf("resource_metadata=%q", a.metadata))
		}
		if len(a.oauth.Scopes) > 0 {
			params = append(params, fmt.Sprintf("scope=%q", strings.Join(a.oauth.Scopes, " ")))
		}
	} else {
		params = append(params, `realm="interlock"`)
	}
	status, why, message := http.StatusUnauthorized, "no API key or access token",
		"This gateway needs a credential: send Authorization: Bearer <API key or access token>."
	switch {
	case errors.Is(err, oauth.ErrIntrospectionFailed):
		// 503, not 401: a 401 with invalid_token tells the client to drop
		// a token that may well be good and to sign in again, which
		// fails too while the issuer is unreachable. A 503 with
		// Retry-After says to send the same token again shortly; the
		// request is refused either way.
		status, why = http.StatusServiceUnavailable, "an access token its issuer could not confirm (introspection failed)"
		message = "The identity provider could not confirm the access token just now: try again in a few seconds."
		w.Header().Set("Retry-After", introspectionRetryAfter)
	case errors.Is(err, errInsufficientScope):
		status, why = http.StatusForbidden, "an access token without the required scopes"
		message = "The access token lacks a scope this gateway requires: sign in again granting " + strings.Join(a.oauth.Scopes, " ") + "."
		params = append(params, `error="insufficient_scope"`)
	case sent:
		why, message = "an unknown API key", "The API key or access token is not valid: check it, or sign in again for a new token."
		if errors.Is(err, oauth.ErrInvalidToken) {
			why = "an invalid access token"
		}
		params = append(params, `error="invalid_token"`)
	}
	switch {
	case status == http.StatusServiceUnavailable:
		// Every token that is not in the cache is refused until the
		// endpoint answers again: the operator's problem, not the caller's.
		g.log.WarnContext(r.Context(), "access token refused: the issuer's token introspection endpoint did not answer",
			"path", r.URL.Path, "remote", r.RemoteAddr, "reason", err)
	case sent:
		// The reason is for the operator; the caller learns only that
		// the credential was refused.
		g.log.InfoContext(r.Context(), "credential refused", "path", r.URL.Path, "remote", r.RemoteAddr, "reason", err)
	}
	g.recordRefusal(r, why)
	if status != http.StatusServiceUnavailable {
		w.Header().Set("WWW-Authenticate", "Bearer "+strings.Join(params, ", "))
	}
	http.Error(w, message, status)
}

// recordRefusal records a refused credential of r (why names its kind,
// never its value): the first refusals of a source in a window each get a
// record, the rest are counted and noted in its next one. Every face that
// takes credentials (the HTTP faces, the console's sign-in) records
// through it.
func (g *Gateway) recordRefusal(r *http.Request, why string) {
	record, note := g.authn.refusals.admit(r.RemoteAddr)
	if !record {
		if g.metrics != nil {
			g.metrics.Event("auth_refused")
		}
		return
	}
	if note != "" {
		why += " (" + note + ")"
	}
	// The request's method and path come last: the audit log cuts a
	// detail that is too long at its end.
	g.event(r.Context(), "auth_refused", &audit.Record{
		Detail: fmt.Sprintf("from %s with %s: %s %s", r.RemoteAddr, why, r.Method, r.URL.Path)})
}

// metadataHandler serves the protected resource metadata.
func (g *Gateway) metadataHandler() http.Handler {
	a := g.authn
	md := &oauthex.ProtectedResourceMetadata{
		Resource:               a.tokens.Audience(),
		AuthorizationServers:   []string{a.tokens.Issuer()},
		ScopesSupported:        a.oauth.Scopes,
		BearerMethodsSupported: []string{"header"},
		ResourceName:           "interlock",
	}
	return auth.ProtectedResourceMetadataHandler(md)
}

// metadataPaths are the paths the metadata is served at: the bare
// well-known path, the one derived from the MCP endpoint, and the one
// derived from the resource URL when that differs.
func (g *Gateway) metadataPaths() []string {
	paths := []string{MetadataPath, MetadataPath + MCPPath}
	// A path with a pattern's characters is left out: the mux would read
	// it as a wildcard.
	if u, err := url.Parse(g.authn.metadata); err == nil && !slices.Contains(paths, u.Path) && !strings.ContainsAny(u.Path, "{} ") {
		paths = append(paths, u.Path)
	}
	return paths
}

// oidcSignIn signs approvers in to the console with the OAuth issuer.
type oidcSignIn struct{ s *oauth.SignIn }

func (o oidcSignIn) AuthURL(ctx context.Context, state, nonce, verifier string) (string, error) {
	return o.s.AuthURL(ctx, state, nonce, verifier)
}

func (o oidcSignIn) Exchange(ctx context.Context, code, verifier, nonce string) (interlock.Identity, time.Time, error) {
	id, err := o.s.Exchange(ctx, code, verifier, nonce)
	if err != nil {
		return interlock.Identity{}, time.Time{}, err
	}
	return interlock.Identity{Principal: id.Principal, Tenant: id.Tenant, Groups: id.Groups}, id.Expiry, nil
}

// consoleSignIn is the console's sign-in with the issuer, or nil when
// auth.oauth.console is not configured or the gateway has no public URL
// to be called back at.
func (g *Gateway) consoleSignIn(public string) console.IdentityProvider {
	o := g.config().Auth.OAuth
	if o == nil || o.Console == nil || g.authn.tokens == nil || public == "" {
		return nil
	}
	redirect := strings.TrimSuffix(public, "/") + console.CallbackPath
	return oidcSignIn{g.authn.tokens.SignIn(o.Console.ClientID, o.Console.ClientSecret, redirect, o.Console.Scopes...)}
}
