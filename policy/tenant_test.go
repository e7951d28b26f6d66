package policy

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/interlock-mcp/interlock"
)

const tenantPolicy = `
upstreams:
  - {name: billing, command: [x], prefix: "billing_"}
  - {name: ops, command: [y]}
rules:
  - name: refunds
    match: {tools: ["billing_refund_*"]}
    mode: token
  - name: deletes
    match: {tools: ["*delete*"]}
    mode: deny
tenants:
  - name: acme
    upstreams: [billing]
    tools: ["billing_list_*", "billing_refund_*", "billing_delete_*"]
    rules:
      - name: acme-refunds
        match: {tools: ["billing_refund_*"]}
        when: "num(args.amount) > 100"
        mode: approval
        approvers: [finance]
      - name: acme-deletes
        match: {tools: ["billing_delete_*"]}
        mode: flag
  - name: beta
    tools: ["*_list_*", "restart"]
budgets:
  - {name: refunds-per-agent, per: principal, limit: 20, window: 1h, rules: [refunds, acme-refunds]}
  - {name: everything, per: tenant, limit: 100, window: 24h}
`

func TestTenantOverlays(t *testing.T) {
	f := parse(t, tenantPolicy)
	destructive := interlock.HintsOf(nil)
	tests := []struct {
		name     string
		call     interlock.Call
		wantRule string
		wantMode interlock.Mode
		budgets  []string
	}{
		{"overlay rule wins over the shared rule", interlock.Call{Tool: "billing_refund_invoice", Upstream: "billing", Hints: destructive,
			Identity: interlock.Identity{Tenant: "acme"}, Args: map[string]any{"amount": 500}}, "acme-refunds", interlock.ModeApproval, []string{"refunds-per-agent", "everything"}},
		{"overlay rule that does not hold falls to the shared rules", interlock.Call{Tool: "billing_refund_invoice", Upstream: "billing", Hints: destructive,
			Identity: interlock.Identity{Tenant: "acme"}, Args: map[string]any{"amount": 5}}, "refunds", interlock.ModeToken, []string{"refunds-per-agent", "everything"}},
		{"overlay loosens a shared deny for its tenant only", interlock.Call{Tool: "billing_delete_customer", Upstream: "billing", Hints: destructive,
			Identity: interlock.Identity{Tenant: "acme"}}, "acme-deletes", interlock.ModeFlag, []string{"everything"}},
		{"tenant without an entry gets the shared rules", interlock.Call{Tool: "billing_delete_customer", Upstream: "billing", Hints: destructive,
			Identity: interlock.Identity{Tenant: "globex"}}, "deletes", interlock.ModeDeny, nil},
		{"tenant without an entry may use every tool", interlock.Call{Tool: "restart", Upstream: "ops", Hints: destructive,
			Identity: interlock.Identity{Tenant: "globex"}}, "", interlock.ModeFlag, []string{"everything"}},
		{"upstream outside the allowlist", interlock.Call{Tool: "restart", Upstream: "ops", Hints: destructive,
			Identity: interlock.Identity{Tenant: "acme"}}, "", interlock.ModeDeny, nil},
		{"tool outside the globs", interlock.Call{Tool: "billing_export", Upstream: "billing", Hints: interlock.Hints{ReadOnly: true},
			Identity: interlock.Identity{Tenant: "acme"}}, "", interlock.ModeDeny, nil},
		{"tool globs without an upstream list", interlock.Call{Tool: "restart", Upstream: "ops", Hints: destructive,
			Identity: interlock.Identity{Tenant: "beta"}}, "", interlock.ModeFlag, []string{"everything"}},
		{"read-only call counts against no budget", interlock.Call{Tool: "billing_list_invoices", Upstream: "billing", Hints: interlock.Hints{ReadOnly: true},
			Identity: interlock.Identity{Tenant: "beta"}}, "", interlock.ModeAllow, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d, err := f.Decide(context.Background(), &tt.call)
			if err != nil {
				t.Fatal(err)
			}
			if d.Rule != tt.wantRule || d.Mode != tt.wantMode {
				t.Errorf("Decide = rule %q mode %s, want rule %q mode %s", d.Rule, d.Mode, tt.wantRule, tt.wantMode)
			}
			var budgets []string
			for _, b := range d.Budgets {
				budgets = append(budgets, b.Name)
			}
			if !slices.Equal(budgets, tt.budgets) {
				t.Errorf("budgets = %v, want %v", budgets, tt.budgets)
			}
			if allowed := f.ToolAllowed(tt.call.Tenant, tt.call.Tool, tt.call.Upstream); allowed == (d.Mode == interlock.ModeDeny && d.Rule == "") {
				t.Errorf("ToolAllowed = %v, disagreeing with the decision", allowed)
			}
			if d.Mode == interlock.ModeDeny && d.Rule == "" && !strings.Contains(d.Reason, tt.call.Tenant) {
				t.Errorf("a tenant's refusal should say which tenant: %q", d.Reason)
			}
		})
	}
}

