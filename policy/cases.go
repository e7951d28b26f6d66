package policy

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"

	"go.yaml.in/yaml/v4"

	"github.com/interlock-mcp/interlock"
	"github.com/interlock-mcp/interlock/internal/strictjson"
)

// Verdict is what a policy decides for a call, in the terms tests and
// replays compare: the rule that decided ("" for the default), its mode,
// and the error code the caller gets before giving any key ("" when the
// mode only asks for one, or lets the call through).
type Verdict struct {
	Rule string
	Mode interlock.Mode
	Code interlock.Code
	// Err says why the policy could not decide (Code is INTERNAL_ERROR).
	Err error
}

// Judge decides c as the gate does: the tool's hints as the rules
// override them, then [Policy.Decide]. c.Hints are the hints the tool
// advertises and are replaced by the overridden ones. Arguments the gate
// would refuse before deciding (too large, ambiguous JSON) are
// VALIDATION_FAILED; a decision the policy cannot complete is
// INTERNAL_ERROR, as the gate answers it; mode deny is TOOL_NOT_ALLOWED.
func (p *Policy) Judge(ctx context.Context, c *interlock.Call) Verdict {
	raw, err := json.Marshal(c.Args)
	if err == nil {
		err = interlock.CheckJSON(raw)
	}
	if err == nil && len(raw) > p.MaxArgumentBytes && p.MaxArgumentBytes > 0 {
		err = fmt.Errorf("the arguments are %d bytes; at most %d are accepted", len(raw), p.MaxArgumentBytes)
	}
	if err != nil {
		return Verdict{Code: interlock.CodeValidationFailed, Err: err}
	}
	c.Hints = p.Hints(c.Tool, c.Upstream, c.Hints)
	d, err := p.Decide(ctx, c)
	v := Verdict{Rule: d.Rule, Mode: d.Mode}
	switch {
	case err != nil:
		v.Code, v.Err = interlock.CodeInternal, err
	case d.Mode == interlock.ModeDeny:
		v.Code = interlock.CodeToolNotAllowed
	}
	return v
}

// String shows the verdict as "mode token, rule "refunds"", with the code
// when there is one.
func (v Verdict) String() string {
	rule := "no rule (default)"
	if v.Rule != "" {
		rule = fmt.Sprintf("rule %q", v.Rule)
	}
	mode := string(v.Mode)
	if mode == "" {
		mode = "-"
	}
	s := fmt.Sprintf("mode %s, %s", mode, rule)
	if v.Code != "" {
		s += ", code " + string(v.Code)
	}
	return s
}

// Cases is a file of test cases for a policy: calls and the decisions
// expected of them, for `interlock test`.
type Cases struct {
	Path  string  `yaml:"-"`
	Cases []*Case `yaml:"cases"`
}

// Case is one call and what the policy is expected to decide for it.
type Case struct {
	Name string         `yaml:"name"`
	Tool string         `yaml:"tool"`
	Args map[string]any `yaml:"args"`
	// Upstream names the upstream that offers the tool; when empty, the
	// config's only upstream, or the one that offers the tool.
	Upstream  string `yaml:"upstream"`
	Principal string `yaml:"principal"`
	Tenant    string `yaml:"tenant"`
	// Hints are the tool's annotations (readOnly, destructive, idempotent,
	// openWorld); those not given take the specification's defaults.
	Hints  map[string]bool `yaml:"hints"`
	Expect Expect          `yaml:"expect"`

	Line  int `yaml:"-"`
	lines lines
}

// Expect is what a case expects; every field that is set must match.
type Expect struct {
	Mode interlock.Mode `yaml:"mode"`
	// Rule is the name of the rule that decides; "default" expects that no
	// rule matches.
	Rule string         `yaml:"rule"`
	Code interlock.Code `yaml:"code"`
}

// DefaultRule is what a case's expect.rule says to expect that no rule
// matches and the default mode applies.
const DefaultRule = "default"

// UnmarshalYAML records where the case and each of its keys start, for
// messages, and rejects unknown fields.
func (c *Case) UnmarshalYAML(n *yaml.Node) error {
	type plain Case
	c.Line, c.lines = n.Line, keyLines(n)
	return n.Load((*plain)(c), yaml.WithKnownFields())
}

// caseHints are the names a case's hints take, and the hint each sets.
var caseHints = map[string]func(*interlock.Hints) *bool{
	"readOnly":    func(h *interlock.Hints) *bool { return &h.ReadOnly },
	"destructive": func(h *interlock.Hints) *bool { return &h.Destructive },
	"idempotent":  func(h *interlock.Hints) *bool { return &h.Idempotent },
	"openWorld":   func(h *interlock.Hints) *bool { return &h.OpenWorld },
}

// HasHints reports whether the case gives the tool's hints.
func (c *Case) HasHints() bool { return c.Hints != nil }

// ToolHints returns the hints the case gives, over the specification's
// defaults: a tool is destructive and open-world unless it says
// otherwise, and a read-only tool is never destructive (as
// [interlock.HintsOf] reads a tool's annotations).
func (c *Case) ToolHints() interlock.Hints {
	h := interlock.Hints{Destructive: true, OpenWorld: true}
	for name, v := range c.Hints {
		*caseHints[name](&h) = v
	}
	if h.ReadOnly {
		h.Destructive = false
	}
	return h
}

