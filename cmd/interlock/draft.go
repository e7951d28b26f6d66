package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"
	"unicode"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.yaml.in/yaml/v4"

	"github.com/interlock-mcp/interlock/config"
	"github.com/interlock-mcp/interlock/policy"
)

// The configuration init proposes: the client's servers as upstreams, and
// a rule drafted for each tool that is not read-only, from the annotations,
// schema and names of the tools its server lists.

// str is a YAML string scalar, quoted when it would otherwise read as
// something else (true, 12, @scope/pkg).
func str(v string) *yaml.Node { return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: v} }

func mapping(flow bool, kv ...*yaml.Node) *yaml.Node {
	n := &yaml.Node{Kind: yaml.MappingNode, Content: kv}
	if flow {
		n.Style = yaml.FlowStyle
	}
	return n
}

func sequence(values ...string) *yaml.Node {
	n := &yaml.Node{Kind: yaml.SequenceNode, Style: yaml.FlowStyle}
	for _, v := range values {
		n.Content = append(n.Content, str(v))
	}
	return n
}

func stringMap(m map[string]string) *yaml.Node {
	n := mapping(false)
	for _, k := range slices.Sorted(maps.Keys(m)) {
		n.Content = append(n.Content, str(k), str(m[k]))
	}
	return n
}

