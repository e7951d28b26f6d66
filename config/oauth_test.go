package config

import (
	"slices"
	"strings"
	"testing"
	"time"
)

func TestOAuthConfig(t *testing.T) {
	env := func(name string) (string, bool) {
		switch name {
		case "CONSOLE_SECRET":
			return "s3cr3t", true
		case "INTROSPECTION_SECRET":
			return "1ntr0", true
		}
		return "", false
	}
	f, err := Parse("p.yaml", []byte(`
auth:
  oauth:
    issuer: https://login.example.com/realms/acme
    audience: https://interlock.example.com/mcp
    claims: {principal: email, tenant: org, groups: roles}
    scopes: [mcp:tools]
    token_profile: jwt
    console: {client_id: interlock-console, client_secret: '${CONSOLE_SECRET}', scopes: [groups]}
`), env)
	if err != nil {
		t.Fatal(err)
	}
	o := f.Auth.OAuth
	if !f.Auth.Configured() || o.Issuer != "https://login.example.com/realms/acme" || o.Claims.Principal != "email" ||
		o.Claims.Tenant != "org" || o.Claims.Groups != "roles" || !slices.Equal(o.Scopes, []string{"mcp:tools"}) ||
		o.TokenProfile != "jwt" || !slices.Equal(o.Console.Scopes, []string{"groups"}) || o.Console.ClientID != "interlock-console" || o.Console.ClientSecret != "s3cr3t" {
		t.Errorf("auth.oauth = %+v, console %+v", o, o.Console)
	}
	if f, err := Parse("p.yaml", []byte("auth:\n  oauth: {issuer: 'http://127.0.0.1:9000'}\n"), env); err != nil || f.Auth.OAuth.JWKSURL != "" {
		t.Errorf("a loopback http issuer: %v", err)
	}

	tests := []struct {
		name, src, want string
	}{
		{"no issuer", "auth:\n  oauth:\n    scopes: [a]\n", "p.yaml:2: auth.oauth needs issuer"},
		{"http issuer elsewhere", "auth:\n  oauth:\n    issuer: http://login.example.com\n", `p.yaml:3: auth.oauth.issuer "http://login.example.com" must be an https:// URL`},
		{"issuer not a URL", "auth:\n  oauth:\n    issuer: login.example.com\n", "p.yaml:3: auth.oauth.issuer"},
		{"http JWKS elsewhere", "auth:\n  oauth:\n    issuer: https://a.example\n    jwks_url: http://a.example/keys\n", "p.yaml:4: auth.oauth.jwks_url"},
		{"audience not a URL", "auth:\n  oauth:\n    issuer: https://a.example\n    audience: gateway\n", `p.yaml:4: auth.oauth.audience "gateway" must be this gateway's resource URL`},
		{"scope with a space", "auth:\n  oauth:\n    issuer: https://a.example\n    scopes:\n      - ok\n      - 'two words'\n", `p.yaml:6: auth.oauth.scopes: "two words" is not a scope`},
		{"empty claim name", "auth:\n  oauth:\n    issuer: https://a.example\n    claims:\n      tenant: ''\n", "p.yaml:5: auth.oauth.claims.tenant is empty"},
		{"console without client", "auth:\n  oauth:\n    issuer: https://a.example\n    console:\n      client_secret: x\n", "p.yaml:4: auth.oauth.console needs client_id"},
		{"secret not set", "auth:\n  oauth:\n    issuer: https://a.example\n    console:\n      client_id: c\n      client_secret: '${NOPE}'\n", "p.yaml:6: auth.oauth.console.client_secret refers to ${NOPE}"},
		{"secret from the sealing keys", "auth:\n  oauth:\n    issuer: https://a.example\n    console: {client_id: c, client_secret: '${INTERLOCK_SECRET}'}\n", "sealing keys stay inside the gateway"},
		{"console scope with a quote", "auth:\n  oauth:\n    issuer: https://a.example\n    console:\n      client_id: c\n      scopes: ['gr\"oups']\n", `p.yaml:6: auth.oauth.console.scopes: "gr\"oups" is not a scope`},
		{"unknown token profile", "auth:\n  oauth:\n    issuer: https://a.example\n    token_profile: lenient\n", `p.yaml:4: auth.oauth.token_profile "lenient": use rfc9068`},
		{"unknown field", "auth:\n  oauth:\n    issuer: https://a.example\n    jwks_uri: https://a.example/k\n", `p.yaml:4: unknown field "jwks_uri"`},
		{"unknown claims field", "auth:\n  oauth:\n    issuer: https://a.example\n    claims: {name: x}\n", `p.yaml:4: unknown field "name"`},
		{"introspection over http elsewhere", introspection("url: http://a.example/introspect"), `p.yaml:5: auth.oauth.introspection.url "http://a.example/introspect" must be an https:// URL`},
		{"introspection without client", "auth:\n  oauth:\n    issuer: https://a.example\n    introspection:\n      client_secret: x\n", "p.yaml:4: auth.oauth.introspection needs client_id"},
		{"introspection without secret", "auth:\n  oauth:\n    issuer: https://a.example\n    introspection:\n      client_id: gw\n", "p.yaml:4: auth.oauth.introspection needs client_secret"},
		{"introspection secret not set", "auth:\n  oauth:\n    issuer: https://a.example\n    introspection:\n      client_secret: '${NOPE}'\n      client_id: gw\n", "p.yaml:5: auth.oauth.introspection.client_secret refers to ${NOPE}"},
		{"introspection secret from the sealing keys", "auth:\n  oauth:\n    issuer: https://a.example\n    introspection: {client_id: gw, client_secret: '${INTERLOCK_SECRET_FILE}'}\n", "sealing keys stay inside the gateway"},
		{"introspection cache not a duration", introspection("cache: soon"), `p.yaml:5: auth.oauth.introspection.cache "soon" must be a duration between 1s and 1h`},
		{"introspection cache too short", introspection("cache: 500ms"), `p.yaml:5: auth.oauth.introspection.cache "500ms"`},
		{"introspection cache too long", introspection("cache: 2h"), `p.yaml:5: auth.oauth.introspection.cache "2h"`},
		{"introspection unknown field", introspection("endpoint: https://a.example/i"), `p.yaml:5: unknown field "endpoint"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse("p.yaml", []byte(tt.src), env)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Parse = %v, want %q", err, tt.want)
			}
		})
	}
}

// introspection is an auth.oauth section whose introspection block has
// line on line 5, then client_id and client_secret.
func introspection(line string) string {
	return "auth:\n  oauth:\n    issuer: https://a.example\n    introspection:\n      " + line +
		"\n      client_id: gw\n      client_secret: s\n"
}

// TestOAuthIntrospectionConfig: the block's values, ${VAR} in the secret,
// the cache time's default; the URL may be left out (it is discovered)
// and may be http on loopback.
func TestOAuthIntrospectionConfig(t *testing.T) {
	env := func(name string) (string, bool) { return "1ntr0", name == "INTROSPECTION_SECRET" }
	f, err := Parse("p.yaml", []byte(`
auth:
  oauth:
    issuer: https://login.example.com
    introspection:
      url: https://login.example.com/oauth2/introspect
      client_id: interlock-gateway
      client_secret: '${INTROSPECTION_SECRET}'
      cache: 10s
`), env)
	if err != nil {
		t.Fatal(err)
	}
	in := f.Auth.OAuth.Introspection
	if in.URL != "https://login.example.com/oauth2/introspect" || in.ClientID != "interlock-gateway" || in.ClientSecret != "1ntr0" || in.CacheFor != 10*time.Second {
		t.Errorf("auth.oauth.introspection = %+v", in)
	}
	for src, wantURL := range map[string]string{
		"auth:\n  oauth:\n    issuer: https://a.example\n    introspection: {client_id: gw, client_secret: s}\n":                                 "",
		"auth:\n  oauth:\n    issuer: https://a.example\n    introspection: {url: 'http://127.0.0.1:9000/i', client_id: gw, client_secret: s}\n": "http://127.0.0.1:9000/i",
	} {
		f, err := Parse("p.yaml", []byte(src), env)
		if err != nil {
			t.Errorf("%s: %v", src, err)
			continue
		}
		if in := f.Auth.OAuth.Introspection; in.URL != wantURL || in.CacheFor != DefaultIntrospectionCache {
			t.Errorf("%s: %+v, want url %q and the default cache", src, in, wantURL)
		}
	}
	if f, err := Parse("p.yaml", []byte("auth:\n  oauth: {issuer: 'https://a.example'}\n"), env); err != nil || f.Auth.OAuth.Introspection != nil {
		t.Errorf("without the block: %v, %+v", err, f.Auth.OAuth.Introspection)
	}
}
