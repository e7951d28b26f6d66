// Package policy holds the rules that decide what each tool call needs:
// matching on tool names, upstreams and hints, CEL conditions, summary
// templates, tenants' overlays, budgets, the cases `interlock test` runs,
// replay's faithfulness check and the digests standing grants are bound
// to. It knows nothing of where the gateway's upstreams, keys, stores or
// audit log are: package config reads the whole file and hands this part
// here, so that the rules can be decided, tested and replayed alone.
//
// # Checking
//
// Everything that can be checked before a call arrives is checked when the
// policy is provisioned: modes, tool-name globs, CEL conditions (compiled
// once) and summary templates (parsed once). A policy that provisions is a
// policy that can run; every problem names its line.
//
// # Deciding
//
// Rules are tried in order and the first that matches decides. A rule matches
// on the tool name (globs), the upstream, the tool's hints and an optional CEL
// condition over tool, upstream, args, principal and tenant. With no matching
// rule a read-only tool is allowed and every other tool, unannotated ones
// included, gets default_mode.
package policy

import (
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"slices"
	"strings"

	"go.yaml.in/yaml/v4"

	"github.com/interlock-mcp/interlock"
)

// Policy is the part of a configuration file that decides calls: the
// rules, the tenants' overlays and budgets, and what applies when no rule
// matches. Package config reads it inline with the rest of the file.
type Policy struct {
	// Path is where the policy came from, for messages.
	Path string `yaml:"-"`
	// DefaultMode applies to every tool that is not read-only when no rule
	// matches: flag (when absent) or deny.
	DefaultMode interlock.Mode `yaml:"default_mode"`
	// MaxArgumentBytes bounds one call's raw arguments. It is the policy's
	// because a case or a replayed call is judged against it as the gate
	// would.
	MaxArgumentBytes int `yaml:"max_argument_bytes"`
	// Redact adds argument names to redact.DefaultNames.
	Redact []string `yaml:"redact"`
	Rules  []*Rule  `yaml:"rules"`
	// Tenants are per-tenant overlays: allowlists and rules tried first.
	Tenants []*Tenant `yaml:"tenants"`
	// Budgets bound how many gated calls may run in a window.
	Budgets []*Budget `yaml:"budgets"`

	// Log receives warnings while deciding, such as a condition that could
	// not be evaluated; nil discards them.
	Log *slog.Logger `yaml:"-"`
}

// LoadError is one problem in a configuration file.
type LoadError struct {
	File string
	Line int
	Msg  string
	// Detail are lines that show the problem, such as a CEL expression with
	// a caret under the error; Error prints them indented below Msg.
	Detail []string
}

func (e LoadError) Error() string {
	var b strings.Builder
	if e.Line > 0 {
		fmt.Fprintf(&b, "%s:%d: %s", e.File, e.Line, e.Msg)
	} else {
		fmt.Fprintf(&b, "%s: %s", e.File, e.Msg)
	}
	for _, d := range e.Detail {
		b.WriteString("\n    " + d)
	}
	return b.String()
}

// LoadErrors are all the problems found in one file, in file order.
type LoadErrors []LoadError

func (es LoadErrors) Error() string {
	lines := make([]string, len(es))
	for i, e := range es {
		lines[i] = e.Error()
	}
	return strings.Join(lines, "\n")
}

// Provision checks p, just read from the file at p.Path, and derives what
// deciding needs: the default mode and argument bound, compiled rules,
// tenants' globs and budgets. top maps each key of the file, by its path
// from the top, to its line. It returns every problem found, in file order;
// a policy with none can run. Checks that need the rest of the file (a
// rule's upstream) are the caller's.
func (p *Policy) Provision(top map[string]int) LoadErrors {
	var errs LoadErrors
	add := func(line int, format string, args ...any) {
		errs = append(errs, LoadError{File: p.Path, Line: line, Msg: fmt.Sprintf(format, args...)})
	}
	// addRuleErrors adds what compiling a rule found, which knows no file.
	addRuleErrors := func(found []LoadError) {
		for _, e := range found {
			e.File = p.Path
			errs = append(errs, e)
		}
	}
	switch p.DefaultMode {
	case "":
		p.DefaultMode = interlock.ModeFlag
	case interlock.ModeFlag, interlock.ModeDeny:
	case interlock.ModeAllow:
		add(top["default_mode"], "default_mode: allow would let every unannotated tool run unconfirmed; use flag or deny")
	default:
		// token and elicit need what only a rule gives them: a summary for
		// the human, a preview, a form.
		add(top["default_mode"], "default_mode %q is not accepted: use flag or deny, and a rule for the tools that need a token or a form", p.DefaultMode)
	}
	if p.MaxArgumentBytes < 0 {
		add(top["max_argument_bytes"], "max_argument_bytes must be positive")
	} else if p.MaxArgumentBytes == 0 {
		p.MaxArgumentBytes = interlock.DefaultMaxArgumentBytes
	}
	ruleNames := map[string]int{}
	for _, r := range p.Rules {
		if r.Name != "" {
			if line, dup := ruleNames[r.Name]; dup {
				add(r.at("name"), "rule %q is already defined on line %d", r.Name, line)
			}
			ruleNames[r.Name] = r.Line
		}
		addRuleErrors(r.compile(p.IsSecret))
		r.digest = r.definitionDigest("")
	}
	checkTenants(p, ruleNames, add, addRuleErrors)
	checkBudgets(p, add)
	slices.SortStableFunc(errs, func(a, b LoadError) int { return a.Line - b.Line })
	return errs
}

