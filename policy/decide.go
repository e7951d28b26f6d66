package policy

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"regexp"
	"slices"
	"strings"
	"text/template"

	"github.com/interlock-mcp/interlock"
	"github.com/interlock-mcp/interlock/redact"
)

// How a policy decides one call: the first rule whose match and condition
// hold, in the order of the tenant's rules and then the file's, gives the
// mode and what the gate needs of it (approvers, the summary, the preview,
// the form); no rule gives the default mode the tool's hints call for.

// matchesTool reports whether the rule's static match (everything but the
// condition) selects the tool.
func (r *Rule) matchesTool(tool, upstream string, h interlock.Hints) bool {
	if r.Match.Upstream != "" && r.Match.Upstream != upstream {
		return false
	}
	if len(r.Match.Tools) > 0 && !slices.ContainsFunc(r.globs, func(re *regexp.Regexp) bool { return re.MatchString(tool) }) {
		return false
	}
	for name, want := range r.Match.Annotations {
		if *hintField(&h, name) != want {
			return false
		}
	}
	return true
}

// holds evaluates the rule's condition for c. A condition that cannot be
// evaluated (a missing argument, a type mismatch) never loosens the gate: it
// holds for a rule that restricts and fails for a rule that allows.
func (r *Rule) holds(c *interlock.Call) (bool, error) {
	if r.program == nil {
		return true, nil
	}
	out, _, err := r.program.Eval(activation(c))
	if err != nil {
		return r.Mode != interlock.ModeAllow, fmt.Errorf("rule %q: evaluating when: %w", r.Name, err)
	}
	b, ok := out.Value().(bool)
	if !ok {
		return r.Mode != interlock.ModeAllow, fmt.Errorf("rule %q: when gave %v, not a boolean", r.Name, out.Value())
	}
	return b, nil
}

// activation is what CEL expressions and summary templates see of a call.
func activation(c *interlock.Call) map[string]any {
	return map[string]any{
		"tool":      c.Tool,
		"upstream":  c.Upstream,
		"args":      c.Args,
		"principal": c.Principal,
		"tenant":    c.Tenant,
	}
}

// shown is what templates see of a call: its activation with every secret
// argument redacted, so no summary, form or log can print a secret
// whatever the template says.
func shown(c *interlock.Call, isSecret func(string) bool) map[string]any {
	data := activation(c)
	data["args"] = redact.Args(c.Args, isSecret)
	return data
}

// render fills the rule's summary template for c and the preview's result
// (both redacted); "" when it has none or it cannot be filled (a missing
// argument), so the gate's generic summary stands in.
func (r *Rule) render(c *interlock.Call, preview any, isSecret func(string) bool, log *slog.Logger) string {
	if r.summary == nil {
		return ""
	}
	data := shown(c, isSecret)
	if m, ok := preview.(map[string]any); ok {
		preview = redact.Args(m, isSecret)
	}
	data["preview"] = preview
	var b strings.Builder
	if err := r.summary.Execute(&b, data); err != nil {
		// The generic summary stands in; say why, so a template naming
		// an argument the tool lacks does not go unnoticed.
		if log != nil {
			log.Warn("a rule's summary could not be filled for this call; the generic summary is shown (interlock check --connect finds such templates)",
				"rule", r.Name, "tool", c.Tool, "error", err)
		}
		return ""
	}
	return b.String()
}

// decision is what the rule decides for c.
func (r *Rule) decision(c *interlock.Call, isSecret func(string) bool, log *slog.Logger) (interlock.Decision, error) {
	d := interlock.Decision{Rule: r.Name, RuleDigest: r.digest, Mode: r.Mode, TTL: r.ttl}
	if d.Mode == interlock.ModeAllow || d.Mode == interlock.ModeDeny {
		return d, nil
	}
	d.Summarize = func(preview any) string { return r.render(c, preview, isSecret, log) }
	if d.Mode == interlock.ModeApproval {
		d.Timeout, d.Approvers, d.Quorum, d.RequirePasskey, d.RunWithin = r.timeout, r.Approvers, r.Quorum, r.RequirePasskey, r.runWithin
		d.MaxPending = r.MaxPending
	}
	if d.Mode == interlock.ModeElicit {
		d.Fallback, d.Timeout = r.Fallback, r.timeout
		d.Form = interlock.Form{Confirm: r.Confirm, Choices: r.choices}
		if r.typeBack != nil {
			var b strings.Builder
			if err := r.typeBack.Execute(&b, shown(c, isSecret)); err != nil || strings.TrimSpace(b.String()) == "" {
				return d, fmt.Errorf("rule %q: type_back cannot be filled for this call: %v", r.Name, err)
			}
			if strings.Contains(b.String(), redact.Value) {
				return d, fmt.Errorf("rule %q: type_back would ask the human to type a secret; refusing", r.Name)
			}
			d.Form.TypeBack = strings.TrimSpace(b.String())
		}
	}
	if r.Preview != nil {
		args := make(map[string]any, len(r.previewArgs))
		for name, prg := range r.previewArgs {
			out, _, err := prg.Eval(activation(c))
			if err != nil {
				return d, fmt.Errorf("rule %q: preview argument %s: %w", r.Name, name, err)
			}
			args[name] = out.Value()
		}
		d.Preview = &interlock.PreviewCall{Tool: r.Preview.Tool, Args: args}
	}
	return d, nil
}

