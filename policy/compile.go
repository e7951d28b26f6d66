package policy

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"text/template"
	tmplparse "text/template/parse"
	"time"
	"unicode/utf8"

	"cel.dev/cel-go/cel"

	"github.com/interlock-mcp/interlock"
)

// A rule compiled at load, as Caddy compiles its expressions: its match
// and override hints checked, its CEL conditions, previews and choices
// type-checked, its templates parsed and refused when they would print a
// secret, its durations read. Every problem is a LoadError at the key's
// line; a rule that compiled cannot fail to decide for any of these
// reasons (decide.go decides).

var hintNames = []string{"readOnlyHint", "destructiveHint", "idempotentHint", "openWorldHint"}

func hintField(h *interlock.Hints, name string) *bool {
	switch name {
	case "readOnlyHint":
		return &h.ReadOnly
	case "destructiveHint":
		return &h.Destructive
	case "idempotentHint":
		return &h.Idempotent
	case "openWorldHint":
		return &h.OpenWorld
	}
	return nil
}

var celEnv = func() *cel.Env {
	env, err := cel.NewEnv(append([]cel.EnvOption{
		cel.Variable("tool", cel.StringType),
		cel.Variable("upstream", cel.StringType),
		cel.Variable("args", cel.MapType(cel.StringType, cel.DynType)),
		cel.Variable("principal", cel.StringType),
		cel.Variable("tenant", cel.StringType),
	}, functions...)...)
	if err != nil {
		panic(err)
	}
	return env
}()

// compile checks the rule and prepares its condition and template. It
// returns every problem found, each naming the rule and at the line of the
// key it is about. isSecret says which argument names are secret.
func (r *Rule) compile(isSecret func(string) bool) []LoadError {
	p := r.problems()
	if r.Mode == "" {
		p.fail("mode", "mode is required: use one of %s", modeNames())
	} else if _, err := interlock.ParseMode(string(r.Mode)); err != nil {
		p.fail("mode", "%v", err)
	}
	r.compileMatch(p.fail)
	r.compileOverride(p.fail)
	r.compileWhen(p)
	r.compileTTL(p.fail)
	r.compilePreview(p)
	r.compileForm(p.fail, isSecret)
	r.compileSummary(p.fail)
	return p.errs
}

// ruleProblems are what is wrong with one rule, in the order found, each
// naming the rule and at the line of the key it is about.
type ruleProblems struct {
	r     *Rule
	label string // how messages name the rule
	errs  []LoadError
}

// problems starts the list of the rule's problems: a rule without a name
// has one already.
func (r *Rule) problems() *ruleProblems {
	p := &ruleProblems{r: r, label: "rule"}
	if r.Name != "" {
		p.label = fmt.Sprintf("rule %q", r.Name)
	} else {
		p.errs = append(p.errs, LoadError{Line: r.Line, Msg: "rule has no name: add name: <what it is for>"})
	}
	return p
}

// fail records a problem with the rule's key.
func (p *ruleProblems) fail(key, format string, args ...any) {
	p.errs = append(p.errs, LoadError{Line: p.r.at(key), Msg: p.label + ": " + fmt.Sprintf(format, args...)})
}

// celFailed records the issues of the CEL expression expr, written at
// key, which messages call what.
func (p *ruleProblems) celFailed(key, what, expr string, iss *cel.Issues) {
	p.errs = append(p.errs, celErrors(p.r.at(key), p.label+": "+what, expr, iss)...)
}

// compileMatch compiles the tool globs of match and checks the names of
// the annotations it asks for.
func (r *Rule) compileMatch(fail func(string, string, ...any)) {
	r.globs = r.globs[:0]
	for i, g := range r.Match.Tools {
		re, err := compileGlob(g)
		if err != nil {
			fail(fmt.Sprintf("match.tools[%d]", i), "tool glob %q %v", g, err)
			continue
		}
		r.globs = append(r.globs, re)
	}
	checkHintNames(fail, "match.annotations", r.Match.Annotations)
}

