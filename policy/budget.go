package policy

import (
	"fmt"
	"slices"
	"time"

	"go.yaml.in/yaml/v4"

	"github.com/interlock-mcp/interlock"
)

// Budget bounds how many gated calls may run in a sliding window, per
// principal or per tenant, whoever confirms them.
type Budget struct {
	Name string `yaml:"name"`
	// Per is principal (each caller of a tenant counts apart) or tenant.
	Per   string `yaml:"per"`
	Limit int    `yaml:"limit"`
	// Window is a Go duration such as 1h.
	Window string `yaml:"window"`
	// Rules name the rules, shared or a tenant's, whose calls count; every
	// gated call counts when absent.
	Rules []string `yaml:"rules"`

	Line  int `yaml:"-"`
	lines lines
	// budget is the budget as the gate applies it.
	budget interlock.Budget
}

// UnmarshalYAML records where the budget and each of its keys start, for
// messages, and rejects unknown fields.
func (b *Budget) UnmarshalYAML(n *yaml.Node) error {
	type plain Budget
	b.Line, b.lines = n.Line, keyLines(n)
	return n.Load((*plain)(b), yaml.WithKnownFields())
}

func (b *Budget) at(path string) int { return b.lines.At(path, b.Line) }

// Limits of a budget's fields.
const (
	MaxBudgetLimit  = 1_000_000
	MaxBudgetWindow = 30 * 24 * time.Hour
)

// covers reports whether calls decided by the named rule count against
// the budget.
func (b *Budget) covers(rule string) bool {
	return len(b.Rules) == 0 || slices.Contains(b.Rules, rule)
}

// withBudgets adds to d the budgets its calls count against: only a gated
// call counts.
func (p *Policy) withBudgets(d interlock.Decision) interlock.Decision {
	if !d.Mode.Gated() {
		return d
	}
	for _, b := range p.Budgets {
		if b.covers(d.Rule) {
			d.Budgets = append(d.Budgets, b.budget)
		}
	}
	return d
}

// checkBudgets checks the budgets section; every rule a budget names must
// be a gated rule of the file, shared or a tenant's.
func checkBudgets(p *Policy, add func(int, string, ...any)) {
	modes := map[string]interlock.Mode{}
	for _, r := range p.Rules {
		modes[r.Name] = r.Mode
	}
	for _, t := range p.Tenants {
		for _, r := range t.Rules {
			// Two tenants may each have a rule of a name; a budget may
			// name it when one of them is gated.
			if m, seen := modes[r.Name]; r != nil && (!seen || !m.Gated()) {
				modes[r.Name] = r.Mode
			}
		}
	}
	seen := map[string]int{}
	for _, b := range p.Budgets {
		uniqueName("budget", b.Name, "<what it bounds>", b.Line, b.at("name"), seen, add)
		label := fmt.Sprintf("budget %q", b.Name)
		switch b.Per {
		case "principal", "tenant":
		case "":
			add(b.Line, "%s: per is required: principal (each caller counts apart) or tenant (a tenant's callers count together)", label)
		default:
			add(b.at("per"), "%s: per %q must be principal or tenant", label, b.Per)
		}
		if b.Limit < 1 || b.Limit > MaxBudgetLimit {
			add(b.at("limit"), "%s: limit must be between 1 and %d calls per window", label, MaxBudgetLimit)
		}
		window, err := time.ParseDuration(b.Window)
		if err != nil || window < time.Second || window > MaxBudgetWindow {
			add(b.at("window"), "%s: window %q must be a duration between 1s and 720h (30 days), such as 1h", label, b.Window)
		}
		for i, name := range b.Rules {
			mode, known := modes[name]
			switch {
			case !known:
				add(b.at(fmt.Sprintf("rules[%d]", i)), "%s: rule %q is not a rule of this file", label, name)
			case !mode.Gated():
				add(b.at(fmt.Sprintf("rules[%d]", i)), "%s: rule %q has mode %s, whose calls never count: budgets count calls that need a confirmation", label, name, mode)
			}
		}
		b.budget = interlock.Budget{Name: b.Name, PerTenant: b.Per == "tenant", Limit: b.Limit, Window: window}
	}
}
