// Package oauth makes the gateway an OAuth 2.1 resource server and signs
// approvers in to the console with the same issuer.
//
// A [Provider] validates the bearer access tokens an authorization server
// issues for the gateway (JWTs as RFC 9068 profiles them): the signature
// against the issuer's JWKS, fetched and cached, the issuer, the audience
// (the gateway's resource URL), the lifetime with a small leeway and the
// claims the profile requires. Only asymmetric algorithms are accepted, so
// neither "alg: none" nor an HMAC keyed with a public key gets through.
// The claims the configuration names become the caller's principal, tenant
// and groups.
//
// A [SignIn] runs the OpenID Connect authorization code flow with PKCE for
// the console, and maps the ID token's claims the same way.
//
// With [Config.Introspection], a token that verifies is then put to the
// issuer's introspection endpoint (RFC 7662), and refused unless it is
// active; answers are kept for a short while by the token's SHA-256, so a
// revoked token stops working within that while rather than at its
// expiry.
//
// The issuer's discovery document and keys are fetched on first use, not
// at start, so a gateway starts while its identity provider is down; a key
// id it has not seen refetches the keys, at most once per
// [Config.RefreshInterval].
package oauth

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/coreos/go-oidc/v3/oidc"
)

// Algorithms are the signature algorithms a token may use: asymmetric
// ones only.
var Algorithms = []string{
	oidc.RS256, oidc.RS384, oidc.RS512,
	oidc.PS256, oidc.PS384, oidc.PS512,
	oidc.ES256, oidc.ES384, oidc.ES512,
	oidc.EdDSA,
}

// Defaults.
const (
	// DefaultLeeway is the clock skew tolerated on exp, nbf and iat.
	DefaultLeeway = 30 * time.Second
	// DefaultRefreshInterval is the least time between two fetches of the
	// issuer's keys.
	DefaultRefreshInterval = 30 * time.Second
	// DefaultPrincipalClaim names the caller unless the config says
	// otherwise.
	DefaultPrincipalClaim = "sub"
	// DefaultGroupsClaim lists the caller's groups unless the config says
	// otherwise.
	DefaultGroupsClaim = "groups"
)

// The profiles of access tokens a [Provider] accepts.
const (
	// ProfileRFC9068 accepts JWT access tokens as RFC 9068 profiles them:
	// header typ at+jwt, and the claims iss, exp, aud, sub, client_id, iat
	// and jti.
	ProfileRFC9068 = "rfc9068"
	// ProfileJWT accepts the plain JWT access tokens many identity
	// providers issue by default (typ JWT or none, no client_id or jti):
	// iss, exp, aud and sub are required, and the audience check alone
	// keeps another JWT of the issuer, such as an ID token, from passing.
	ProfileJWT = "jwt"
)

// ErrInvalidToken is wrapped by every refusal of a token.
var ErrInvalidToken = errors.New("invalid token")

// Claims name the claims that identify a caller.
type Claims struct {
	// Principal is the claim naming the caller; "sub" when empty.
	Principal string
	// Tenant is the claim naming the caller's tenant; when empty every
	// caller is in DefaultTenant.
	Tenant string
	// Groups is the claim listing the caller's groups (an array of
	// strings, or one string); "groups" when empty.
	Groups string
	// DefaultTenant is the tenant when Tenant is empty.
	DefaultTenant string
}

// Config configures a [Provider].
type Config struct {
	// Issuer is the authorization server's issuer identifier, exactly as
	// its tokens carry it in iss.
	Issuer string
	// Audience is the gateway's resource URL: an access token must name
	// it in aud.
	Audience string
	// JWKSURL is where the issuer's keys are; discovered from
	// Issuer/.well-known/openid-configuration when empty.
	JWKSURL string
	Claims  Claims
	// Client fetches discovery and keys and redeems codes; a client with
	// a 10 second timeout when nil.
	Client *http.Client
	// Now is the clock; time.Now when nil.
	Now func() time.Time
	// Profile is what an access token must look like: ProfileRFC9068 (when
	// empty) or ProfileJWT.
	Profile string
	// Leeway and RefreshInterval default to DefaultLeeway and
	// DefaultRefreshInterval.
	Leeway          time.Duration
	RefreshInterval time.Duration
	// Introspection, when set, asks the issuer whether each token that
	// verifies is still active.
	Introspection *Introspection
}

// Identity is who a token names.
type Identity struct {
	Principal string
	Tenant    string
	Groups    []string
	// Scopes are the token's scopes (scope, or scp).
	Scopes []string
	Expiry time.Time
}

// Provider validates access tokens of one issuer and signs approvers in
// with it.
type Provider struct {
	cfg    Config
	keys   *keySet
	access *oidc.IDTokenVerifier
	// introspect is nil without Config.Introspection.
	introspect *introspector

	mu        sync.Mutex
	discovery *oidc.Provider
	// tried is when discovery was last attempted, so that a provider that
	// is down is not asked on every request.
	tried time.Time
}