// compileOverride checks the names of the annotations the rule overrides
// and prepares the override of the matched tools' hints.
func (r *Rule) compileOverride(fail func(string, string, ...any)) {
	checkHintNames(fail, "annotations", r.Annotations)
	if len(r.Annotations) > 0 {
		set := r.Annotations
		r.override = func(h interlock.Hints) interlock.Hints {
			for name, v := range set {
				*hintField(&h, name) = v
			}
			return h
		}
	}
}

// checkHintNames refuses, under key, the names in hints that are not
// hints of the specification.
func checkHintNames(fail func(string, string, ...any), key string, hints map[string]bool) {
	for _, name := range slices.Sorted(maps.Keys(hints)) {
		if hintField(&interlock.Hints{}, name) == nil {
			fail(key+"."+name, "unknown annotation %q: use %s", name, strings.Join(hintNames, ", "))
		}
	}
}

// compileWhen compiles the rule's condition, which must be boolean, and
// notes which arguments it reads.
func (r *Rule) compileWhen(p *ruleProblems) {
	if r.When == "" {
		return
	}
	ast, iss := celEnv.Compile(r.When)
	if iss.Err() != nil {
		p.celFailed("when", "when", r.When, iss)
	} else if ast.OutputType() != cel.BoolType && ast.OutputType() != cel.DynType {
		p.fail("when", "when must be a boolean expression, not %s", ast.OutputType())
	} else if prg, err := celEnv.Program(ast); err != nil {
		p.fail("when", "when: %v", err)
	} else {
		r.program = prg
		r.reads, r.readsAll = argsRead(ast)
	}
}

// compileTTL reads how long a confirm token of mode token lives.
func (r *Rule) compileTTL(fail func(string, string, ...any)) {
	if r.TTL == "" {
		return
	}
	d, ok := dayDuration(fail, "ttl", r.TTL, "90s or 5m")
	if !ok {
		return
	}
	if r.Mode != interlock.ModeToken {
		fail("ttl", "ttl applies only to mode token")
		return
	}
	r.ttl = d
}

// dayDuration reads the duration at key, which must be between 1s and
// 24h; ok is false when it is refused. example is what a message shows.
func dayDuration(fail func(string, string, ...any), key, value, example string) (d time.Duration, ok bool) {
	d, err := time.ParseDuration(value)
	switch {
	case err != nil:
		fail(key, "%s %q is not a duration such as %s", key, value, example)
	case d < time.Second || d > 24*time.Hour:
		fail(key, "%s %s must be between 1s and 24h", key, value)
	default:
		return d, true
	}
	return 0, false
}

// compilePreview checks that a preview names its tool and compiles the
// CEL expression of each of its arguments, noting which of the call's
// arguments each reads.
func (r *Rule) compilePreview(p *ruleProblems) {
	if r.Preview == nil {
		return
	}
	if r.Preview.Tool == "" {
		p.fail("preview.tool", "preview needs tool: the read-only tool to call")
	}
	r.previewArgs = map[string]cel.Program{}
	for _, name := range slices.Sorted(maps.Keys(r.Preview.Args)) {
		key := "preview.args." + name
		ast, iss := celEnv.Compile(r.Preview.Args[name])
		if iss.Err() != nil {
			p.celFailed(key, "preview argument "+name, r.Preview.Args[name], iss)
			continue
		}
		prg, err := celEnv.Program(ast)
		if err != nil {
			p.fail(key, "preview argument %s: %v", name, err)
			continue
		}
		r.previewArgs[name] = prg
		if reads, all := argsRead(ast); !all {
			if r.previewReads == nil {
				r.previewReads = map[string][]string{}
			}
			r.previewReads[name] = reads
		}
	}
}

// compileSummary parses the summary's template.
func (r *Rule) compileSummary(fail func(string, string, ...any)) {
	if r.Summary == "" {
		return
	}
	t, err := template.New(r.Name).Funcs(templateFuncs).Option("missingkey=error").Parse(r.Summary)
	if err != nil {
		fail("summary", "summary: %v", err)
	} else {
		r.summary = t
	}
}

