package config

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/interlock-mcp/interlock"
)

func parse(t *testing.T, src string) *File {
	t.Helper()
	f, err := Parse("policy.yaml", []byte(src), noEnv)
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	return f
}

func TestParseErrors(t *testing.T) {
	tests := []struct {
		name string
		src  string
		want []string // each must appear in the first line of one error, in order
	}{
		{"malformed YAML", "rules: [\n", []string{"policy.yaml:2:"}},
		{"unknown top-level field", "default_mode: flag\nrulez: []\n", []string{`policy.yaml:2: unknown field "rulez"`}},
		{"unknown rule field", "rules:\n  - name: a\n    mdoe: flag\n", []string{`policy.yaml:3: unknown field "mdoe"`}},
		{"unknown match field", "rules:\n  - name: a\n    mode: flag\n    match:\n      tool: [x]\n", []string{`policy.yaml:5: unknown field "tool"`}},
		{"wrong type", "max_argument_bytes: lots\n", []string{"policy.yaml:1:"}},
		{"bad CEL", "rules:\n  - name: big\n    mode: deny\n    when: \"args.amount >\"\n", []string{`policy.yaml:4: rule "big": when: Syntax error:`}},
		{"CEL that is not boolean", "rules:\n  - name: num\n    mode: deny\n    when: \"1 + 2\"\n", []string{`policy.yaml:4: rule "num": when must be a boolean`}},
		{"undeclared CEL variable", "rules:\n  - name: v\n    mode: deny\n    when: \"user == 'x'\"\n", []string{`policy.yaml:4: rule "v": when: undeclared reference to 'user'`}},
		{"unknown mode", "rules:\n  - name: m\n    mode: maybe\n", []string{`policy.yaml:3: rule "m": unknown mode "maybe"`}},
		{"missing mode", "rules:\n  - name: m\n", []string{`policy.yaml:2: rule "m": mode is required`}},
		{"missing name", "rules:\n  - mode: deny\n", []string{"policy.yaml:2: rule has no name"}},
		{"duplicate rule", "rules:\n  - {name: a, mode: deny}\n  - {name: a, mode: deny}\n", []string{`policy.yaml:3: rule "a" is already defined on line 2`}},
		{"glob in a list", "rules:\n  - name: g\n    mode: deny\n    match:\n      tools:\n        - ok_*\n        - '['\n", []string{`policy.yaml:7: rule "g": tool glob "["`}},
		{"bad glob", "rules:\n  - name: g\n    mode: deny\n    match: {tools: ['[']}\n", []string{`policy.yaml:4: rule "g": tool glob "[" has a '[' without its ']'`}},
		{"bad template", "rules:\n  - name: s\n    mode: flag\n    summary: '{{.args'\n", []string{`policy.yaml:4: rule "s": summary:`}},
		{"unknown annotation", "rules:\n  - name: h\n    mode: flag\n    annotations: {dangerous: true}\n", []string{`policy.yaml:4: rule "h": unknown annotation "dangerous"`}},
		{"allow as default", "redact: []\ndefault_mode: allow\n", []string{"policy.yaml:2: default_mode: allow would let every unannotated tool run"}},
		{"token as default", "default_mode: token\n", []string{`policy.yaml:1: default_mode "token" is not accepted: use flag or deny`}},
		{"elicit as default", "default_mode: elicit\n", []string{`policy.yaml:1: default_mode "elicit" is not accepted: use flag or deny`}},
		{"unknown default", "default_mode: ask\n", []string{`policy.yaml:1: default_mode "ask" is not accepted`}},
		{"upstream timeout", "upstreams:\n  - name: gh\n    command: [x]\n    timeout: soon\n", []string{`policy.yaml:4: upstream "gh": timeout "soon"`}},
		{"upstream prefix", "upstreams:\n  - name: gh\n    command: [x]\n    prefix: 'a b'\n", []string{`policy.yaml:4: upstream "gh": prefix`}},
		{"upstream url", "upstreams:\n  - name: gh\n    url: ftp://x\n", []string{`policy.yaml:3: upstream "gh": url "ftp://x"`}},
		{"upstream dir with url", "upstreams:\n  - name: gh\n    url: https://x/mcp\n    dir: /tmp\n", []string{`policy.yaml:4: upstream "gh": env, inherit_env and dir apply only to a command`}},
		{"upstream headers with command", "upstreams:\n  - name: gh\n    command: [x]\n    headers:\n      A: b\n", []string{`policy.yaml:4: upstream "gh": headers apply only to a url`}},
		{"match.upstream unknown", "upstreams:\n  - {name: gh, command: [x]}\nrules:\n  - name: r\n    mode: deny\n    match:\n      upstream: hg\n", []string{`policy.yaml:7: rule "r": match.upstream "hg" is not an upstream of this file: use one of gh`}},
		{"ttl", "rules:\n  - name: t\n    mode: token\n    ttl: soon\n", []string{`policy.yaml:4: rule "t": ttl "soon"`}},
		{"preview argument", "rules:\n  - name: p\n    mode: token\n    preview:\n      tool: get\n      args:\n        id: 'args.'\n", []string{`policy.yaml:7: rule "p": preview argument id: Syntax error`}},
		{"preview without tool", "rules:\n  - name: p\n    mode: token\n    preview:\n      args: {id: args.id}\n", []string{`policy.yaml:4: rule "p": preview needs tool`}},
		{"form key outside elicit", "rules:\n  - name: f\n    mode: flag\n    confirm: sure\n    type_back: x\n", []string{`policy.yaml:4: rule "f": confirm applies only to mode elicit`, `policy.yaml:5: rule "f": type_back applies only to mode elicit`}},
		{"require_passkey outside approval", "rules:\n  - name: p\n    mode: flag\n    require_passkey: true\n", []string{`policy.yaml:4: rule "p": require_passkey applies only to mode approval`}},
		{"max_pending outside approval", "rules:\n  - name: p\n    mode: token\n    max_pending: 5\n", []string{`policy.yaml:4: rule "p": max_pending applies only to mode approval`}},
		{"max_pending below one", "rules:\n  - name: p\n    mode: approval\n    approvers: [bob]\n    max_pending: -1\n", []string{`policy.yaml:5: rule "p": max_pending must be between 1 and 10000`}},
		{"choice without options", "rules:\n  - name: c\n    mode: elicit\n    choices:\n      env: {title: x}\n", []string{`policy.yaml:5: rule "c": choice env needs options`}},
		{"fallback", "rules:\n  - name: e\n    mode: elicit\n    fallback: allow\n", []string{`policy.yaml:4: rule "e": fallback must be token or deny`}},
		{"upstream without command", "upstreams:\n  - name: gh\n", []string{`policy.yaml:2: upstream "gh" has no command`}},
		{"duplicate upstream", "upstreams:\n  - {name: a, command: [x]}\n  - {name: a, command: [y]}\n", []string{`policy.yaml:3: upstream "a" is already defined on line 2`}},
		{"unset env var", "upstreams:\n  - name: gh\n    command: [gh-mcp]\n    env: {GITHUB_TOKEN: '${NOPE}'}\n", []string{`policy.yaml:4: upstream "gh": env GITHUB_TOKEN refers to ${NOPE}, which is not set`}},
		{"bad key hash", "auth:\n  keys:\n    - {sha256: abc, principal: ci}\n", []string{"policy.yaml:3: auth key: sha256 must be 64 hex digits"}},
		{"bad key hash on its own line", "auth:\n  keys:\n    - principal: ci\n      sha256: abc\n", []string{"policy.yaml:4: auth key: sha256 must be 64 hex digits"}},
		{"key without principal", "auth:\n  keys:\n    - sha256: " + strings.Repeat("a", 64) + "\n", []string{"policy.yaml:3: auth key: principal is required"}},
		{"unset variable in a store URL", "store:\n  redis: 'redis://:${NOPE}@127.0.0.1:6379/0'\n", []string{"policy.yaml:2: store.redis refers to ${NOPE}, which is not set"}},
		{"the sealing keys in a header", "upstreams:\n  - name: a\n    url: https://x/mcp\n    headers: {Authorization: 'Bearer ${INTERLOCK_SECRET}'}\n", []string{`policy.yaml:4: upstream "a": headers Authorization refers to ${INTERLOCK_SECRET}: the sealing keys stay inside the gateway`}},
		{"the sealing keys in a store URL", "store: {redis: 'redis://:${INTERLOCK_SECRET}@h:6379'}\n", []string{"policy.yaml:1: store.redis refers to ${INTERLOCK_SECRET}"}},
		{"a child given the sealing keys", "upstreams:\n  - name: a\n    command: [x]\n    env: {INTERLOCK_SECRET: abc}\n", []string{`policy.yaml:4: upstream "a": env may not set INTERLOCK_SECRET`}},
		{"a child given their file", "upstreams:\n  - name: a\n    command: [x]\n    env: {INTERLOCK_SECRET_FILE: /k}\n", []string{`policy.yaml:4: upstream "a": env may not set INTERLOCK_SECRET_FILE`}},
		{"inherit_env on a URL", "upstreams:\n  - {name: a, url: 'https://x/mcp', inherit_env: true}\n", []string{"env, inherit_env and dir apply only to a command"}},
		{"trust_hints not a boolean", "upstreams:\n  - name: a\n    command: [x]\n    trust_hints: maybe\n", []string{"policy.yaml:4:"}},
		{"unknown http field", "http:\n  max_sesions: 3\n", []string{`policy.yaml:2: unknown field "max_sesions"`}},
		{"idle timeout too short", "http:\n  max_connections: 10\n  session_idle_timeout: 5s\n", []string{`policy.yaml:3: http.session_idle_timeout "5s" must be a duration between 1m0s and 24h0m0s`}},
		{"not a duration", "http:\n  read_timeout: soon\n", []string{`policy.yaml:2: http.read_timeout "soon" must be a duration`}},
		{"no connections", "http:\n  max_connections: 0\n", []string{"policy.yaml:2: http.max_connections must be between 1 and 1000000"}},
		{"negative session cap", "http:\n  max_sessions_per_principal: -1\n", []string{"policy.yaml:2: http.max_sessions_per_principal must be between 1"}},
		{"unknown audit.allowed_calls", "audit:\n  allowed_calls: later\n", []string{`policy.yaml:2: audit.allowed_calls "later" must be committed (the default) or queued`}},
		{"several problems at once", "rules:\n  - name: a\n    mode: maybe\n  - name: b\n    mode: deny\n    when: '('\n", []string{`policy.yaml:3: rule "a"`, `policy.yaml:6: rule "b"`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse("policy.yaml", []byte(tt.src), noEnv)
			if err == nil {
				t.Fatal("Parse succeeded")
			}
			var errs LoadErrors
			if !errors.As(err, &errs) {
				t.Fatalf("error %v is not LoadErrors", err)
			}
			if len(errs) != len(tt.want) {
				t.Fatalf("got %d errors, want %d:\n%v", len(errs), len(tt.want), err)
			}
			for i, w := range tt.want {
				first, _, _ := strings.Cut(errs[i].Error(), "\n")
				if !strings.Contains(first, w) {
					t.Errorf("error %q does not contain %q", first, w)
				}
			}
		})
	}
}

