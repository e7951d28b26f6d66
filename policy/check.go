package policy

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"text/template"
	tmplparse "text/template/parse"

	"github.com/interlock-mcp/interlock"
)

// OfferedTool is a tool an upstream offers, as the gateway mirrors it.
// [Policy.CheckTools] compares the rules with a list of them.
type OfferedTool struct {
	// Name is the tool's name as clients see it, prefix included.
	Name     string
	Upstream string
	// Hints are the tool's hints as the policy sees them, after the rules'
	// overrides.
	Hints interlock.Hints
	// Arguments are the properties of the tool's input schema.
	Arguments []string
}

// CheckTools reports what the rules, shared and the tenants', expect of
// tools that the upstreams do not offer, each at the line of the key it is
// about: a tool glob, of a rule or a tenant's allowlist, that matches no
// offered tool (a typo silently matches nothing), a preview tool
// that is not offered or not read-only (its first call would be
// INTERNAL_ERROR), and a preview argument, type_back or choice that names
// an argument the tools it applies to do not take.
func (p *Policy) CheckTools(tools []OfferedTool) LoadErrors {
	c := &toolCheck{path: p.Path, tools: tools, byName: make(map[string]OfferedTool, len(tools))}
	for _, t := range tools {
		c.byName[t.Name] = t
	}
	for _, t := range p.Tenants {
		c.tenantGlobs(t)
	}
	for _, r := range slices.Concat(p.ruleLists()...) {
		c.ruleGlobs(r)
		var matched []OfferedTool
		for _, t := range tools {
			if r.matchesTool(t.Name, t.Upstream, t.Hints) {
				matched = append(matched, t)
			}
		}
		c.previewTool(r)
		c.argumentsRead(r, matched)
		c.formArguments(r, matched)
	}
	slices.SortStableFunc(c.errs, func(a, b LoadError) int { return a.Line - b.Line })
	return c.errs
}

// toolCheck is one run of CheckTools: the tools the upstreams offer, and
// what was found wrong so far, in the order found.
type toolCheck struct {
	path   string
	tools  []OfferedTool
	byName map[string]OfferedTool
	errs   LoadErrors
}

// fail records a problem of the rule r, at the line of its key.
func (c *toolCheck) fail(r *Rule, key, format string, args ...any) {
	c.errs = append(c.errs, LoadError{File: c.path, Line: r.at(key), Msg: fmt.Sprintf("rule %q: ", r.Name) + fmt.Sprintf(format, args...)})
}

// tenantGlobs checks that each glob of a tenant's allowlist matches a
// tool that some upstream offers.
func (c *toolCheck) tenantGlobs(t *Tenant) {
	for i, re := range t.globs {
		if !slices.ContainsFunc(c.tools, func(o OfferedTool) bool { return re.MatchString(o.Name) }) {
			c.errs = append(c.errs, LoadError{File: c.path, Line: t.at(fmt.Sprintf("tools[%d]", i)), Msg: fmt.Sprintf(
				"tenant %q: tool glob %q matches no tool that the upstreams offer%s", t.Name, t.Tools[i], nearest(t.Tools[i], c.tools))})
		}
	}
}

// ruleGlobs checks that each tool glob of a rule matches a tool that its
// upstream, or any, offers.
func (c *toolCheck) ruleGlobs(r *Rule) {
	for i, re := range r.globs {
		if !slices.ContainsFunc(c.tools, func(t OfferedTool) bool {
			return (r.Match.Upstream == "" || r.Match.Upstream == t.Upstream) && re.MatchString(t.Name)
		}) {
			c.fail(r, fmt.Sprintf("match.tools[%d]", i), "tool glob %q matches no tool %s%s", r.Match.Tools[i], offeredBy(r.Match.Upstream), nearest(r.Match.Tools[i], c.tools))
		}
	}
}

// previewTool checks that a rule's preview tool is offered and read-only,
// and takes the arguments the rule gives it.
func (c *toolCheck) previewTool(r *Rule) {
	p := r.Preview
	if p == nil || p.Tool == "" {
		return
	}
	t, offered := c.byName[p.Tool]
	switch {
	case !offered:
		c.fail(r, "preview.tool", "preview tool %q is not offered by any upstream, so every call the rule gates would fail (INTERNAL_ERROR)%s", p.Tool, nearest(p.Tool, c.tools))
	case !t.Hints.ReadOnly:
		c.fail(r, "preview.tool", "preview tool %q is not read-only, so it is refused as a preview (INTERNAL_ERROR): name a read-only tool, or, if it only reads, "+
			"give it annotations: {readOnlyHint: true} in a rule that matches it", p.Tool)
	default:
		for _, name := range slices.Sorted(maps.Keys(p.Args)) {
			if !slices.Contains(t.Arguments, name) {
				c.fail(r, "preview.args."+name, "preview argument %s is not an argument of %s (%s)", name, p.Tool, argumentList(t))
			}
		}
	}
}