// Parse reads a document that holds only a policy (default_mode,
// max_argument_bytes, redact, rules, tenants, budgets) and provisions it;
// name is used in messages. A whole configuration file is config's to
// read.
func Parse(name string, data []byte) (*Policy, error) {
	p := &Policy{Path: name}
	if len(strings.TrimSpace(string(data))) > 0 {
		if err := yaml.Load(data, p, yaml.WithKnownFields()); err != nil {
			return nil, YAMLErrors(name, data, err)
		}
	}
	if errs := p.EmptyEntries(topLevelLines(data)); len(errs) > 0 {
		return nil, errs
	}
	if errs := p.Provision(topLevelLines(data)); len(errs) > 0 {
		return nil, errs
	}
	return p, nil
}

// EmptyEntries reports each section of p with an empty list item ("-"
// alone), which decodes to nothing: an error the file can be told about,
// not a hole the rest would trip over. top maps each key to its line.
func (p *Policy) EmptyEntries(top map[string]int) LoadErrors {
	var errs LoadErrors
	for _, s := range []struct {
		key   string
		empty bool
	}{{"rules", slices.Contains(p.Rules, nil)}, {"tenants", slices.Contains(p.Tenants, nil)}, {"budgets", slices.Contains(p.Budgets, nil)}} {
		if s.empty {
			errs = append(errs, LoadError{File: p.Path, Line: top[s.key], Msg: fmt.Sprintf("%s has an empty entry (a lone \"-\"): remove it or fill it in", s.key)})
		}
	}
	return errs
}

// topLevelLines maps every key of a YAML document, by its path from the
// top ("default_mode", "rules[1].when"), to its line.
func topLevelLines(data []byte) lines {
	var doc yaml.Node
	if yaml.Load(data, &doc) != nil {
		return lines{}
	}
	return keyLines(&doc)
}

// YAMLErrors turns a YAML library error into file:line messages, the
// mistakes people make most reworded to say what to do.
func YAMLErrors(name string, data []byte, err error) error {
	var les *yaml.LoadErrors
	if errors.As(err, &les) {
		out := make(LoadErrors, 0, len(les.Errors))
		for _, e := range les.Errors {
			out = append(out, LoadError{File: name, Line: e.Mark.Line, Msg: yamlMessage(e.Message)})
		}
		return out
	}
	var le *yaml.LoadError
	if errors.As(err, &le) {
		msg := le.Message
		if le.ContextMsg != "" {
			msg = le.ContextMsg + ": " + msg
		}
		return LoadErrors{{File: name, Line: le.Mark.Line, Msg: syntaxMessage(msg, lineOf(data, le.Mark.Line), le.Mark.Column)}}
	}
	return LoadErrors{{File: name, Msg: err.Error()}}
}

// lineOf returns line n (1-based) of data, "" when there is none.
func lineOf(data []byte, n int) string {
	for i, line := range strings.Split(string(data), "\n") {
		if i+1 == n {
			return line
		}
	}
	return ""
}

// syntaxMessage says what to do about the YAML syntax errors people make
// most, from the line the parser stopped at: a tab in the indentation, a
// value that starts with @ or a backquote (every npm package scope), a
// value holding ": ".
func syntaxMessage(msg, line string, column int) string {
	indent := line[:len(line)-len(strings.TrimLeft(line, " \t"))]
	at := ""
	if column >= 1 && column <= len(line) {
		at = line[column-1:]
	}
	switch {
	case strings.Contains(msg, "cannot start any token") && strings.Contains(indent, "\t"):
		return "a tab in the indentation: YAML indents with spaces only"
	case strings.Contains(msg, "cannot start any token") && (strings.HasPrefix(at, "@") || strings.HasPrefix(at, "`")):
		return fmt.Sprintf("a value that starts with %q must be quoted: write \"%s\"", at[:1], strings.TrimRight(strings.SplitN(at, ",", 2)[0], "] }"))
	case strings.Contains(msg, "mapping values are not allowed"):
		return "a value holds \": \" (a colon and a space), which YAML reads as a new key: quote the whole value, such as when: \"args.path: x\""
	}
	return msg
}

var (
	unknownFieldRE  = regexp.MustCompile(`^field (\S+) not found in type \S+$`)
	stringForListRE = regexp.MustCompile("^cannot construct !!str (`[^`]*`) into \\[\\]string$")
)

// yamlMessage rewords the YAML library's messages in the file's terms.
func yamlMessage(msg string) string {
	msg = strings.TrimPrefix(msg, "yaml: ")
	if m := unknownFieldRE.FindStringSubmatch(msg); m != nil {
		return fmt.Sprintf("unknown field %q: check its spelling and where it is indented", m[1])
	}
	if m := stringForListRE.FindStringSubmatch(msg); m != nil {
		return fmt.Sprintf("a list goes here, not the text %s: write [a, b, c], such as command: [npx, -y, \"@scope/server\"], or one item a line after -", m[1])
	}
	return msg
}