// TestAFileThatSetsNothing: a file that is empty, holds only whitespace or
// comments, or is an empty mapping is refused at its first line with what
// to write, not taken for a configuration without rules; one setting makes
// a configuration. A shadow policy's file is held to the same.
func TestAFileThatSetsNothing(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "candidate.yaml"), []byte("\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, src string
		want      string // "" when the file loads
	}{
		{"empty", "", "p.yaml:1: the file is empty: a configuration needs at least the upstreams interlock fronts"},
		{"whitespace", " \n\t\r\n", "p.yaml:1: the file is empty:"},
		{"a byte-order mark", "\ufeff\n", "p.yaml:1: the file is empty:"},
		{"comments", "# rules to come\n\n   # upstreams too\n", "p.yaml:1: the file holds only comments:"},
		{"an empty mapping", "{}\n", "p.yaml:1: the file sets nothing:"},
		{"an empty JSON object", "{\n}\n", "p.yaml:1: the file sets nothing:"},
		{"a document of nothing", "--- # later\n", "p.yaml:1: the file sets nothing:"},
		{"an empty shadow policy", "shadow: candidate.yaml\n", "candidate.yaml:1: shadow policy: the file is empty: a shadow policy holds the rules"},
		{"one setting", "default_mode: deny\n", ""},
		{"a client's file without servers", `{"mcpServers": {}}`, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse(filepath.Join(dir, "p.yaml"), []byte(tt.src), func(string) (string, bool) { return "", false })
			if tt.want == "" {
				if err != nil {
					t.Errorf("Parse = %v", err)
				}
				return
			}
			var errs LoadErrors
			if !errors.As(err, &errs) || len(errs) != 1 || !strings.Contains(errs[0].Error(), tt.want) {
				t.Errorf("Parse = %v, want one problem with %q", err, tt.want)
			}
		})
	}
}