// celVocabulary says what a condition or preview argument may use, for
// messages about one that does not compile.
const celVocabulary = "variables: tool, upstream, args, principal, tenant; " +
	"functions interlock adds: cleanPath(path), isUnder(path, dir), num(value)"

// celErrors turns the issues of the CEL expression expr, written at line,
// into load errors that show the expression's line with a caret under the
// problem, and what an expression may use.
func celErrors(line int, what, expr string, iss *cel.Issues) []LoadError {
	exprLines := strings.Split(expr, "\n")
	var out []LoadError
	for _, e := range iss.Errors() {
		le := LoadError{Line: line, Msg: what + ": " + e.Message}
		if n, col := e.Location.Line(), e.Location.Column(); n >= 1 && n <= len(exprLines) && col >= 0 {
			src := strings.ReplaceAll(exprLines[n-1], "\t", " ")
			le.Detail = []string{src, strings.Repeat(" ", min(col, utf8.RuneCountInString(src))) + "^"}
		}
		out = append(out, le)
	}
	if len(out) > 0 {
		last := &out[len(out)-1]
		last.Detail = append(last.Detail, celVocabulary)
	}
	return out
}

// compileForm checks the fields of mode elicit.
func (r *Rule) compileForm(fail func(string, string, ...any), isSecret func(string) bool) {
	if r.Mode == interlock.ModeApproval {
		r.compileApproval(fail)
	} else if len(r.Approvers) > 0 || r.Quorum != 0 {
		fail("approvers", "approvers and quorum apply only to mode approval")
	} else if r.RequirePasskey {
		fail("require_passkey", "require_passkey applies only to mode approval")
	} else if r.RunWithin != "" {
		fail("run_within", "run_within applies only to mode approval")
	} else if r.MaxPending != 0 {
		fail("max_pending", "max_pending applies only to mode approval")
	}
	if r.Mode != interlock.ModeElicit {
		for _, f := range []struct {
			key string
			set bool
		}{{"fallback", r.Fallback != ""}, {"timeout", r.Timeout != "" && r.Mode != interlock.ModeApproval}, {"confirm", r.Confirm != ""}, {"type_back", r.TypeBack != ""}, {"choices", len(r.Choices) > 0}} {
			if f.set {
				fail(f.key, "%s applies only to mode elicit", f.key)
			}
		}
		return
	}
	switch r.Fallback {
	case "", interlock.ModeToken, interlock.ModeDeny:
	default:
		fail("fallback", "fallback must be token or deny, not %q: a client that cannot show a form must never be let through", r.Fallback)
	}
	if r.Timeout != "" {
		if d, ok := dayDuration(fail, "timeout", r.Timeout, "5m"); ok {
			r.timeout = d
		}
	}
	if r.TypeBack != "" {
		t, err := template.New(r.Name).Funcs(templateFuncs).Option("missingkey=error").Parse(r.TypeBack)
		switch secrets := secretsIn(t, isSecret); {
		case err != nil:
			fail("type_back", "type_back: %v", err)
		case len(secrets) > 0:
			fail("type_back", "type_back names the secret argument %s: a form must never ask for a secret", strings.Join(secrets, ", "))
		default:
			r.typeBack = t
		}
	}
	for _, name := range slices.Sorted(maps.Keys(r.Choices)) {
		ch, key := r.Choices[name], "choices."+name
		switch {
		case ch == nil || len(ch.Options) == 0:
			fail(key, "choice %s needs options: the values the human picks from", name)
		case name == "confirm" || name == "type_back":
			fail(key, "choice %s clashes with the form's own field of that name", name)
		case isSecret(name):
			fail(key, "choice %s is a secret argument: a form must never ask for a secret", name)
		default:
			title := ch.Title
			if title == "" {
				title = name
			}
			r.choices = append(r.choices, interlock.Choice{Arg: name, Title: title, Options: ch.Options})
		}
	}
}