// Call returns the case's call with the tool's hints h. Its arguments go
// through the gate's one JSON decoding, so that conditions see what they
// would see of a real call.
func (c *Case) Call(upstream string, h interlock.Hints) (*interlock.Call, error) {
	args := map[string]any{}
	if len(c.Args) > 0 {
		raw, err := json.Marshal(c.Args)
		if err != nil {
			return nil, fmt.Errorf("case %q: arguments: %w", c.Name, err)
		}
		v, err := strictjson.Decode(raw)
		if err != nil {
			return nil, fmt.Errorf("case %q: arguments: %w", c.Name, err)
		}
		args = v.(map[string]any)
	}
	return &interlock.Call{Tool: c.Tool, Upstream: upstream, Hints: h,
		Identity: interlock.Identity{Principal: c.Principal, Tenant: c.Tenant}, Args: args}, nil
}

// Failed says how v differs from what the case expects; "" when it does
// not.
func (c *Case) Failed(v Verdict) string {
	var diffs []string
	if e := c.Expect.Mode; e != "" && e != v.Mode {
		diffs = append(diffs, fmt.Sprintf("mode %s", e))
	}
	if e := c.Expect.Rule; e != "" && !(e == v.Rule || e == DefaultRule && v.Rule == "") {
		diffs = append(diffs, fmt.Sprintf("rule %q", e))
	}
	if e := c.Expect.Code; e != "" && e != v.Code {
		diffs = append(diffs, fmt.Sprintf("code %s", e))
	}
	return strings.Join(diffs, ", ")
}

// LoadCases reads and checks a cases file.
func LoadCases(name string) (*Cases, error) {
	data, err := os.ReadFile(name)
	if err != nil {
		return nil, fmt.Errorf("reading cases: %w", err)
	}
	return ParseCases(name, data)
}

// ParseCases reads and checks a cases file's contents; name is used in
// messages. Every problem is a [LoadError] at its line.
func ParseCases(name string, data []byte) (*Cases, error) {
	cs := &Cases{Path: name}
	if len(bytes.TrimSpace(data)) > 0 {
		if err := yaml.Load(data, cs, yaml.WithKnownFields()); err != nil {
			return nil, YAMLErrors(name, data, err)
		}
	}
	var errs LoadErrors
	add := func(line int, format string, args ...any) {
		errs = append(errs, LoadError{File: name, Line: line, Msg: fmt.Sprintf(format, args...)})
	}
	if len(cs.Cases) == 0 {
		add(topLevelLines(data).At("cases", 1), "no cases: add cases: with a list of {name, tool, args, expect}")
	}
	names := map[string]int{}
	codes := interlock.Codes()
	for i, c := range cs.Cases {
		if c == nil {
			add(topLevelLines(data).At(fmt.Sprintf("cases[%d]", i), 1), "cases has an empty entry (a lone \"-\"): remove it or fill it in")
			continue
		}
		label := fmt.Sprintf("case %d", i+1)
		switch {
		case c.Name == "":
			add(c.Line, "case has no name: add name: <what it shows>")
		case names[c.Name] != 0:
			add(c.lines.At("name", c.Line), "case %q is already defined on line %d", c.Name, names[c.Name])
		default:
			names[c.Name], label = c.Line, fmt.Sprintf("case %q", c.Name)
		}
		if c.Tool == "" {
			add(c.Line, "%s has no tool: add tool: <the tool's name as clients see it>", label)
		}
		for _, arg := range slices.Sorted(maps.Keys(c.Args)) {
			if strings.HasPrefix(arg, "__") {
				add(c.lines.At("args."+arg, c.Line), "%s: %s is a meta-argument, never part of a decision: leave it out", label, arg)
			}
		}
		for _, h := range slices.Sorted(maps.Keys(c.Hints)) {
			if caseHints[h] == nil {
				add(c.lines.At("hints."+h, c.Line), "%s: unknown hint %q: use readOnly, destructive, idempotent or openWorld", label, h)
			}
		}
		e := c.Expect
		if e.Mode == "" && e.Rule == "" && e.Code == "" {
			add(c.lines.At("expect", c.Line), "%s expects nothing: give expect: with mode, rule or code", label)
		}
		if e.Mode != "" {
			if _, err := interlock.ParseMode(string(e.Mode)); err != nil {
				add(c.lines.At("expect.mode", c.Line), "%s: expect.mode: %v", label, err)
			}
		}
		if e.Code != "" && !slices.Contains(codes, e.Code) {
			add(c.lines.At("expect.code", c.Line), "%s: expect.code %q is not an interlock error code, such as %s or %s", label, e.Code,
				interlock.CodeToolNotAllowed, interlock.CodeValidationFailed)
		}
	}
	if len(errs) > 0 {
		return nil, errs
	}
	return cs, nil
}

// CheckAgainst reports every case whose expect.rule names no rule of p,
// or whose upstream is none of upstreams (the names of the configuration's
// upstreams): a misspelt name would otherwise only ever fail, or silently
// match nothing.
func (cs *Cases) CheckAgainst(p *Policy, upstreams []string) LoadErrors {
	var errs LoadErrors
	for _, c := range cs.Cases {
		if u := c.Upstream; u != "" && !slices.Contains(upstreams, u) {
			errs = append(errs, LoadError{File: cs.Path, Line: c.lines.At("upstream", c.Line),
				Msg: fmt.Sprintf("case %q: upstream %q is not an upstream of %s: use one of %s", c.Name, u, p.Path, strings.Join(upstreams, ", "))})
		}
		if r := c.Expect.Rule; r != "" && r != DefaultRule && !slices.ContainsFunc(p.Rules, func(rule *Rule) bool { return rule.Name == r }) {
			errs = append(errs, LoadError{File: cs.Path, Line: c.lines.At("expect.rule", c.Line),
				Msg: fmt.Sprintf("case %q: expect.rule %q is not a rule of %s (use %q for no rule)", c.Name, r, p.Path, DefaultRule)})
		}
	}
	return errs
}