func TestIsSecretAndEnv(t *testing.T) {
	f, err := Parse("p.yaml", []byte("redact: [card_number]\nupstreams:\n  - name: gh\n    command: [gh]\n    env: {TOKEN: 'Bearer ${GH}'}\n"),
		func(k string) (string, bool) { return map[string]string{"GH": "s3cret"}[k], k == "GH" })
	if err != nil {
		t.Fatal(err)
	}
	if !f.Policy.IsSecret("card_number") || !f.Policy.IsSecret("api_key") || f.Policy.IsSecret("id") {
		t.Error("IsSecret must cover the defaults and the file's names, and nothing else")
	}
	if got := f.Upstreams[0].Env["TOKEN"]; got != "Bearer s3cret" {
		t.Errorf("env = %q", got)
	}
	if f.Policy.MaxArgumentBytes != interlock.DefaultMaxArgumentBytes || f.Policy.DefaultMode != interlock.ModeFlag {
		t.Errorf("defaults not applied: %+v", f)
	}
}

func TestTokenRulesWithPreview(t *testing.T) {
	f := parse(t, `
store:
  redis: redis://127.0.0.1:6379/0
  prefix: "test:"
rules:
  - name: plan-changes
    match: {tools: [upgrade_plan]}
    mode: token
    ttl: 90s
    preview:
      tool: get_customer
      args: {id: args.customer_id}
    summary: "Upgrade {{.preview.name}} from {{.preview.plan}} to {{.args.to}}."
`)
	if f.Store.Redis != "redis://127.0.0.1:6379/0" || f.Store.Prefix != "test:" {
		t.Errorf("store = %+v", f.Store)
	}
	d, err := f.Policy.Decide(context.Background(), &interlock.Call{Tool: "upgrade_plan", Hints: interlock.HintsOf(nil),
		Args: map[string]any{"customer_id": "acct_9931", "to": "scale"}})
	if err != nil {
		t.Fatal(err)
	}
	if d.Mode != interlock.ModeToken || d.TTL != 90*time.Second {
		t.Errorf("decision = %+v", d)
	}
	if d.Preview == nil || d.Preview.Tool != "get_customer" || d.Preview.Args["id"] != "acct_9931" {
		t.Fatalf("preview = %+v", d.Preview)
	}
	got := d.Summarize(map[string]any{"name": "Northwind Traders", "plan": "pro"})
	if got != "Upgrade Northwind Traders from pro to scale." {
		t.Errorf("summary = %q", got)
	}
	if !slices.Contains(f.Policy.ToolModes("upgrade_plan", "", interlock.HintsOf(nil)), interlock.ModeToken) {
		t.Error("ToolModes misses token")
	}
}

