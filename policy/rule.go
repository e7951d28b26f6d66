package policy

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"log/slog"
	"maps"
	"regexp"
	"slices"
	"strings"
	"text/template"
	tmplparse "text/template/parse"
	"time"
	"unicode/utf8"

	"cel.dev/cel-go/cel"
	"go.yaml.in/yaml/v4"

	"github.com/interlock-mcp/interlock"
	"github.com/interlock-mcp/interlock/redact"
)

// Rule decides the mode of the calls it matches.
type Rule struct {
	// Name identifies the rule in logs and errors.
	Name  string `yaml:"name"`
	Match Match  `yaml:"match"`
	// When is a CEL expression over tool, upstream, args, principal and
	// tenant; the rule applies only when it is true.
	When string         `yaml:"when"`
	Mode interlock.Mode `yaml:"mode"`
	// Summary is a Go text/template over .tool, .args, .principal and
	// .tenant: what the call will do, in words for a human.
	Summary string `yaml:"summary"`
	// Annotations override the hints that the matched tools advertise and
	// that later rules match on.
	Annotations map[string]bool `yaml:"annotations"`
	// TTL is how long a confirm token lives (mode token), as a Go duration
	// such as 90s; 60s when absent.
	TTL string `yaml:"ttl"`
	// Preview names a read-only tool to call before asking for
	// confirmation; its result is .preview in the summary template.
	Preview *Preview `yaml:"preview"`

	// Mode elicit: the mode that applies when the client cannot show a form
	// (token or deny; token when absent), how long the form may stay
	// unanswered, and what it asks.
	Fallback interlock.Mode `yaml:"fallback"`
	Timeout  string         `yaml:"timeout"`
	// Confirm labels the form's checkbox.
	Confirm string `yaml:"confirm"`
	// TypeBack is a template for a value the human must type exactly.
	TypeBack string `yaml:"type_back"`
	// Choices are arguments the human picks instead of the model.
	Choices map[string]*Choice `yaml:"choices"`

	// Mode approval: who may approve (principals, or "group:NAME"), and
	// how many distinct people must (1 when absent). Timeout bounds the
	// wait, 15m when absent.
	Approvers []string `yaml:"approvers"`
	Quorum    int      `yaml:"quorum"`
	// RequirePasskey accepts only decisions approvers sign with their
	// passkey in the console; REST and CLI decisions are refused.
	RequirePasskey bool `yaml:"require_passkey"`
	// RunWithin bounds how long an approved call may wait to run, from
	// the vote that approved it; the timeout when absent.
	RunWithin string `yaml:"run_within"`
	// Optional names arguments the rule's when, summary and preview may
	// read although some tool it matches does not take them: interlock
	// check --connect then does not report them.
	Optional []string `yaml:"optional"`

	Line  int `yaml:"-"`
	lines lines

	globs   []*regexp.Regexp
	program cel.Program
	// reads are the arguments the condition reads by name; readsAll is
	// set when it reads args otherwise (whole, or at a computed key).
	reads       []string
	readsAll    bool
	summary     *template.Template
	override    func(interlock.Hints) interlock.Hints
	ttl         time.Duration
	previewArgs map[string]cel.Program
	timeout     time.Duration
	typeBack    *template.Template
	choices     []interlock.Choice
	runWithin   time.Duration
	// previewReads are the arguments each preview argument's expression
	// reads by name.
	previewReads map[string][]string
	// digest identifies the rule's definition and where it is written
	// (shared, or a tenant's overlay); a standing grant is bound to it.
	digest string
}

// definitionDigest is the hex SHA-256 of the rule's definition, as YAML
// writes its fields back, in scope ("" for the shared rules, a tenant's
// name for its overlay). Where the rule stands in the file is not part of
// it: moving a rule changes which calls it decides, and that is checked on
// each call.
func (r *Rule) definitionDigest(scope string) string {
	b, err := yaml.Marshal(r)
	if err != nil {
		// Every field is a plain value; a rule that cannot be written
		// back stands for nothing a grant could be bound to.
		return ""
	}
	h := sha256.New()
	h.Write([]byte("interlock rule v1\x00" + scope + "\x00"))
	h.Write(b)
	return hex.EncodeToString(h.Sum(nil))
}

// Digests returns the digest of every rule of the policy, shared and the
// tenants' overlays, by rule name.
func (p *Policy) Digests() map[string][]string {
	out := map[string][]string{}
	for _, rules := range p.ruleLists() {
		for _, r := range rules {
			out[r.Name] = append(out[r.Name], r.digest)
		}
	}
	return out
}

// Stands reports whether the policy has a rule of that name and digest:
// the rule a standing grant was made under, unchanged.
func (p *Policy) Stands(rule, digest string) bool {
	return digest != "" && slices.Contains(p.Digests()[rule], digest)
}

// Choice is an argument a human picks in the form, from fixed options.
type Choice struct {
	Title   string   `yaml:"title"`
	Options []string `yaml:"options"`
}

// Preview is a call of a read-only tool that shows what a gated call will
// touch. Each argument is a CEL expression over the call, such as
// args.customer_id.
type Preview struct {
	Tool string            `yaml:"tool"`
	Args map[string]string `yaml:"args"`
}

// Match selects tools by name, upstream and hints. Every field that is set
// must match.
type Match struct {
	// Tools are globs over the tool name as clients see it: '*' matches
	// any characters, '/' included (see compileGlob).
	Tools    []string `yaml:"tools"`
	Upstream string   `yaml:"upstream"`
	// Annotations are hints the tool must have, after the specification's
	// defaults and earlier overrides: readOnlyHint, destructiveHint,
	// idempotentHint, openWorldHint.
	Annotations map[string]bool `yaml:"annotations"`
}

// UnmarshalYAML records where the rule and each of its keys start, for
// messages, and rejects unknown fields.
func (r *Rule) UnmarshalYAML(n *yaml.Node) error {
	type plain Rule
	r.Line, r.lines = n.Line, keyLines(n)
	return n.Load((*plain)(r), yaml.WithKnownFields())
}

// at returns the line of the rule's key at path (such as "when",
// "match.tools[1]" or "choices.environment"), or of the rule itself when
// the key is not written.
func (r *Rule) at(path string) int { return r.lines.At(path, r.Line) }

// At is at, for config's checks of what a rule names outside the policy,
// such as match.upstream.
func (r *Rule) At(path string) int { return r.at(path) }

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
		switch n := n.(type) {
		case *tmplparse.FieldNode:
			for _, id := range n.Ident {
				note(id)
			}
		case *tmplparse.ChainNode:
			for _, id := range n.Field {
				note(id)
			}
		case *tmplparse.VariableNode:
			for _, id := range n.Ident {
				note(id)
			}
		case *tmplparse.StringNode:
			note(n.Text)
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
			walk(n.Pipe)
			walk(n.List)
			walk(n.ElseList)
		case *tmplparse.RangeNode:
			walk(n.Pipe)
			walk(n.List)
			walk(n.ElseList)
		case *tmplparse.WithNode:
			walk(n.Pipe)
			walk(n.List)
			walk(n.ElseList)
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

// A policy is what the gate asks; the guard fails the build when it stops
// being one.
var _ interlock.Policy = (*Policy)(nil)

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