// New returns a provider for cfg. It fetches nothing yet.
func New(cfg Config) (*Provider, error) {
	if cfg.Issuer == "" {
		return nil, errors.New("oauth: an issuer is required")
	}
	if cfg.Audience == "" {
		return nil, errors.New("oauth: an audience is required")
	}
	if cfg.Client == nil {
		cfg.Client = &http.Client{Timeout: 10 * time.Second}
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Leeway <= 0 {
		cfg.Leeway = DefaultLeeway
	}
	if cfg.RefreshInterval <= 0 {
		cfg.RefreshInterval = DefaultRefreshInterval
	}
	switch cfg.Profile {
	case "":
		cfg.Profile = ProfileRFC9068
	case ProfileRFC9068, ProfileJWT:
	default:
		return nil, fmt.Errorf("oauth: profile %q: use %s or %s", cfg.Profile, ProfileRFC9068, ProfileJWT)
	}
	if cfg.Claims.Principal == "" {
		cfg.Claims.Principal = DefaultPrincipalClaim
	}
	if cfg.Claims.Groups == "" {
		cfg.Claims.Groups = DefaultGroupsClaim
	}
	p := &Provider{cfg: cfg}
	if cfg.Introspection != nil {
		in := *cfg.Introspection
		if in.ClientID == "" {
			return nil, errors.New("oauth: introspection needs a client id")
		}
		if in.Cache <= 0 {
			in.Cache = DefaultIntrospectionCache
		}
		if in.MaxEntries <= 0 {
			in.MaxEntries = DefaultIntrospectionEntries
		}
		p.introspect = &introspector{cfg: in, client: cfg.Client, now: cfg.Now, url: p.introspectionURL,
			answers: newAnswers(in.MaxEntries)}
	}
	p.keys = &keySet{client: cfg.Client, now: cfg.Now, every: cfg.RefreshInterval, url: p.jwksURL}
	// Lifetimes are checked here, with the leeway, rather than by the
	// verifier, which has none for exp.
	p.access = oidc.NewVerifier(cfg.Issuer, p.keys, &oidc.Config{ClientID: cfg.Audience,
		SupportedSigningAlgs: Algorithms, SkipExpiryCheck: true})
	return p, nil
}

// Issuer returns the issuer identifier.
func (p *Provider) Issuer() string { return p.cfg.Issuer }

// Audience returns the resource URL tokens must name.
func (p *Provider) Audience() string { return p.cfg.Audience }

// LooksLikeJWT reports whether token has the shape of a compact JWS: three
// base64url parts, the first of which decodes to a JSON object.
func LooksLikeJWT(token string) bool {
	_, err := header(token)
	return err == nil
}

// jwtHeader is the part of a JOSE header that is checked before the
// signature.
type jwtHeader struct {
	Alg string `json:"alg"`
	Typ string `json:"typ"`
}

func header(token string) (jwtHeader, error) {
	var h jwtHeader
	parts := strings.Split(token, ".")
	if len(parts) != 3 {
		return h, errors.New("not a JWT")
	}
	raw, err := base64.RawURLEncoding.DecodeString(parts[0])
	if err != nil {
		return h, fmt.Errorf("header: %w", err)
	}
	if err := json.Unmarshal(raw, &h); err != nil {
		return h, fmt.Errorf("header: %w", err)
	}
	return h, nil
}

// Verify validates an access token and returns whom it names. With
// introspection, a token that verifies is then refused unless the issuer
// says, or said less than the cache time ago, that it is active. Every
// refusal wraps ErrInvalidToken, but for an introspection endpoint that
// gave no answer: that wraps ErrIntrospectionFailed. The error's text is
// for the log, not the caller.
func (p *Provider) Verify(ctx context.Context, token string) (*Identity, error) {
	h, err := header(token)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidToken, err)
	}
	if !slices.Contains(Algorithms, h.Alg) {
		return nil, fmt.Errorf("%w: algorithm %q is not accepted", ErrInvalidToken, h.Alg)
	}
	if !p.typeAccepted(h.Typ) {
		return nil, fmt.Errorf("%w: typ %q is not accepted (%s profile)", ErrInvalidToken, h.Typ, p.cfg.Profile)
	}
	verified, err := p.access.Verify(oidc.ClientContext(ctx, p.cfg.Client), token)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidToken, err)
	}
	var claims map[string]any
	if err := verified.Claims(&claims); err != nil {
		return nil, fmt.Errorf("%w: claims: %w", ErrInvalidToken, err)
	}
	required := []string{"iss", "exp", "aud", "sub", "client_id", "iat", "jti"}
	if p.cfg.Profile == ProfileJWT {
		required = required[:4]
	}
	for _, name := range required {
		if _, ok := claims[name]; !ok {
			return nil, fmt.Errorf("%w: claim %s is missing", ErrInvalidToken, name)
		}
	}
	if err := p.checkLifetime(claims); err != nil {
		return nil, err
	}
	id, err := p.identity(claims)
	if err != nil {
		return nil, err
	}
	id.Scopes = scopes(claims)
	// Asked last, so that the endpoint hears only of tokens that would
	// otherwise pass.
	if p.introspect != nil {
		if err := p.introspect.check(ctx, token, id.Expiry); err != nil {
			return nil, err
		}
	}
	return id, nil
}