func TestTokenRuleErrors(t *testing.T) {
	tests := []struct{ src, want string }{
		{"rules:\n  - {name: a, mode: token, ttl: soon}\n", `rule "a": ttl "soon" is not a duration`},
		{"rules:\n  - {name: a, mode: token, ttl: 100h}\n", `rule "a": ttl 100h must be between 1s and 24h`},
		{"rules:\n  - {name: a, mode: flag, ttl: 90s}\n", `rule "a": ttl applies only to mode token`},
		{"rules:\n  - {name: a, mode: token, preview: {args: {id: args.id}}}\n", `rule "a": preview needs tool`},
		{"rules:\n  - {name: a, mode: token, preview: {tool: t, args: {id: 'args.'}}}\n", `rule "a": preview argument id:`},
		{"store: {redis: 'http://x'}\n", "store.redis must be a redis:// or rediss:// URL"},
	}
	for _, tt := range tests {
		_, err := Parse("p.yaml", []byte(tt.src), noEnv)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("Parse(%q) = %v, want %q", tt.src, err, tt.want)
		}
	}
}

func TestUpstreamTimeoutConfig(t *testing.T) {
	f := parse(t, "upstreams:\n  - {name: a, command: [x], timeout: 30s}\n  - {name: b, command: [y]}\n")
	if f.Upstreams[0].CallTimeout != 30*time.Second || f.Upstreams[1].CallTimeout != DefaultCallTimeout {
		t.Errorf("timeouts = %v, %v", f.Upstreams[0].CallTimeout, f.Upstreams[1].CallTimeout)
	}
	if _, err := Parse("p.yaml", []byte("upstreams:\n  - {name: a, command: [x], timeout: forever}\n"), noEnv); err == nil ||
		!strings.Contains(err.Error(), `p.yaml:2: upstream "a": timeout "forever" must be a duration`) {
		t.Errorf("Parse = %v", err)
	}
}