// compileApproval checks the fields of mode approval.
func (r *Rule) compileApproval(fail func(string, string, ...any)) {
	if len(r.Approvers) == 0 {
		fail("mode", "mode approval needs approvers: the principals or groups (group:NAME) who may approve")
	}
	for _, a := range r.Approvers {
		if strings.TrimSpace(a) == "" || a == "group:" {
			fail("approvers", "an approver must name a principal or a group (group:NAME)")
		}
	}
	if r.MaxPending < 0 || r.MaxPending > 10000 {
		fail("max_pending", "max_pending must be between 1 and 10000")
	}
	if r.Quorum < 0 || r.Quorum > 100 {
		fail("quorum", "quorum must be between 1 and 100")
	} else if r.Quorum > len(r.Approvers) && !slices.ContainsFunc(r.Approvers, func(a string) bool { return strings.HasPrefix(a, "group:") }) {
		fail("quorum", "quorum %d is more than the %d approvers named: no call could ever be approved", r.Quorum, len(r.Approvers))
	}
	if r.Timeout != "" {
		d, err := time.ParseDuration(r.Timeout)
		if err != nil || d < time.Second || d > 24*time.Hour {
			fail("timeout", "timeout %q must be a duration between 1s and 24h, such as 15m", r.Timeout)
		}
		r.timeout = d
	}
	if r.RunWithin != "" {
		d, err := time.ParseDuration(r.RunWithin)
		if err != nil || d < time.Second || d > 24*time.Hour {
			fail("run_within", "run_within %q must be a duration between 1s and 24h, such as 10m: how long an approved call may wait to run", r.RunWithin)
		}
		r.runWithin = d
	}
}

// secretsIn returns every name and string constant in a template that
// names a secret argument, however the template spells its way there:
// .args.password, index .args "password", a variable, a with block. The
// template renders over redacted arguments anyway, so what this misses
// (a name built at run time) shows [REDACTED] and is refused then; this
// check makes the mistake a load error instead.
func secretsIn(t *template.Template, isSecret func(string) bool) []string {
	var out []string
	note := func(s string) {
		if s != "" && isSecret(s) && !slices.Contains(out, s) {
			out = append(out, s)
		}
	}
	walkTemplate(t, func(n tmplparse.Node) {
		var names []string
		switch n := n.(type) {
		case *tmplparse.FieldNode:
			names = n.Ident
		case *tmplparse.ChainNode:
			names = n.Field
		case *tmplparse.VariableNode:
			names = n.Ident
		case *tmplparse.StringNode:
			names = []string{n.Text}
		}
		for _, name := range names {
			note(name)
		}
	})
	return out
}

// walkTemplate calls visit for every node of every template in t, depth
// first; nothing when t is nil.
func walkTemplate(t *template.Template, visit func(tmplparse.Node)) {
	if t == nil {
		return
	}
	var walk func(tmplparse.Node)
	branch := func(n *tmplparse.BranchNode) {
		walk(n.Pipe)
		walk(n.List)
		walk(n.ElseList)
	}
	walk = func(n tmplparse.Node) {
		visit(n)
		switch n := n.(type) {
		case *tmplparse.ListNode:
			if n != nil {
				for _, c := range n.Nodes {
					walk(c)
				}
			}
		case *tmplparse.ActionNode:
			walk(n.Pipe)
		case *tmplparse.PipeNode:
			if n != nil {
				for _, c := range n.Cmds {
					walk(c)
				}
			}
		case *tmplparse.CommandNode:
			for _, a := range n.Args {
				walk(a)
			}
		case *tmplparse.ChainNode:
			walk(n.Node)
		case *tmplparse.IfNode:
			branch(&n.BranchNode)
		case *tmplparse.RangeNode:
			branch(&n.BranchNode)
		case *tmplparse.WithNode:
			branch(&n.BranchNode)
		case *tmplparse.TemplateNode:
			walk(n.Pipe)
		}
	}
	for _, tt := range t.Templates() {
		if tt.Tree != nil {
			walk(tt.Root)
		}
	}
}

func modeNames() string {
	names := make([]string, len(interlock.Modes))
	for i, m := range interlock.Modes {
		names[i] = string(m)
	}
	return strings.Join(names, ", ")
}
