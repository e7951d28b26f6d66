package policy

import (
	"context"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/interlock-mcp/interlock"
)

// tenantPolicy is shared with config's tests, which name its upstreams.
var tenantPolicy = func() string {
	b, err := os.ReadFile("testdata/tenants.yaml")
	if err != nil {
		panic(err)
	}
	return string(b)
}()

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