func TestHTTPConfig(t *testing.T) {
	tests := []struct {
		name string
		src  string
		want HTTP
	}{
		{"defaults", "rules: []\n", HTTP{
			SessionIdleTimeout: DefaultSessionIdleTimeout, MaxSessionsPerPrincipal: DefaultMaxSessionsPerPrincipal,
			MaxConnections: DefaultMaxConnections, ReadHeaderTimeout: DefaultReadHeaderTimeout, ReadTimeout: DefaultReadTimeout,
			WriteTimeout: DefaultWriteTimeout, IdleTimeout: DefaultIdleTimeout,
		}},
		{"every key", `
http:
  session_idle_timeout: 5m
  max_sessions_per_principal: 4
  max_connections: 100
  read_header_timeout: 2s
  read_timeout: 20s
  write_timeout: 1m
  idle_timeout: 30s
`, HTTP{
			SessionIdleTimeout: 5 * time.Minute, MaxSessionsPerPrincipal: 4, MaxConnections: 100,
			ReadHeaderTimeout: 2 * time.Second, ReadTimeout: 20 * time.Second, WriteTimeout: time.Minute, IdleTimeout: 30 * time.Second,
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f, err := Parse("p.yaml", []byte(tt.src), noEnv)
			if err != nil {
				t.Fatal(err)
			}
			got := f.HTTP
			got.durations, got.lines, got.line = nil, nil, 0
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("http = %+v, want %+v", got, tt.want)
			}
		})
	}
}

func TestAuditAllowedCalls(t *testing.T) {
	tests := []struct {
		src    string
		queued bool
	}{
		{"rules: []\n", false},
		{"audit: {allowed_calls: committed}\n", false},
		{"audit: {allowed_calls: queued}\n", true},
	}
	for _, tt := range tests {
		t.Run(tt.src, func(t *testing.T) {
			f, err := Parse("p.yaml", []byte(tt.src), noEnv)
			if err != nil {
				t.Fatal(err)
			}
			if got := f.Audit.QueuesAllowed(); got != tt.queued {
				t.Errorf("QueuesAllowed() = %v, want %v", got, tt.queued)
			}
		})
	}
}

