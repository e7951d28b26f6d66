package policy

import (
	"fmt"
	"regexp"
	"slices"

	"go.yaml.in/yaml/v4"
)

// Tenant is one tenant's overlay on the shared policy: the upstreams and
// tools its callers may use, and rules tried before the shared ones. A
// tenant with no entry uses the shared rules and every tool.
type Tenant struct {
	Name string `yaml:"name"`
	// Upstreams, when set, are the only upstreams whose tools the tenant
	// may see and call.
	Upstreams []string `yaml:"upstreams"`
	// Tools, when set, are globs over the tool names as clients see them
	// (prefix included): the only tools the tenant may see and call.
	Tools []string `yaml:"tools"`
	// Rules are tried before the shared rules for the tenant's calls.
	Rules []*Rule `yaml:"rules"`

	Line  int `yaml:"-"`
	lines lines
	globs []*regexp.Regexp
}

// UnmarshalYAML records where the tenant and each of its keys start, for
// messages, and rejects unknown fields.
func (t *Tenant) UnmarshalYAML(n *yaml.Node) error {
	type plain Tenant
	t.Line, t.lines = n.Line, keyLines(n)
	return n.Load((*plain)(t), yaml.WithKnownFields())
}

func (t *Tenant) at(path string) int { return t.lines.At(path, t.Line) }

// At returns the line of the tenant's key at path (such as "upstreams[0]"),
// or of the tenant itself when the key is not written.
func (t *Tenant) At(path string) int { return t.at(path) }

// allows reports whether the tenant's callers may use the tool; a nil
// tenant (no entry) may use every tool.
func (t *Tenant) allows(tool, upstream string) bool {
	if t == nil {
		return true
	}
	if len(t.Upstreams) > 0 && !slices.Contains(t.Upstreams, upstream) {
		return false
	}
	return len(t.Tools) == 0 || slices.ContainsFunc(t.globs, func(re *regexp.Regexp) bool { return re.MatchString(tool) })
}

// ToolAllowed reports whether callers of tenant may see and call the tool
// of upstream, by the tenant's allowlists.
func (p *Policy) ToolAllowed(tenant, tool, upstream string) bool {
	return p.tenant(tenant).allows(tool, upstream)
}

// TenantUpstreams returns the upstreams callers of tenant may use, and
// whether the tenant is limited to them at all.
func (p *Policy) TenantUpstreams(tenant string) ([]string, bool) {
	t := p.tenant(tenant)
	if t == nil || len(t.Upstreams) == 0 {
		return nil, false
	}
	return t.Upstreams, true
}

// tenant returns the overlay of the named tenant, nil when it has none.
func (p *Policy) tenant(name string) *Tenant {
	for _, t := range p.Tenants {
		if t.Name == name {
			return t
		}
	}
	return nil
}

// checkTenants checks the tenants section: names, tool allowlists and
// overlay rules. shared maps each shared rule's name to its line, for
// names an overlay rule may not reuse. Whether the upstreams a tenant
// names are configured is config's to check.
func checkTenants(p *Policy, shared map[string]int, add func(int, string, ...any), addRuleErrors func([]LoadError)) {
	seen := map[string]int{}
	for _, t := range p.Tenants {
		uniqueName("tenant", t.Name, "<the tenant of the API keys it applies to>", t.Line, t.at("name"), seen, add)
		label := fmt.Sprintf("tenant %q", t.Name)
		t.globs = t.globs[:0]
		for i, g := range t.Tools {
			re, err := compileGlob(g)
			if err != nil {
				add(t.at(fmt.Sprintf("tools[%d]", i)), "%s: tool glob %q %v", label, g, err)
				continue
			}
			t.globs = append(t.globs, re)
		}
		names := map[string]int{}
		for i, r := range t.Rules {
			if r == nil {
				add(t.at(fmt.Sprintf("rules[%d]", i)), "%s: rules has an empty entry (a lone \"-\"): remove it or fill it in", label)
				continue
			}
			if r.Name != "" {
				if line, dup := shared[r.Name]; dup {
					add(r.at("name"), "%s: rule %q is already a shared rule, on line %d: give the tenant's rule its own name", label, r.Name, line)
				} else if line, dup := names[r.Name]; dup {
					add(r.at("name"), "%s: rule %q is already defined on line %d", label, r.Name, line)
				}
				names[r.Name] = r.Line
			}
			if len(r.Annotations) > 0 {
				// Hints are worked out once per tool, for every caller.
				add(r.at("annotations"), "%s: rule %q: annotations override a tool's hints for every tenant: set them in a shared rule", label, r.Name)
			}
			addRuleErrors(r.compile(p.IsSecret))
			r.digest = r.definitionDigest(t.Name)
		}
	}
}

// uniqueName reports an entry of a section (kind) that has no name, or a
// name already used on another line; seen maps each name to its entry's
// line, and hint says what the name should be.
func uniqueName(kind, name, hint string, line, nameLine int, seen map[string]int, add func(int, string, ...any)) {
	switch {
	case name == "":
		add(line, "%s has no name: add name: %s", kind, hint)
	case seen[name] != 0:
		add(nameLine, "%s %q is already defined on line %d", kind, name, seen[name])
	default:
		seen[name] = line
	}
}