// argumentsRead checks what a rule reads of a call's arguments: it must be
// there in every tool it matches that declares its arguments, or the rule
// says it means it (optional): a summary naming a missing argument falls
// back to the generic summary, and a condition reading one fails closed
// on every call.
func (c *toolCheck) argumentsRead(r *Rule, matched []OfferedTool) {
	declared := slices.DeleteFunc(slices.Clone(matched), func(t OfferedTool) bool { return len(t.Arguments) == 0 })
	for _, name := range argsIn(r.summary) {
		if lacking := without(declared, name); len(lacking) > 0 && !slices.Contains(r.Optional, name) {
			c.fail(r, "summary", "summary names args.%s, an argument that %s: fix the name, or list it under optional if the template handles its absence", name, lacking)
		}
	}
	if !r.readsAll {
		for _, name := range r.reads {
			if lacking := without(declared, name); len(lacking) > 0 && !slices.Contains(r.Optional, name) {
				c.fail(r, "when", "when reads args.%s, an argument that %s, so every call of it is decided as if the condition failed: fix the name, or list it under optional", name, lacking)
			}
		}
	}
	for _, arg := range slices.Sorted(maps.Keys(r.previewReads)) {
		for _, name := range r.previewReads[arg] {
			if lacking := without(declared, name); len(lacking) > 0 && !slices.Contains(r.Optional, name) {
				c.fail(r, "preview.args."+arg, "preview argument %s reads args.%s, an argument that %s", arg, name, lacking)
			}
		}
	}
}

// formArguments checks that the arguments a rule's form names, in
// type_back and its choices, are taken by every tool it matches.
func (c *toolCheck) formArguments(r *Rule, matched []OfferedTool) {
	for _, name := range argsIn(r.typeBack) {
		if lacking := without(matched, name); len(lacking) > 0 {
			c.fail(r, "type_back", "type_back names args.%s, an argument that %s", name, lacking)
		}
	}
	for _, ch := range r.choices {
		if lacking := without(matched, ch.Arg); len(lacking) > 0 {
			c.fail(r, "choices."+ch.Arg, "choice %s names an argument that %s", ch.Arg, lacking)
		}
	}
}

// offeredBy names where a glob looked, for messages.
func offeredBy(upstream string) string {
	if upstream != "" {
		return fmt.Sprintf("that upstream %q offers", upstream)
	}
	return "that the upstreams offer"
}

// without describes the tools that do not take the argument name; "" when
// all of them do.
func without(tools []OfferedTool, name string) string {
	var lacking []string
	for _, t := range tools {
		if !slices.Contains(t.Arguments, name) {
			lacking = append(lacking, fmt.Sprintf("%s does not take (%s)", t.Name, argumentList(t)))
		}
	}
	return strings.Join(lacking, "; ")
}

func argumentList(t OfferedTool) string {
	if len(t.Arguments) == 0 {
		return "it takes no arguments"
	}
	return "its arguments: " + strings.Join(t.Arguments, ", ")
}

// nearest suggests the offered tool name closest to a mistyped one, as
// ": did you mean x?"; "" when none is close.
func nearest(name string, tools []OfferedTool) string {
	names := make([]string, len(tools))
	for i, t := range tools {
		names[i] = t.Name
	}
	return Nearest(name, names)
}

// Nearest suggests the one of names closest to a mistyped name, as ": did
// you mean x?"; "" when none is close.
func Nearest(name string, names []string) string {
	best, bestDistance := "", len(name)/3+1
	for _, n := range names {
		if d := editDistance(name, n); d > 0 && d <= bestDistance && (d < bestDistance || best == "" || n < best) {
			best, bestDistance = n, d
		}
	}
	if best == "" {
		return ""
	}
	return fmt.Sprintf(": did you mean %s?", best)
}

// editDistance is the Levenshtein distance between a and b, in bytes.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// argsIn returns the argument names a template reads as .args.name or
// index .args "name", in order of appearance.
func argsIn(t *template.Template) []string {
	var out []string
	note := func(name string) {
		if !slices.Contains(out, name) {
			out = append(out, name)
		}
	}
	walkTemplate(t, func(n tmplparse.Node) {
		switch n := n.(type) {
		case *tmplparse.FieldNode:
			if len(n.Ident) >= 2 && n.Ident[0] == "args" {
				note(n.Ident[1])
			}
		case *tmplparse.CommandNode:
			if len(n.Args) < 3 {
				return
			}
			fn, isIdent := n.Args[0].(*tmplparse.IdentifierNode)
			field, isField := n.Args[1].(*tmplparse.FieldNode)
			key, isString := n.Args[2].(*tmplparse.StringNode)
			if isIdent && fn.Ident == "index" && isField && slices.Equal(field.Ident, []string{"args"}) && isString {
				note(key.Text)
			}
		}
	})
	return out
}
