package config

import (
	"fmt"
	"net"
	"net/url"
	"strings"
	"time"

	"go.yaml.in/yaml/v4"
)

// The auth section: the API keys and the OAuth issuer the gateway accepts.

// Auth configures HTTP authentication.
type Auth struct {
	Keys []*Key `yaml:"keys"`
	// OAuth, when set, also accepts the access tokens of an OAuth 2.1
	// authorization server, and may sign approvers in to the console with
	// it.
	OAuth *OAuth `yaml:"oauth"`
}

// Configured reports whether HTTP callers must authenticate: some API key
// or an OAuth issuer is configured.
func (a Auth) Configured() bool { return len(a.Keys) > 0 || a.OAuth != nil }

// OAuth configures the gateway as an OAuth resource server.
type OAuth struct {
	// Issuer is the authorization server's issuer identifier: https, or
	// http on a loopback address.
	Issuer string `yaml:"issuer"`
	// Audience is the resource URL an access token must name in aud; the
	// gateway's public URL followed by /mcp when empty.
	Audience string `yaml:"audience"`
	// JWKSURL is where the issuer's keys are; discovered from the issuer's
	// /.well-known/openid-configuration when empty.
	JWKSURL string      `yaml:"jwks_url"`
	Claims  OAuthClaims `yaml:"claims"`
	// Scopes must all be granted to a token; none when empty.
	Scopes []string `yaml:"scopes"`
	// TokenProfile is what an access token must look like: rfc9068 (when
	// absent: typ at+jwt, with client_id, iat and jti) or jwt (the plain
	// JWT access tokens many identity providers issue by default).
	TokenProfile string `yaml:"token_profile"`
	// Console, when set, lets approvers sign in to the console with the
	// same issuer.
	Console *OAuthConsole `yaml:"console"`
	// Introspection, when set, asks the issuer whether each token is still
	// active (RFC 7662), so that a revoked token stops working within the
	// cache time rather than at its expiry.
	Introspection *OAuthIntrospection `yaml:"introspection"`
}

// DefaultIntrospectionCache is how long an introspection answer is kept
// unless the config says otherwise.
const DefaultIntrospectionCache = 30 * time.Second

// OAuthIntrospection is the gateway's client at the issuer's token
// introspection endpoint.
type OAuthIntrospection struct {
	// URL is the endpoint: https, or http on a loopback address; the
	// introspection_endpoint of the issuer's discovery document when
	// empty.
	URL string `yaml:"url"`
	// ClientID and ClientSecret authenticate the gateway to the endpoint
	// (client_secret_basic); ${VAR} in the secret is read from the
	// gateway's environment at load.
	ClientID     string `yaml:"client_id"`
	ClientSecret string `yaml:"client_secret"`
	// Cache is how long an answer is kept for its token, 1s to 1h; 30s
	// when absent.
	Cache string `yaml:"cache"`

	CacheFor time.Duration `yaml:"-"`
}

// OAuthClaims name the claims that identify a caller.
type OAuthClaims struct {
	// Principal is "sub" when empty.
	Principal string `yaml:"principal"`
	// Tenant, when empty, puts every caller in tenant "default".
	Tenant string `yaml:"tenant"`
	// Groups is "groups" when empty.
	Groups string `yaml:"groups"`
}

// OAuthConsole is the console's client registration at the issuer.
type OAuthConsole struct {
	ClientID string `yaml:"client_id"`
	// ClientSecret is empty for a public client; ${VAR} is read from the
	// gateway's environment at load.
	ClientSecret string `yaml:"client_secret"`
	// Scopes are asked for beside openid, profile and email, such as
	// groups for a provider that puts the groups claim in ID tokens only
	// when asked.
	Scopes []string `yaml:"scopes"`
}

// Key is a static API key, sent as "Authorization: Bearer <key>". Only its
// SHA-256 is stored.
type Key struct {
	SHA256    string `yaml:"sha256"`
	Principal string `yaml:"principal"`
	Tenant    string `yaml:"tenant"`
	// Groups name the groups the key's principal belongs to, for rules
	// whose approvers name a group (group:NAME).
	Groups []string `yaml:"groups"`

	Line  int `yaml:"-"`
	lines lines
}

// DefaultTenant is the tenant of an API key that names none.
const DefaultTenant = "default"

// UnmarshalYAML records where the key and each of its fields start, for
// messages, and rejects unknown fields.
func (k *Key) UnmarshalYAML(n *yaml.Node) error {
	type plain Key
	k.Line, k.lines = n.Line, keyLines(n)
	return n.Load((*plain)(k), yaml.WithKnownFields())
}

// checkKeys checks the API keys: each a distinct SHA-256 with a principal,
// in the default tenant when it names none.
func checkKeys(f *File, add func(int, string, ...any)) {
	hashes := map[string]int{}
	for _, k := range f.Auth.Keys {
		k.SHA256 = strings.ToLower(strings.TrimSpace(k.SHA256))
		if !sha256RE.MatchString(k.SHA256) {
			add(k.lines.At("sha256", k.Line), "auth key: sha256 must be 64 hex digits (the SHA-256 of the key; `interlock key` makes one)")
		} else if hashes[k.SHA256] != 0 {
			add(k.lines.At("sha256", k.Line), "auth key: the same key is already listed on line %d", hashes[k.SHA256])
		} else {
			hashes[k.SHA256] = k.Line
		}
		if k.Principal == "" {
			add(k.Line, "auth key: principal is required: name who uses this key")
		}
		if k.Tenant == "" {
			k.Tenant = DefaultTenant
		}
	}
}