func TestBudgetConfig(t *testing.T) {
	f := parse(t, tenantPolicy)
	want := interlock.Budget{Name: "refunds-per-agent", Limit: 20, Window: time.Hour}
	if got := f.Budgets[0].budget; got != want {
		t.Errorf("budget = %+v, want %+v", got, want)
	}
	if got := f.Budgets[1].budget; !got.PerTenant || got.Window != 24*time.Hour {
		t.Errorf("per-tenant budget = %+v", got)
	}
}

func TestToolModesCoverTenantRules(t *testing.T) {
	f := parse(t, tenantPolicy)
	modes := f.ToolModes("billing_refund_invoice", "billing", interlock.HintsOf(nil))
	for _, m := range []interlock.Mode{interlock.ModeApproval, interlock.ModeToken} {
		if !slices.Contains(modes, m) {
			t.Errorf("ToolModes = %v: the meta-arguments of %s must be advertised", modes, m)
		}
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
			_, err := Parse("policy.yaml", []byte(head+tt.src), func(string) (string, bool) { return "", false })
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

func TestCheckToolsCoversTenants(t *testing.T) {
	f := parse(t, tenantPolicy)
	offered := []OfferedTool{
		{Name: "billing_list_invoices", Upstream: "billing", Hints: interlock.Hints{ReadOnly: true}},
		{Name: "billing_refund_invoice", Upstream: "billing", Hints: interlock.HintsOf(nil)},
		{Name: "restart", Upstream: "ops", Hints: interlock.HintsOf(nil)},
	}
	var got []string
	for _, e := range f.CheckTools(offered) {
		got = append(got, e.Error())
	}
	want := []string{
		`policy.yaml:10: rule "deletes": tool glob "*delete*" matches no tool that the upstreams offer`,
		`policy.yaml:15: tenant "acme": tool glob "billing_delete_*" matches no tool that the upstreams offer`,
		`policy.yaml:23: rule "acme-deletes": tool glob "billing_delete_*" matches no tool that the upstreams offer`,
	}
	if !slices.Equal(got, want) {
		t.Errorf("CheckTools =\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
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
	f, err := Parse(filepath.Join(dir, "live.yaml"), []byte(tenantPolicy+"shadow: shadow.yaml\n"), func(string) (string, bool) { return "", false })
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
			live, err := f.Decide(context.Background(), &c)
			if err != nil {
				t.Fatal(err)
			}
			shadow, err := f.ShadowPolicy.Decide(context.Background(), &c)
			if err != nil {
				t.Fatal(err)
			}
			if live.Rule != shadow.Rule || live.Mode != shadow.Mode {
				t.Errorf("live %q/%s, shadow %q/%s", live.Rule, live.Mode, shadow.Rule, shadow.Mode)
			}
		})
	}
}