// serverNode is a client's server entry as interlock's YAML holds it.
func serverNode(s *config.ClientServer) *yaml.Node {
	n := mapping(false)
	add := func(k string, v *yaml.Node) { n.Content = append(n.Content, str(k), v) }
	if s.Type != "" {
		add("type", str(s.Type))
	}
	if s.Command != "" {
		add("command", str(s.Command))
	}
	if len(s.Args) > 0 {
		add("args", sequence(s.Args...))
	}
	if len(s.Env) > 0 {
		add("env", stringMap(s.Env))
	}
	if s.Cwd != "" {
		add("cwd", str(s.Cwd))
	}
	if s.URL != "" {
		add("url", str(s.URL))
	}
	if len(s.Headers) > 0 {
		add("headers", stringMap(s.Headers))
	}
	if s.Disabled {
		add("disabled", &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!bool", Value: "true"})
	}
	return n
}

// starterYAML is the starter configuration, and for each upstream listed
// how many of its tools are read-only, destructive and other writes: a
// head that says what the file is, the client's servers, and the rules
// drafted for the tools of each upstream that listed them.
func starterYAML(from, out string, servers map[string]*config.ClientServer, upstreams []*config.Upstream,
	tools []policy.OfferedTool, listed map[string]*mcp.Tool, failed map[string]string) ([]byte, map[string][3]int, error) {
	var doc bytes.Buffer
	fmt.Fprintf(&doc, `# interlock's configuration, proposed by interlock init from %s: the client's
# servers as they were, and a rule for each tool that is not read-only, from the annotations its server
# lists. Read-only tools need no rule: they run. Change what does not fit, then check the file with
#   interlock check --config %s --connect

# Tools no rule matches: read-only ones run, every other one needs both keys (MCP_DRY_RUN=false in
# interlock's environment, and the argument "__confirm": true in the call).
default_mode: flag

`, from, out)
	part, err := serversYAML(servers, failed)
	if err != nil {
		return nil, nil, err
	}
	doc.Write(part)

	d := &ruleDraft{rules: &yaml.Node{Kind: yaml.SequenceNode}, names: map[string]bool{}, counts: map[string][3]int{}, listed: listed}
	for _, u := range upstreams {
		if _, down := failed[u.Name]; down {
			continue
		}
		own := slices.DeleteFunc(slices.Clone(tools), func(t policy.OfferedTool) bool { return t.Upstream != u.Name })
		// An upstream none of whose tools has a rule is named by a
		// comment of its own.
		if drafted := d.draftUpstream(u.Name, own); !drafted.named && len(own) > 0 {
			doc.WriteString("\n# " + strings.ReplaceAll(serverComment(u.Name, own, drafted.readOnly), "\n", "\n# ") + "\n")
		}
	}
	if len(d.rules.Content) > 0 {
		part, err := yaml.Dump(mapping(false, str("rules"), d.rules), yamlStyle...)
		if err != nil {
			return nil, nil, err
		}
		doc.WriteString("\n# Rules are tried in order; the first that matches decides.\n")
		doc.Write(part)
	}
	return doc.Bytes(), d.counts, nil
}

// serversYAML is the client's servers as interlock's mcpServers, each
// whose tools were not listed under a comment that says why it has no
// rules.
func serversYAML(servers map[string]*config.ClientServer, failed map[string]string) ([]byte, error) {
	srv := mapping(false)
	for _, name := range slices.Sorted(maps.Keys(servers)) {
		k := str(name)
		if why, ok := failed[name]; ok {
			k.HeadComment = fmt.Sprintf("Its tools were not listed (%s), so no rules are proposed for it.\n"+
				"Until they are, default_mode decides its calls: read-only tools run, every other one needs both keys.", why)
		}
		srv.Content = append(srv.Content, k, serverNode(servers[name]))
	}
	return yaml.Dump(mapping(false, str("mcpServers"), srv), yamlStyle...)
}

// ruleDraft is the rules of the starter configuration as they are drafted,
// upstream by upstream, each under a name no other rule has; and for each
// upstream how many of its tools are read-only, destructive and other
// writes.
type ruleDraft struct {
	rules  *yaml.Node
	names  map[string]bool
	counts map[string][3]int
	listed map[string]*mcp.Tool
}

// upstreamDraft is what a draft knows of one upstream's tools.
type upstreamDraft struct {
	name             string
	own              []policy.OfferedTool
	readOnly, writes []string
	// named is whether the upstream's tools are named yet, in the comment
	// of its first rule.
	named bool
	// count is how many tools are read-only, destructive and other writes.
	count [3]int
}

// unique is name, or name with a number after it when a rule has it.
func (d *ruleDraft) unique(name string) string {
	n := name
	for i := 2; d.names[n]; i++ {
		n = fmt.Sprintf("%s-%d", name, i)
	}
	d.names[n] = true
	return n
}

// draftUpstream drafts the rules of one upstream's tools: none for a
// read-only tool, one of its own for a destructive tool or one that can be
// previewed, and one in mode flag for all its other writes.
func (d *ruleDraft) draftUpstream(name string, own []policy.OfferedTool) *upstreamDraft {
	u := &upstreamDraft{name: name, own: own}
	for _, t := range own {
		if t.Hints.ReadOnly {
			u.readOnly = append(u.readOnly, t.Name)
			u.count[0]++
		}
	}
	for _, t := range own {
		if t.Hints.ReadOnly {
			continue
		}
		preview := previewFor(t, own, d.listed)
		if !t.Hints.Destructive && preview == "" {
			u.writes = append(u.writes, t.Name)
			u.count[2]++
			continue
		}
		d.toolRule(u, t, preview)
	}
	if len(u.writes) > 0 {
		d.writesRule(u)
	}
	d.counts[name] = u.count
	return u
}

// toolRule drafts the rule of one tool: mode token for a destructive one,
// else flag, and the preview, if any, that shows what a call would do.
func (d *ruleDraft) toolRule(u *upstreamDraft, t policy.OfferedTool, preview string) {
	mode := "token"
	if t.Hints.Destructive {
		u.count[1]++
	} else {
		mode = "flag"
		u.count[2]++
	}
	rule := mapping(false,
		str("name"), str(d.unique(ruleName(t.Name))),
		str("match"), mapping(true, str("tools"), sequence(t.Name), str("upstream"), str(u.name)),
		str("mode"), str(mode))
	comment := t.Name + ": " + reason(t, d.listed[t.Name])
	if preview != "" {
		args := mapping(true)
		for _, a := range argsOf(u.own, preview) {
			args.Content = append(args.Content, str(a), str(celArg(a)))
		}
		rule.Content = append(rule.Content, str("preview"), mapping(true, str("tool"), str(preview), str("args"), args))
		comment += fmt.Sprintf("; %s, read-only, takes the same %s, so it previews the call", preview, strings.Join(argsOf(u.own, preview), ", "))
	}
	rule.Content = append(rule.Content, str("summary"), str(summaryFor(t, d.listed[t.Name])))
	d.add(u, rule, comment+".")
}

// writesRule drafts one rule in mode flag for the upstream's writes that
// are neither destructive nor previewed, saying why of each.
func (d *ruleDraft) writesRule(u *upstreamDraft) {
	rule := mapping(false,
		str("name"), str(d.unique(ruleName(u.name)+"-writes")),
		str("match"), mapping(true, str("tools"), sequence(u.writes...), str("upstream"), str(u.name)),
		str("mode"), str("flag"))
	var why []string
	for _, w := range u.writes {
		t := u.own[slices.IndexFunc(u.own, func(t policy.OfferedTool) bool { return t.Name == w })]
		why = append(why, w+": "+reason(t, d.listed[w]))
	}
	d.add(u, rule, strings.Join(why, ".\n")+".")
}

// add puts a rule in the draft under its comment; the upstream's first
// rule also names its tools.
func (d *ruleDraft) add(u *upstreamDraft, rule *yaml.Node, comment string) {
	if !u.named {
		u.named = true
		comment = serverComment(u.name, u.own, u.readOnly) + "\n" + comment
	}
	rule.HeadComment = comment
	d.rules.Content = append(d.rules.Content, rule)
}

var yamlStyle = []yaml.Option{yaml.WithIndent(2), yaml.WithCompactSeqIndent(false), yaml.WithLineWidth(-1), yaml.WithQuotePreference(yaml.QuoteDouble)}

// serverComment names a server's tools and those that need no rule.
func serverComment(name string, own []policy.OfferedTool, readOnly []string) string {
	s := fmt.Sprintf("%s: %d tools.", name, len(own))
	if len(readOnly) > 0 {
		s += " Read-only per their annotations, so they run without a rule: " + strings.Join(readOnly, ", ") + "."
	}
	return s
}

// reason says why a rule is proposed for a tool that is not read-only.
func reason(t policy.OfferedTool, listed *mcp.Tool) string {
	var a *mcp.ToolAnnotations
	if listed != nil {
		a = listed.Annotations
	}
	var s string
	switch {
	case a == nil:
		s = "no annotations: treated as destructive"
	case !t.Hints.Destructive:
		s = "writes, not destructive per its annotations"
	case a.DestructiveHint == nil:
		s = "its annotations do not say whether it is destructive: treated as destructive"
	default:
		s = "destructive per its annotations"
	}
	if a != nil {
		var also []string
		if t.Hints.Idempotent {
			also = append(also, "idempotent")
		}
		if t.Hints.OpenWorld {
			also = append(also, "open-world")
		} else {
			also = append(also, "closed-world")
		}
		s += " (" + strings.Join(also, ", ") + ")"
	}
	return s
}

var identRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// celArg is the CEL expression that reads a call's argument.
func celArg(name string) string {
	if identRE.MatchString(name) {
		return "args." + name
	}
	b, _ := json.Marshal(name)
	return "args[" + string(b) + "]"
}

// summaryFor names the tool and its arguments: required ones always there,
// optional ones only when the call gives them (a template reading a
// missing one would fall back to the generic summary).
func summaryFor(t policy.OfferedTool, listed *mcp.Tool) string {
	required := requiredOf(listed)
	// Required arguments come first; optional ones bring their own
	// separator, as a call may leave them out.
	var text string
	for _, a := range t.Arguments {
		if !slices.Contains(required, a) {
			continue
		}
		if text != "" {
			text += ", "
		}
		value := fmt.Sprintf("{{index .args %s}}", quoted(a))
		if identRE.MatchString(a) {
			value = fmt.Sprintf("{{.args.%s}}", a)
		}
		if structuredArg(listed, a) {
			// An array or object reads as JSON, not as Go's map[k:v].
			value = fmt.Sprintf("{{json (index .args %s)}}", quoted(a))
		}
		text += a + ": " + value
	}
	for _, a := range t.Arguments {
		if !slices.Contains(required, a) {
			value := "{{.}}"
			if structuredArg(listed, a) {
				value = "{{json .}}"
			}
			text += fmt.Sprintf("{{with index .args %s}}, %s: %s{{end}}", quoted(a), a, value)
		}
	}
	if text == "" {
		return "Call " + t.Name + "."
	}
	return "Call " + t.Name + " (" + text + ")."
}

// quoted is s as a template's string literal.
func quoted(s string) string {
	q, _ := json.Marshal(s)
	return string(q)
}

// structuredArg reports whether t's input schema says the argument name is
// an array or an object.
func structuredArg(t *mcp.Tool, name string) bool {
	if t == nil {
		return false
	}
	raw, err := json.Marshal(t.InputSchema)
	if err != nil {
		return false
	}
	var schema struct {
		Properties map[string]struct {
			Type any `json:"type"`
		} `json:"properties"`
	}
	_ = json.Unmarshal(raw, &schema)
	switch ty := schema.Properties[name].Type.(type) {
	case string:
		return ty == "array" || ty == "object"
	case []any:
		return slices.Contains(ty, any("array")) || slices.Contains(ty, any("object"))
	}
	return false
}

// requiredOf lists the arguments a tool's input schema requires.
func requiredOf(t *mcp.Tool) []string {
	if t == nil {
		return nil
	}
	raw, err := json.Marshal(t.InputSchema)
	if err != nil {
		return nil
	}
	var schema struct {
		Required []string `json:"required"`
	}
	_ = json.Unmarshal(raw, &schema)
	return schema.Required
}

func argsOf(tools []policy.OfferedTool, name string) []string {
	if i := slices.IndexFunc(tools, func(t policy.OfferedTool) bool { return t.Name == name }); i >= 0 {
		return tools[i].Arguments
	}
	return nil
}

// previewFor picks a read-only tool of the same upstream that can preview
// a call of t: it takes only arguments t requires, so they are there on
// every call, and either takes exactly t's arguments as the only such tool
// or shares a word of its name with t's (get_file_info for delete_file).
// It returns "" when none fits, and for a tool that makes what it names
// (see creates).
func previewFor(t policy.OfferedTool, own []policy.OfferedTool, listed map[string]*mcp.Tool) string {
	required := requiredOf(listed[t.Name])
	words := nameWords(t.Name)
	if creates(words) {
		return ""
	}
	type candidate struct {
		name   string
		shared int
		same   bool
	}
	var cands []candidate
	for _, r := range own {
		if !r.Hints.ReadOnly || len(r.Arguments) == 0 {
			continue
		}
		// It reads the same thing only when it takes every argument that
		// names the object (an id, a number, a path): list_issue_types
		// {owner} shares owner with update_issue but reads no issue.
		names := slices.DeleteFunc(slices.Clone(required), func(a string) bool { return !identifierRE.MatchString(a) })
		if !slices.ContainsFunc(r.Arguments, func(a string) bool { return !slices.Contains(required, a) }) &&
			!slices.ContainsFunc(names, func(a string) bool { return !slices.Contains(r.Arguments, a) }) {
			shared := 0
			for _, w := range nameWords(r.Name) {
				if slices.Contains(words, w) {
					shared++
				}
			}
			cands = append(cands, candidate{r.Name, shared, slices.Equal(r.Arguments, t.Arguments)})
		}
	}
	slices.SortStableFunc(cands, func(a, b candidate) int {
		if a.shared != b.shared {
			return b.shared - a.shared
		}
		if a.same != b.same {
			if a.same {
				return -1
			}
			return 1
		}
		return strings.Compare(a.name, b.name)
	})
	if len(cands) == 0 {
		return ""
	}
	if best := cands[0]; best.shared > 0 {
		return best.name
	}
	same := slices.DeleteFunc(cands, func(c candidate) bool { return !c.same })
	if len(same) == 1 {
		return same[0].name
	}
	return ""
}

// identifierRE matches an argument name that names the object a tool acts
// on: id, customer_id, issueNumber, path, uri, key, slug, sha.
var identifierRE = regexp.MustCompile(`(?i)(^|_|-)(id|number|name|path|uri|url|key|slug|sha)$|[a-z](Id|ID|Number|Name|Path|Uri|URI|Url|URL|Key|Slug|Sha|SHA)$`)

// nameWords splits a tool name into lower-case words, a plural's s
// dropped: delete_customer and list_customers share "customer".
func nameWords(name string) []string {
	var words []string
	for _, w := range strings.FieldsFunc(name, func(r rune) bool { return !unicode.IsLetter(r) && !unicode.IsDigit(r) }) {
		start := 0
		runes := []rune(w)
		for i := 1; i <= len(runes); i++ {
			if i == len(runes) || (unicode.IsUpper(runes[i]) && unicode.IsLower(runes[i-1])) {
				part := strings.ToLower(string(runes[start:i]))
				if len(part) > 3 {
					part = strings.TrimSuffix(part, "s")
				}
				words = append(words, part)
				start = i
			}
		}
	}
	return words
}

// ruleName is a tool's name as a rule's: words joined by dashes.
func ruleName(tool string) string {
	return strings.Join(strings.FieldsFunc(tool, func(r rune) bool { return r == '_' || r == ' ' }), "-")
}

// makingVerbs begin the names of tools that may make what they name.
var makingVerbs = []string{"write", "create", "add", "new", "make", "put", "upload", "insert", "post", "save", "mkdir"}

// creates reports whether a tool named by words may make what it names
// (write_file, create_directory): a preview that reads the thing would
// fail for a new one, and a failing preview refuses the call, so such a
// tool gets none.
func creates(words []string) bool {
	return len(words) > 0 && slices.Contains(makingVerbs, words[0])
}