// checkOAuth checks the auth.oauth section and expands ${VAR} in the
// client secrets of the console and of introspection.
func checkOAuth(f *File, keyLine lines, expand expander, add func(int, string, ...any)) {
	o := f.Auth.OAuth
	if o == nil {
		return
	}
	at := func(key string) int { return keyLine.At("auth.oauth."+key, keyLine.At("auth.oauth", 0)) }
	switch {
	case o.Issuer == "":
		add(at("issuer"), "auth.oauth needs issuer: the authorization server's issuer URL, such as https://login.example.com/realms/acme")
	case !secureURL(o.Issuer):
		add(at("issuer"), "auth.oauth.issuer %q must be an https:// URL (http:// only on a loopback address such as 127.0.0.1)", o.Issuer)
	}
	if o.JWKSURL != "" && !secureURL(o.JWKSURL) {
		add(at("jwks_url"), "auth.oauth.jwks_url %q must be an https:// URL (http:// only on a loopback address); leave it out to discover it from the issuer", o.JWKSURL)
	}
	if o.Audience != "" {
		if u, err := url.Parse(o.Audience); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.Fragment != "" {
			add(at("audience"), "auth.oauth.audience %q must be this gateway's resource URL, such as https://interlock.example.com/mcp", o.Audience)
		}
	}
	if o.TokenProfile != "" && o.TokenProfile != "rfc9068" && o.TokenProfile != "jwt" {
		add(at("token_profile"), "auth.oauth.token_profile %q: use rfc9068 (access tokens with typ at+jwt, the default) or jwt (plain JWT access tokens)", o.TokenProfile)
	}
	checkScopes("auth.oauth.scopes", o.Scopes, keyLine, at("scopes"), add)
	for key, name := range map[string]string{"principal": o.Claims.Principal, "tenant": o.Claims.Tenant, "groups": o.Claims.Groups} {
		if _, written := keyLine["auth.oauth.claims."+key]; written && strings.TrimSpace(name) == "" {
			add(at("claims."+key), "auth.oauth.claims.%s is empty: name a claim of the tokens, or leave the key out", key)
		}
	}
	if c := o.Console; c != nil {
		if c.ClientID == "" {
			add(at("console"), "auth.oauth.console needs client_id: the console's client id at the issuer")
		}
		c.ClientSecret = expand(at("console.client_secret"), "auth.oauth.console.client_secret", c.ClientSecret)
		checkScopes("auth.oauth.console.scopes", c.Scopes, keyLine, at("console.scopes"), add)
	}
	if in := o.Introspection; in != nil {
		if in.URL != "" && !secureURL(in.URL) {
			add(at("introspection.url"), "auth.oauth.introspection.url %q must be an https:// URL (http:// only on a loopback address); leave it out to discover it from the issuer", in.URL)
		}
		// client_secret_basic: the endpoint answers only a client it knows.
		if in.ClientID == "" {
			add(at("introspection"), "auth.oauth.introspection needs client_id: the gateway's client id at the issuer, allowed to introspect tokens")
		}
		if in.ClientSecret == "" {
			add(at("introspection"), "auth.oauth.introspection needs client_secret: the secret of client_id, such as ${INTROSPECTION_SECRET}")
		}
		in.ClientSecret = expand(at("introspection.client_secret"), "auth.oauth.introspection.client_secret", in.ClientSecret)
		in.CacheFor = DefaultIntrospectionCache
		if in.Cache != "" {
			d, err := time.ParseDuration(in.Cache)
			if err != nil || d < time.Second || d > time.Hour {
				add(at("introspection.cache"), "auth.oauth.introspection.cache %q must be a duration between 1s and 1h, such as 30s", in.Cache)
			}
			in.CacheFor = d
		}
	}
}

// checkScopes reports each entry of the list at key that is not an OAuth
// scope; line is the list's own line, for an entry without one.
func checkScopes(key string, scopes []string, keyLine lines, line int, add func(int, string, ...any)) {
	for i, s := range scopes {
		if s == "" || strings.ContainsAny(s, " \t\n\"\\") {
			add(keyLine.At(fmt.Sprintf("%s[%d]", key, i), line), "%s: %q is not a scope: no spaces, quotes or backslashes", key, s)
		}
	}
}

// secureURL reports whether raw is an https URL, or an http one on a
// loopback address, with no query or fragment.
func secureURL(raw string) bool {
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" || u.RawQuery != "" || u.Fragment != "" || u.User != nil {
		return false
	}
	switch u.Scheme {
	case "https":
		return true
	case "http":
		host := u.Hostname()
		ip := net.ParseIP(host)
		return host == "localhost" || (ip != nil && ip.IsLoopback())
	}
	return false
}