// typeAccepted reports whether a token's typ header fits the profile. RFC
// 9068 section 4: at+jwt keeps an ID token or another JWT of the same
// issuer from passing as an access token. Plain JWT access tokens say JWT,
// or nothing; an explicit type of something else is refused either way.
func (p *Provider) typeAccepted(typ string) bool {
	switch strings.ToLower(typ) {
	case "at+jwt", "application/at+jwt":
		return true
	case "jwt", "":
		return p.cfg.Profile == ProfileJWT
	}
	return false
}

// checkLifetime checks exp, nbf and iat against the clock, with the
// leeway.
func (p *Provider) checkLifetime(claims map[string]any) error {
	now, leeway := p.cfg.Now(), p.cfg.Leeway
	at := func(name string) (time.Time, bool, error) {
		v, ok := claims[name]
		if !ok {
			return time.Time{}, false, nil
		}
		n, isNumber := v.(float64)
		if !isNumber {
			return time.Time{}, true, fmt.Errorf("%w: claim %s is not a number", ErrInvalidToken, name)
		}
		return time.Unix(int64(n), 0), true, nil
	}
	exp, _, err := at("exp")
	if err != nil {
		return err
	}
	if now.After(exp.Add(leeway)) {
		return fmt.Errorf("%w: expired at %s", ErrInvalidToken, exp.UTC().Format(time.RFC3339))
	}
	for _, name := range []string{"nbf", "iat"} {
		t, given, err := at(name)
		if err != nil {
			return err
		}
		if given && t.After(now.Add(leeway)) {
			return fmt.Errorf("%w: %s %s is in the future", ErrInvalidToken, name, t.UTC().Format(time.RFC3339))
		}
	}
	return nil
}

// identity maps claims to whom they name.
func (p *Provider) identity(claims map[string]any) (*Identity, error) {
	names := p.cfg.Claims
	principal, _ := claims[names.Principal].(string)
	if principal == "" {
		return nil, fmt.Errorf("%w: claim %s (the principal) is missing or not a string", ErrInvalidToken, names.Principal)
	}
	id := &Identity{Principal: principal, Tenant: names.DefaultTenant}
	if exp, ok := claims["exp"].(float64); ok {
		id.Expiry = time.Unix(int64(exp), 0)
	}
	if names.Tenant != "" {
		tenant, _ := claims[names.Tenant].(string)
		if tenant == "" {
			// Fail closed: a caller of no tenant must not land in the default one.
			return nil, fmt.Errorf("%w: claim %s (the tenant) is missing or not a string", ErrInvalidToken, names.Tenant)
		}
		id.Tenant = tenant
	}
	switch groups := claims[names.Groups].(type) {
	case string:
		id.Groups = strings.Fields(groups)
	case []any:
		for _, g := range groups {
			if s, ok := g.(string); ok && s != "" {
				id.Groups = append(id.Groups, s)
			}
		}
	}
	return id, nil
}

// scopes reads the scope claim (RFC 9068: space-separated), or scp (an
// array, as some providers write it).
func scopes(claims map[string]any) []string {
	if s, ok := claims["scope"].(string); ok {
		return strings.Fields(s)
	}
	var out []string
	switch scp := claims["scp"].(type) {
	case string:
		out = strings.Fields(scp)
	case []any:
		for _, v := range scp {
			if s, ok := v.(string); ok {
				out = append(out, s)
			}
		}
	}
	return out
}

// provider returns the issuer's discovery document, fetching it once it
// is needed; a failed fetch is tried again after the refresh interval.
func (p *Provider) provider(ctx context.Context) (*oidc.Provider, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.discovery != nil {
		return p.discovery, nil
	}
	now := p.cfg.Now()
	if !p.tried.IsZero() && now.Sub(p.tried) < p.cfg.RefreshInterval {
		return nil, errors.New("the issuer's discovery document could not be fetched a moment ago")
	}
	p.tried = now
	d, err := oidc.NewProvider(oidc.ClientContext(ctx, p.cfg.Client), p.cfg.Issuer)
	if err != nil {
		return nil, fmt.Errorf("discovering %s: %w", p.cfg.Issuer, err)
	}
	p.discovery = d
	return d, nil
}

// jwksURL is the configured key set's URL, or the discovered one.
func (p *Provider) jwksURL(ctx context.Context) (string, error) {
	if p.cfg.JWKSURL != "" {
		return p.cfg.JWKSURL, nil
	}
	d, err := p.provider(ctx)
	if err != nil {
		return "", err
	}
	var doc struct {
		JWKSURI string `json:"jwks_uri"`
	}
	if err := d.Claims(&doc); err != nil || doc.JWKSURI == "" {
		return "", fmt.Errorf("the discovery document of %s names no jwks_uri", p.cfg.Issuer)
	}
	return doc.JWKSURI, nil
}
