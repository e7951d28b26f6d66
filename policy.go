package interlock

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/interlock-mcp/interlock/redact"
)

// Mode is what a decision demands before a call may run.
type Mode string

// The modes interlock implements.
const (
	// ModeAllow lets the call through with no per-call key (read-only tools).
	ModeAllow Mode = "allow"
	// ModeDeny refuses the call: TOOL_NOT_ALLOWED.
	ModeDeny Mode = "deny"
	// ModeFlag demands the agent's __confirm: true on top of the operator key.
	ModeFlag Mode = "flag"
	// ModeToken demands a single-use confirm token, handed out with a
	// summary the user must see, bound to the exact call.
	ModeToken Mode = "token"
	// ModeElicit asks a human, in a form the client renders, before the
	// call runs; without a client that can show one it falls back.
	ModeElicit Mode = "elicit"
	// ModeApproval waits for people other than the caller to approve the
	// call out of band (the console, REST or the command line).
	ModeApproval Mode = "approval"
)

// Modes lists every implemented mode, in order of strictness.
var Modes = []Mode{ModeAllow, ModeFlag, ModeToken, ModeElicit, ModeApproval, ModeDeny}

// ParseMode reads a mode name.
func ParseMode(s string) (Mode, error) {
	for _, m := range Modes {
		if string(m) == s {
			return m, nil
		}
	}
	names := make([]string, len(Modes))
	for i, m := range Modes {
		names[i] = string(m)
	}
	return "", fmt.Errorf("unknown mode %q: use one of %s", s, strings.Join(names, ", "))
}

// StricterThan reports whether m demands more than other, in the order of
// [Modes].
func (m Mode) StricterThan(other Mode) bool {
	return slices.Index(Modes, m) > slices.Index(Modes, other)
}

// Gated reports whether m puts a call behind a key (every mode but allow and
// deny: deny never runs, so there is nothing to confirm).
func (m Mode) Gated() bool { return m != ModeAllow && m != ModeDeny }

// DefaultTokenTTL is how long a confirm token lives unless the decision says
// otherwise.
const DefaultTokenTTL = 60 * time.Second

// Decision is the policy's answer for one call.
type Decision struct {
	// Rule names the rule that decided; empty when the default applied.
	// RuleDigest is the digest of that rule's definition: a standing grant
	// covers a call only while the same rule, unchanged, decides it.
	Rule       string
	RuleDigest string
	Mode       Mode
	// Reason says, for mode deny, why the call is refused when no rule
	// says it (a tenant that may not use the tool).
	Reason string
	// Budgets bound how many calls confirmed under this decision may run;
	// a gated call runs only when each has room.
	Budgets []Budget
	// TTL is how long a confirm token lives; DefaultTokenTTL when zero.
	TTL time.Duration
	// Preview names a read-only tool whose result shows what the call will
	// touch; it runs before anyone is asked to confirm.
	Preview *PreviewCall
	// Summarize renders, for a human, what the call will do. preview is the
	// preview tool's structured result, or nil. A nil Summarize, or an
	// empty result, stands for a generic summary.
	Summarize func(preview any) string

	// Form is what mode elicit asks the human.
	Form Form
	// Fallback is the mode that applies when mode elicit cannot reach a
	// human: ModeToken when empty, or ModeDeny.
	Fallback Mode
	// Timeout bounds how long an elicit form may stay unanswered, or an
	// approval undecided; DefaultElicitTimeout or DefaultApprovalTimeout
	// when zero.
	Timeout time.Duration

	// Approvers name who may approve a call in mode approval: principals,
	// or groups as "group:NAME". Quorum is how many distinct people must
	// approve (1 when zero).
	Approvers []string
	Quorum    int
	// RunWithin is how long an approved call may wait to run, counted
	// from the vote that approved it; Timeout (or DefaultApprovalTimeout)
	// when zero.
	RunWithin time.Duration
	// RequirePasskey accepts only decisions the approver signed with their
	// passkey in the console, over a challenge bound to the approval.
	RequirePasskey bool
	// MaxPending is how many approvals under the rule one caller may have
	// waiting at once; DefaultMaxPending when zero.
	MaxPending int
}

// DefaultRule is the rule name records and tests give a decision that no
// rule made.
const DefaultRule = "default"

// RuleName is the name of the rule that decided, or [DefaultRule].
func (d Decision) RuleName() string {
	if d.Rule == "" {
		return DefaultRule
	}
	return d.Rule
}

// DefaultElicitTimeout is how long a confirmation form may stay unanswered
// unless the decision says otherwise.
const DefaultElicitTimeout = 5 * time.Minute

// Form describes the flat form mode elicit shows: always a checkbox, and
// optionally a value to type back and choices the human makes instead of
// the model.
type Form struct {
	// Confirm labels the checkbox; a generic label when empty.
	Confirm string
	// TypeBack is a value the human must type exactly (such as the id of
	// what will be deleted); none when empty.
	TypeBack string
	// Choices are arguments the human picks; their answers replace whatever
	// the model sent.
	Choices []Choice
}

// Choice is an argument a human picks from fixed options.
type Choice struct {
	// Arg names the tool argument the answer is injected into.
	Arg     string
	Title   string
	Options []string
}

// PreviewCall is a call of a read-only tool made to describe another call.
type PreviewCall struct {
	Tool string
	Args map[string]any
}

// Policy decides what each call needs. The policy package implements it from
// a YAML file; [ByAnnotations] is the smallest useful policy.
type Policy interface {
	// Decide returns the decision for c.
	Decide(ctx context.Context, c *Call) (Decision, error)
	// ToolModes returns every mode Decide may choose for calls of the tool,
	// whatever the arguments, so the tool can advertise the meta-arguments it
	// accepts.
	ToolModes(tool, upstream string, h Hints) []Mode
	// IsSecret reports whether an argument with this name must never appear
	// in previews or logs.
	IsSecret(name string) bool
	// HumanArgs returns the arguments of the tool that a human picks in a
	// form rather than the model: they are left out of the schema the model
	// sees and filled in before the tool runs.
	HumanArgs(tool, upstream string, h Hints) []string
}

// ByAnnotations is a policy that reads only a tool's hints: read-only tools
// are allowed, every other tool, unannotated ones included, gets Mode
// (ModeFlag when empty).
type ByAnnotations struct {
	Mode Mode
}

func (p ByAnnotations) mode(h Hints) Mode {
	if h.ReadOnly {
		return ModeAllow
	}
	if p.Mode == "" {
		return ModeFlag
	}
	return p.Mode
}

// Decide implements [Policy].
func (p ByAnnotations) Decide(_ context.Context, c *Call) (Decision, error) {
	return Decision{Mode: p.mode(c.Hints)}, nil
}

// ToolModes implements [Policy].
func (p ByAnnotations) ToolModes(_, _ string, h Hints) []Mode { return []Mode{p.mode(h)} }

// IsSecret implements [Policy] with the default secret names.
func (ByAnnotations) IsSecret(name string) bool { return redact.IsSecret(name, nil) }

// HumanArgs implements [Policy]: ByAnnotations asks no choices.
func (ByAnnotations) HumanArgs(string, string, Hints) []string { return nil }
