package policy

import (
	"crypto/sha256"
	"encoding/hex"
	"regexp"
	"slices"
	"text/template"
	"time"

	"cel.dev/cel-go/cel"
	"go.yaml.in/yaml/v4"

	"github.com/interlock-mcp/interlock"
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
	// MaxPending is how many approvals under the rule one caller may have
	// waiting at once (interlock.DefaultMaxPending when absent): each new
	// one tells every approver.
	MaxPending int `yaml:"max_pending"`
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