func TestStoreURLExpandsVariables(t *testing.T) {
	f, err := Parse("p.yaml", []byte("store:\n  redis: 'redis://:${REDIS_PASSWORD}@cache:6379/0'\n"),
		func(k string) (string, bool) { return "s3cret", k == "REDIS_PASSWORD" })
	if err != nil {
		t.Fatal(err)
	}
	if f.Store.Redis != "redis://:s3cret@cache:6379/0" {
		t.Errorf("store.redis = %q", f.Store.Redis)
	}
}

func TestTenantAndBudgetErrors(t *testing.T) {
	const head = "upstreams:\n  - {name: billing, command: [x]}\nrules:\n  - {name: refunds, mode: token}\n  - {name: reads, mode: allow}\n"
	tests := []struct {
		name string
		src  string
		want []string
	}{
		{"unknown tenant field", "tenants:\n  - name: acme\n    tool: [x]\n", []string{`policy.yaml:8: unknown field "tool"`}},
		{"tenant without a name", "tenants:\n  - tools: [x]\n", []string{"policy.yaml:7: tenant has no name"}},
		{"duplicate tenant", "tenants:\n  - {name: acme}\n  - {name: acme}\n", []string{`policy.yaml:8: tenant "acme" is already defined on line 7`}},
		{"unknown upstream", "tenants:\n  - name: acme\n    upstreams: [billing, bilings]\n", []string{`policy.yaml:8: tenant "acme": upstream "bilings" is not an upstream of this file: use one of billing`}},
		{"bad glob", "tenants:\n  - name: acme\n    tools:\n      - ok\n      - '[x'\n", []string{`policy.yaml:10: tenant "acme": tool glob "[x" has a '[' without its ']'`}},
		{"empty tenant", "tenants:\n  -\n", []string{`policy.yaml:6: tenants has an empty entry`}},
		{"overlay rule reuses a shared name", "tenants:\n  - name: acme\n    rules:\n      - {name: refunds, mode: flag}\n", []string{`policy.yaml:9: tenant "acme": rule "refunds" is already a shared rule, on line 4`}},
		{"duplicate overlay rule", "tenants:\n  - name: acme\n    rules:\n      - {name: a, mode: flag}\n      - {name: a, mode: deny}\n", []string{`policy.yaml:10: tenant "acme": rule "a" is already defined on line 9`}},
		{"overlay rule is compiled", "tenants:\n  - name: acme\n    rules:\n      - name: a\n        mode: flag\n        when: \"args.x >\"\n", []string{`policy.yaml:11: rule "a": when: Syntax error`}},
		{"overlay rule with annotations", "tenants:\n  - name: acme\n    rules:\n      - name: a\n        mode: flag\n        annotations: {readOnlyHint: true}\n", []string{`policy.yaml:11: tenant "acme": rule "a": annotations override a tool's hints for every tenant`}},
		{"overlay rule with an unknown upstream", "tenants:\n  - name: acme\n    rules:\n      - name: a\n        mode: flag\n        match: {upstream: ops}\n", []string{`policy.yaml:11: rule "a": match.upstream "ops" is not an upstream`}},
		{"budget without per", "budgets:\n  - {name: b, limit: 1, window: 1h}\n", []string{`policy.yaml:7: budget "b": per is required`}},
		{"budget per", "budgets:\n  - name: b\n    per: session\n    limit: 1\n    window: 1h\n", []string{`policy.yaml:8: budget "b": per "session" must be principal or tenant`}},
		{"budget limit", "budgets:\n  - name: b\n    per: tenant\n    limit: 0\n    window: 1h\n", []string{`policy.yaml:9: budget "b": limit must be between 1 and 1000000`}},
		{"budget window", "budgets:\n  - name: b\n    per: tenant\n    limit: 3\n    window: forever\n", []string{`policy.yaml:10: budget "b": window "forever" must be a duration between 1s and 720h (30 days)`}},
		{"budget without a window", "budgets:\n  - {name: b, per: tenant, limit: 3}\n", []string{`policy.yaml:7: budget "b": window ""`}},
		{"budget unknown rule", "budgets:\n  - name: b\n    per: tenant\n    limit: 3\n    window: 1h\n    rules: [refunds, refund]\n", []string{`policy.yaml:11: budget "b": rule "refund" is not a rule of this file`}},
		{"budget on an allow rule", "budgets:\n  - name: b\n    per: tenant\n    limit: 3\n    window: 1h\n    rules:\n      - reads\n", []string{`policy.yaml:12: budget "b": rule "reads" has mode allow, whose calls never count`}},
		{"duplicate budget", "budgets:\n  - {name: b, per: tenant, limit: 3, window: 1h}\n  - {name: b, per: tenant, limit: 3, window: 1h}\n", []string{`policy.yaml:8: budget "b" is already defined on line 7`}},
		{"unknown budget field", "budgets:\n  - {name: b, per: tenant, limit: 3, window: 1h, rule: [x]}\n", []string{`policy.yaml:7: unknown field "rule"`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse("policy.yaml", []byte(head+tt.src), noEnv)
			if err == nil {
				t.Fatal("Parse accepted the file")
			}
			got := err.Error()
			for _, w := range tt.want {
				if !strings.Contains(got, w) {
					t.Errorf("errors:\n%s\nwant one containing %q", got, w)
				}
			}
		})
	}
}