// Hints returns a tool's hints as the policy sees them: h with the
// overrides of the first rule that matches the tool and overrides any.
func (p *Policy) Hints(tool, upstream string, h interlock.Hints) interlock.Hints {
	for _, r := range p.Rules {
		if r.override != nil && r.matchesTool(tool, upstream, h) {
			return r.override(h)
		}
	}
	return h
}

func (p *Policy) defaultMode(h interlock.Hints) interlock.Mode {
	if h.ReadOnly {
		return interlock.ModeAllow
	}
	return p.DefaultMode
}

// Decide implements interlock.Policy. The call's hints are expected to be
// the ones [Policy.Hints] returns. A tenant's overlay rules are tried before
// the shared ones, and a tool outside the tenant's allowlists is denied.
func (p *Policy) Decide(_ context.Context, c *interlock.Call) (interlock.Decision, error) {
	t := p.tenant(c.Tenant)
	if !t.allows(c.Tool, c.Upstream) {
		return interlock.Decision{Mode: interlock.ModeDeny,
			Reason: fmt.Sprintf("tenant %q may not use this tool", c.Tenant)}, nil
	}
	var r *Rule
	if t != nil {
		r = p.firstMatch(t.Rules, c)
	}
	if r == nil {
		r = p.firstMatch(p.Rules, c)
	}
	if r == nil {
		return p.withBudgets(interlock.Decision{Mode: p.defaultMode(c.Hints)}), nil
	}
	d, err := r.decision(c, p.IsSecret, p.Log)
	return p.withBudgets(d), err
}

// firstMatch returns the first of rules that matches c, nil when none does.
func (p *Policy) firstMatch(rules []*Rule, c *interlock.Call) *Rule {
	for _, r := range rules {
		if !r.matchesTool(c.Tool, c.Upstream, c.Hints) {
			continue
		}
		ok, err := r.holds(c)
		if err != nil && p.Log != nil {
			p.Log.Warn("policy condition failed; the restrictive reading applies", "rule", r.Name, "tool", c.Tool, "error", err)
		}
		if ok {
			return r
		}
	}
	return nil
}

// ruleLists returns the lists of rules a call of some tenant may be decided
// by: each tenant's overlay, then the shared rules. What a tool advertises
// is the same for every caller, so it covers them all.
func (p *Policy) ruleLists() [][]*Rule {
	lists := make([][]*Rule, 0, len(p.Tenants)+1)
	for _, t := range p.Tenants {
		lists = append(lists, t.Rules)
	}
	return append(lists, p.Rules)
}

// ToolModes implements interlock.Policy: the modes of every rule that may
// match the tool, up to the first that matches without a condition, or the
// default; in the shared rules and every tenant's.
func (p *Policy) ToolModes(tool, upstream string, h interlock.Hints) []interlock.Mode {
	var modes []interlock.Mode
	final := false
	for _, rules := range p.ruleLists() {
		var found []interlock.Mode
		found, final = toolModes(rules, tool, upstream, h)
		modes = append(modes, found...)
	}
	// The default is out of reach only when a shared rule (the last list)
	// matches every call of the tool.
	if final {
		return modes
	}
	return append(modes, p.defaultMode(h))
}

// toolModes returns the modes of the rules that may match the tool, up to
// the first that matches without a condition; final says one did.
func toolModes(rules []*Rule, tool, upstream string, h interlock.Hints) (modes []interlock.Mode, final bool) {
	for _, r := range rules {
		if !r.matchesTool(tool, upstream, h) {
			continue
		}
		modes = append(modes, r.Mode)
		if r.Mode == interlock.ModeElicit {
			fb := r.Fallback
			if fb == "" {
				fb = interlock.ModeToken
			}
			modes = append(modes, fb)
		}
		if r.program == nil {
			return modes, true
		}
	}
	return modes, false
}

// HumanArgs implements interlock.Policy: the choices of every elicit rule
// that may match the tool, shared or a tenant's.
func (p *Policy) HumanArgs(tool, upstream string, h interlock.Hints) []string {
	var names []string
	for _, rules := range p.ruleLists() {
		for _, r := range rules {
			if !r.matchesTool(tool, upstream, h) {
				continue
			}
			for _, ch := range r.choices {
				if !slices.Contains(names, ch.Arg) {
					names = append(names, ch.Arg)
				}
			}
			if r.program == nil {
				break
			}
		}
	}
	return names
}

// IsSecret implements interlock.Policy.
func (p *Policy) IsSecret(name string) bool { return redact.IsSecret(name, p.Redact) }

// templateFuncs are the functions a summary or type_back template may
// call: json renders a value as compact JSON, as a person reads an array
// or object, where the template's own printing would show Go syntax
// (map[name:Bob]).
var templateFuncs = template.FuncMap{"json": jsonText}

// jsonText is v as compact JSON, without HTML escapes (a summary is text).
func jsonText(v any) (string, error) {
	var b strings.Builder
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return "", err
	}
	return strings.TrimSuffix(b.String(), "\n"), nil
}

// A policy is what the gate asks; the guard fails the build when it stops
// being one.
var _ interlock.Policy = (*Policy)(nil)
