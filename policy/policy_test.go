package policy

import (
	"context"
	"errors"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/interlock-mcp/interlock"
)

func parse(t *testing.T, src string) *File {
	t.Helper()
	f, err := Parse("policy.yaml", []byte(src), func(string) (string, bool) { return "", false })
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
		{"several problems at once", "rules:\n  - name: a\n    mode: maybe\n  - name: b\n    mode: deny\n    when: '('\n", []string{`policy.yaml:3: rule "a"`, `policy.yaml:6: rule "b"`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse("policy.yaml", []byte(tt.src), func(string) (string, bool) { return "", false })
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

const testPolicy = `
default_mode: flag
redact: [card_number]
rules:
  - name: no-prod-deletes
    match: {tools: ["delete_*"], upstream: prod}
    mode: deny
  - name: big-refunds
    match: {tools: [refund_invoice]}
    when: "args.amount > 1000"
    mode: deny
  - name: refunds
    match: {tools: [refund_invoice]}
    mode: flag
    summary: "Refund ${{.args.amount}} on {{.args.invoice_id}}"
  - name: admins-skip-reminder-confirmation
    match: {tools: [send_reminder]}
    when: "principal == 'alice' && tenant == 'acme'"
    mode: allow
  - name: closed-world-writes
    match: {annotations: {openWorldHint: false, readOnlyHint: false}}
    mode: flag
    summary: "{{.tool}} changes only this system"
  - name: relabel-search
    match: {tools: [search_*]}
    annotations: {readOnlyHint: true}
    mode: allow
`

func TestDecide(t *testing.T) {
	f := parse(t, testPolicy)
	unannotated := interlock.HintsOf(nil)
	readOnly := interlock.Hints{ReadOnly: true}
	closed := interlock.Hints{Destructive: true}
	tests := []struct {
		name        string
		call        interlock.Call
		wantRule    string
		wantMode    interlock.Mode
		wantSummary string
	}{
		{"upstream-scoped deny", interlock.Call{Tool: "delete_customer", Upstream: "prod", Hints: unannotated}, "no-prod-deletes", interlock.ModeDeny, ""},
		{"same tool elsewhere falls to default", interlock.Call{Tool: "delete_customer", Upstream: "staging", Hints: unannotated}, "", interlock.ModeFlag, ""},
		{"CEL on numbers: large", interlock.Call{Tool: "refund_invoice", Hints: unannotated, Args: map[string]any{"amount": 2000.0, "invoice_id": "inv_1"}}, "big-refunds", interlock.ModeDeny, ""},
		{"CEL on numbers: small", interlock.Call{Tool: "refund_invoice", Hints: unannotated, Args: map[string]any{"amount": 20.0, "invoice_id": "inv_1"}}, "refunds", interlock.ModeFlag, "Refund $20 on inv_1"},
		{"missing argument never loosens a deny", interlock.Call{Tool: "refund_invoice", Hints: unannotated, Args: map[string]any{}}, "big-refunds", interlock.ModeDeny, ""},
		{"CEL on identity: match", interlock.Call{Tool: "send_reminder", Hints: unannotated, Identity: interlock.Identity{Principal: "alice", Tenant: "acme"}}, "admins-skip-reminder-confirmation", interlock.ModeAllow, ""},
		{"CEL on identity: other tenant", interlock.Call{Tool: "send_reminder", Hints: unannotated, Identity: interlock.Identity{Principal: "alice", Tenant: "other"}}, "", interlock.ModeFlag, ""},
		{"annotation match", interlock.Call{Tool: "set_flag", Hints: closed}, "closed-world-writes", interlock.ModeFlag, "set_flag changes only this system"},
		{"read-only default", interlock.Call{Tool: "list_things", Hints: readOnly}, "", interlock.ModeAllow, ""},
		{"unannotated default", interlock.Call{Tool: "mystery", Hints: unannotated}, "", interlock.ModeFlag, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d, err := f.Decide(context.Background(), &tt.call)
			if err != nil {
				t.Fatal(err)
			}
			if d.Rule != tt.wantRule || d.Mode != tt.wantMode || summary(d) != tt.wantSummary {
				t.Errorf("Decide = %+v (summary %q), want rule %q mode %s summary %q", d, summary(d), tt.wantRule, tt.wantMode, tt.wantSummary)
			}
		})
	}
}

func TestAllowRuleWithFailingConditionDoesNotAllow(t *testing.T) {
	f := parse(t, `
rules:
  - name: cheap-is-fine
    match: {tools: [refund_invoice]}
    when: "args.amount < 10"
    mode: allow
`)
	d, _ := f.Decide(context.Background(), &interlock.Call{Tool: "refund_invoice", Hints: interlock.HintsOf(nil), Args: map[string]any{}})
	if d.Mode != interlock.ModeFlag {
		t.Errorf("mode = %s: a condition that cannot be evaluated must not allow", d.Mode)
	}
}

func TestSummaryWithMissingArgumentFallsBack(t *testing.T) {
	f := parse(t, testPolicy)
	d, _ := f.Decide(context.Background(), &interlock.Call{Tool: "refund_invoice", Hints: interlock.HintsOf(nil), Args: map[string]any{"amount": 5.0}})
	if d.Rule != "refunds" || summary(d) != "" {
		t.Errorf("Decide = %+v: want rule refunds and no half-filled summary", d)
	}
}

func TestHintsAndToolModes(t *testing.T) {
	f := parse(t, testPolicy)
	unannotated := interlock.HintsOf(nil)
	if h := f.Hints("search_issues", "gh", unannotated); !h.ReadOnly {
		t.Errorf("override not applied: %+v", h)
	}
	if h := f.Hints("create_issue", "gh", unannotated); h != unannotated {
		t.Errorf("hints changed without a rule: %+v", h)
	}
	tests := []struct {
		tool, upstream string
		hints          interlock.Hints
		want           []interlock.Mode
	}{
		{"refund_invoice", "", unannotated, []interlock.Mode{interlock.ModeDeny, interlock.ModeFlag}},
		{"send_reminder", "", unannotated, []interlock.Mode{interlock.ModeAllow, interlock.ModeFlag}},
		{"delete_customer", "prod", unannotated, []interlock.Mode{interlock.ModeDeny}},
		{"search_issues", "gh", f.Hints("search_issues", "gh", unannotated), []interlock.Mode{interlock.ModeAllow}},
		{"list_things", "", interlock.Hints{ReadOnly: true}, []interlock.Mode{interlock.ModeAllow}},
	}
	for _, tt := range tests {
		if got := f.ToolModes(tt.tool, tt.upstream, tt.hints); !slices.Equal(got, tt.want) {
			t.Errorf("ToolModes(%s) = %v, want %v", tt.tool, got, tt.want)
		}
	}
}

func TestIsSecretAndEnv(t *testing.T) {
	f, err := Parse("p.yaml", []byte("redact: [card_number]\nupstreams:\n  - name: gh\n    command: [gh]\n    env: {TOKEN: 'Bearer ${GH}'}\n"),
		func(k string) (string, bool) { return map[string]string{"GH": "s3cret"}[k], k == "GH" })
	if err != nil {
		t.Fatal(err)
	}
	if !f.IsSecret("card_number") || !f.IsSecret("api_key") || f.IsSecret("id") {
		t.Error("IsSecret must cover the defaults and the file's names, and nothing else")
	}
	if got := f.Upstreams[0].Env["TOKEN"]; got != "Bearer s3cret" {
		t.Errorf("env = %q", got)
	}
	if f.MaxArgumentBytes != interlock.DefaultMaxArgumentBytes || f.DefaultMode != interlock.ModeFlag {
		t.Errorf("defaults not applied: %+v", f)
	}
}

func summary(d interlock.Decision) string {
	if d.Summarize == nil {
		return ""
	}
	return d.Summarize(nil)
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
	d, err := f.Decide(context.Background(), &interlock.Call{Tool: "upgrade_plan", Hints: interlock.HintsOf(nil),
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
	if !slices.Contains(f.ToolModes("upgrade_plan", "", interlock.HintsOf(nil)), interlock.ModeToken) {
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
		_, err := Parse("p.yaml", []byte(tt.src), func(string) (string, bool) { return "", false })
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("Parse(%q) = %v, want %q", tt.src, err, tt.want)
		}
	}
}

func TestElicitRules(t *testing.T) {
	f := parse(t, `
rules:
  - name: deletes
    match: {tools: [delete_customer]}
    mode: elicit
    fallback: deny
    timeout: 2m
    confirm: "I understand"
    type_back: "{{.args.id}}"
  - name: promote
    match: {tools: [promote_release]}
    mode: elicit
    choices:
      environment: {title: Target environment, options: [staging, production]}
`)
	d, err := f.Decide(context.Background(), &interlock.Call{Tool: "delete_customer", Hints: interlock.HintsOf(nil), Args: map[string]any{"id": "acct_9931"}})
	if err != nil {
		t.Fatal(err)
	}
	if d.Mode != interlock.ModeElicit || d.Fallback != interlock.ModeDeny || d.Timeout != 2*time.Minute ||
		d.Form.Confirm != "I understand" || d.Form.TypeBack != "acct_9931" {
		t.Errorf("decision = %+v", d)
	}
	if _, err := f.Decide(context.Background(), &interlock.Call{Tool: "delete_customer", Hints: interlock.HintsOf(nil), Args: map[string]any{}}); err == nil {
		t.Error("a type_back that cannot be filled must not decide")
	}
	d, _ = f.Decide(context.Background(), &interlock.Call{Tool: "promote_release", Hints: interlock.HintsOf(nil), Args: map[string]any{"service": "web"}})
	if len(d.Form.Choices) != 1 || d.Form.Choices[0].Arg != "environment" || len(d.Form.Choices[0].Options) != 2 {
		t.Errorf("choices = %+v", d.Form.Choices)
	}
	if got := f.HumanArgs("promote_release", "", interlock.HintsOf(nil)); !slices.Equal(got, []string{"environment"}) {
		t.Errorf("HumanArgs = %v", got)
	}
	if got := f.ToolModes("promote_release", "", interlock.HintsOf(nil)); !slices.Equal(got, []interlock.Mode{interlock.ModeElicit, interlock.ModeToken}) {
		t.Errorf("ToolModes = %v: the fallback belongs in it", got)
	}
}

func TestElicitRuleErrors(t *testing.T) {
	tests := []struct{ src, want string }{
		{"rules:\n  - {name: a, mode: elicit, fallback: allow}\n", `rule "a": fallback must be token or deny`},
		{"rules:\n  - {name: a, mode: flag, type_back: x}\n", `rule "a": type_back applies only to mode elicit`},
		{"rules:\n  - {name: a, mode: elicit, timeout: later}\n", `rule "a": timeout "later" is not a duration`},
		{"rules:\n  - {name: a, mode: elicit, type_back: '{{.args.password}}'}\n", `rule "a": type_back names the secret argument password`},
		{"rules:\n  - {name: a, mode: elicit, type_back: '{{index .args \"password\"}}'}\n", `rule "a": type_back names the secret argument password`},
		{"rules:\n  - {name: a, mode: elicit, type_back: '{{with .args}}{{.api_key}}{{end}}'}\n", `rule "a": type_back names the secret argument api_key`},
		{"rules:\n  - {name: a, mode: elicit, type_back: '{{$a := .args}}{{$a.githubToken}}'}\n", `rule "a": type_back names the secret argument githubToken`},
		{"rules:\n  - {name: a, mode: elicit, type_back: '{{if .args.id}}{{printf \"%s\" (index .args \"Client-Secret\")}}{{end}}'}\n", `rule "a": type_back names the secret argument Client-Secret`},
		{"redact: [pin]\nrules:\n  - {name: a, mode: elicit, type_back: '{{.args.pin}}'}\n", `rule "a": type_back names the secret argument pin`},
		{"redact: [pin]\nrules:\n  - {name: a, mode: elicit, choices: {pin: {options: [x]}}}\n", `rule "a": choice pin is a secret argument`},
		{"rules:\n  - {name: a, mode: elicit, choices: {api_key: {options: [x]}}}\n", `rule "a": choice api_key is a secret argument`},
		{"rules:\n  - {name: a, mode: elicit, choices: {env: {title: x}}}\n", `rule "a": choice env needs options`},
		{"rules:\n  - {name: a, mode: elicit, type_back: '{{.args'}\n", `rule "a": type_back:`},
	}
	for _, tt := range tests {
		_, err := Parse("p.yaml", []byte(tt.src), func(string) (string, bool) { return "", false })
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
	if _, err := Parse("p.yaml", []byte("upstreams:\n  - {name: a, command: [x], timeout: forever}\n"), func(string) (string, bool) { return "", false }); err == nil ||
		!strings.Contains(err.Error(), `p.yaml:2: upstream "a": timeout "forever" must be a duration`) {
		t.Errorf("Parse = %v", err)
	}
}

func TestCELErrorShowsWhereAndWhat(t *testing.T) {
	tests := []struct {
		name string
		when string
		want string
	}{
		{"syntax", "args.amount >", `policy.yaml:4: rule "c": when: Syntax error: mismatched input '<EOF>'`},
		{"undeclared", "amount > 10", `policy.yaml:4: rule "c": when: undeclared reference to 'amount'`},
		{"second line", "tool == 'x' &&\n  user == 'y'", `policy.yaml:4: rule "c": when: undeclared reference to 'user'`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			src := "rules:\n  - name: c\n    mode: deny\n    when: " + strconv.Quote(tt.when) + "\n"
			_, err := Parse("policy.yaml", []byte(src), func(string) (string, bool) { return "", false })
			var errs LoadErrors
			if !errors.As(err, &errs) || len(errs) != 1 {
				t.Fatalf("Parse = %v, want one LoadError", err)
			}
			got := strings.Split(errs[0].Error(), "\n")
			if !strings.HasPrefix(got[0], tt.want) {
				t.Errorf("first line %q, want prefix %q", got[0], tt.want)
			}
			if len(got) != 4 {
				t.Fatalf("got %d lines, want message, expression, caret, vocabulary:\n%s", len(got), errs[0])
			}
			expr, caret := strings.TrimPrefix(got[1], "    "), strings.TrimPrefix(got[2], "    ")
			if !strings.Contains(tt.when, expr) {
				t.Errorf("expression line %q is not a line of %q", expr, tt.when)
			}
			col := strings.Index(caret, "^")
			if col < 0 || strings.TrimSpace(caret) != "^" {
				t.Fatalf("caret line %q", caret)
			}
			if rest := expr[min(col, len(expr)):]; tt.name != "syntax" && !strings.HasPrefix(rest, "amount") && !strings.HasPrefix(rest, "user") {
				t.Errorf("caret points at %q", rest)
			}
			if !strings.Contains(got[3], "tool, upstream, args, principal, tenant") || !strings.Contains(got[3], "isUnder(path, dir)") {
				t.Errorf("vocabulary line %q", got[3])
			}
		})
	}
}

func TestHTTPConfig(t *testing.T) {
	tests := []struct {
		name string
		src  string
		want HTTP
	}{
		{"defaults", "", HTTP{
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
			f, err := Parse("p.yaml", []byte(tt.src), func(string) (string, bool) { return "", false })
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

func TestRequirePasskeyReachesTheDecision(t *testing.T) {
	f := parse(t, "rules:\n"+
		"  - {name: signed, mode: approval, approvers: [bob], require_passkey: true, match: {tools: [wire_money]}}\n"+
		"  - {name: plain, mode: approval, approvers: [bob], match: {tools: [send_reminder]}}\n")
	tests := []struct {
		tool string
		want bool
	}{
		{"wire_money", true},
		{"send_reminder", false},
	}
	for _, tt := range tests {
		t.Run(tt.tool, func(t *testing.T) {
			d, err := f.Decide(context.Background(), &interlock.Call{Tool: tt.tool, Hints: interlock.HintsOf(nil)})
			if err != nil {
				t.Fatal(err)
			}
			if d.Mode != interlock.ModeApproval || d.RequirePasskey != tt.want {
				t.Errorf("Decide(%s) = mode %s, RequirePasskey %t; want approval, %t", tt.tool, d.Mode, d.RequirePasskey, tt.want)
			}
		})
	}
}