// TestShadowDecidesWithTheLiveTenants: a shadow policy with the same rules
// as the live config makes the same decisions for every tenant, the calls
// a tenant may not make included.
func TestShadowDecidesWithTheLiveTenants(t *testing.T) {
	dir := t.TempDir()
	shared := tenantPolicy[strings.Index(tenantPolicy, "rules:"):strings.Index(tenantPolicy, "tenants:")]
	if err := os.WriteFile(filepath.Join(dir, "shadow.yaml"), []byte(shared), 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := Parse(filepath.Join(dir, "live.yaml"), []byte(tenantPolicy+"shadow: shadow.yaml\n"), noEnv)
	if err != nil {
		t.Fatal(err)
	}
	destructive := interlock.HintsOf(nil)
	for _, c := range []interlock.Call{
		{Tool: "restart", Upstream: "ops", Hints: destructive, Identity: interlock.Identity{Tenant: "acme"}},
		{Tool: "billing_delete_customer", Upstream: "billing", Hints: destructive, Identity: interlock.Identity{Tenant: "acme"}},
		{Tool: "billing_delete_customer", Upstream: "billing", Hints: destructive, Identity: interlock.Identity{Tenant: "globex"}},
	} {
		t.Run(c.Tenant+"/"+c.Tool, func(t *testing.T) {
			live, err := f.Policy.Decide(context.Background(), &c)
			if err != nil {
				t.Fatal(err)
			}
			shadow, err := f.ShadowPolicy.Policy.Decide(context.Background(), &c)
			if err != nil {
				t.Fatal(err)
			}
			if live.Rule != shadow.Rule || live.Mode != shadow.Mode {
				t.Errorf("live %q/%s, shadow %q/%s", live.Rule, live.Mode, shadow.Rule, shadow.Mode)
			}
		})
	}
}

// noEnv is an environment with no variables set.
func noEnv(string) (string, bool) { return "", false }

// tenantPolicy is policy's policy of tenants with the upstreams it names.
var tenantPolicy = func() string {
	b, err := os.ReadFile("../policy/testdata/tenants.yaml")
	if err != nil {
		panic(err)
	}
	return `
upstreams:
  - {name: billing, command: [x], prefix: "billing_"}
  - {name: ops, command: [y]}
` + string(b)
}()
