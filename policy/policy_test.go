package policy

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/interlock-mcp/interlock"
)

func parse(t *testing.T, src string) *Policy {
	t.Helper()
	f, err := Parse("policy.yaml", []byte(src))
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	return f
}

const testPolicy = `
default_mode: flag
redact: [card_number]
rules:
  - name: no-prod-deletes
    match: {tools: ["delete_*"], upstream: prod}
    mode: deny
  - name: big-refunds
    match: {tools: [refund_invoice]}
    when: "args.amount > 1000"
    mode: deny
  - name: refunds
    match: {tools: [refund_invoice]}
    mode: flag
    summary: "Refund ${{.args.amount}} on {{.args.invoice_id}}"
  - name: admins-skip-reminder-confirmation
    match: {tools: [send_reminder]}
    when: "principal == 'alice' && tenant == 'acme'"
    mode: allow
  - name: closed-world-writes
    match: {annotations: {openWorldHint: false, readOnlyHint: false}}
    mode: flag
    summary: "{{.tool}} changes only this system"
  - name: relabel-search
    match: {tools: [search_*]}
    annotations: {readOnlyHint: true}
    mode: allow
`

func TestDecide(t *testing.T) {
	f := parse(t, testPolicy)
	unannotated := interlock.HintsOf(nil)
	readOnly := interlock.Hints{ReadOnly: true}
	closed := interlock.Hints{Destructive: true}
	tests := []struct {
		name        string
		call        interlock.Call
		wantRule    string
		wantMode    interlock.Mode
		wantSummary string
	}{
		{"upstream-scoped deny", interlock.Call{Tool: "delete_customer", Upstream: "prod", Hints: unannotated}, "no-prod-deletes", interlock.ModeDeny, ""},
		{"same tool elsewhere falls to default", interlock.Call{Tool: "delete_customer", Upstream: "staging", Hints: unannotated}, "", interlock.ModeFlag, ""},
		{"CEL on numbers: large", interlock.Call{Tool: "refund_invoice", Hints: unannotated, Args: map[string]any{"amount": 2000.0, "invoice_id": "inv_1"}}, "big-refunds", interlock.ModeDeny, ""},
		{"CEL on numbers: small", interlock.Call{Tool: "refund_invoice", Hints: unannotated, Args: map[string]any{"amount": 20.0, "invoice_id": "inv_1"}}, "refunds", interlock.ModeFlag, "Refund $20 on inv_1"},
		{"missing argument never loosens a deny", interlock.Call{Tool: "refund_invoice", Hints: unannotated, Args: map[string]any{}}, "big-refunds", interlock.ModeDeny, ""},
		{"CEL on identity: match", interlock.Call{Tool: "send_reminder", Hints: unannotated, Identity: interlock.Identity{Principal: "alice", Tenant: "acme"}}, "admins-skip-reminder-confirmation", interlock.ModeAllow, ""},
		{"CEL on identity: other tenant", interlock.Call{Tool: "send_reminder", Hints: unannotated, Identity: interlock.Identity{Principal: "alice", Tenant: "other"}}, "", interlock.ModeFlag, ""},
		{"annotation match", interlock.Call{Tool: "set_flag", Hints: closed}, "closed-world-writes", interlock.ModeFlag, "set_flag changes only this system"},
		{"read-only default", interlock.Call{Tool: "list_things", Hints: readOnly}, "", interlock.ModeAllow, ""},
		{"unannotated default", interlock.Call{Tool: "mystery", Hints: unannotated}, "", interlock.ModeFlag, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d, err := f.Decide(context.Background(), &tt.call)
			if err != nil {
				t.Fatal(err)
			}
			if d.Rule != tt.wantRule || d.Mode != tt.wantMode || summary(d) != tt.wantSummary {
				t.Errorf("Decide = %+v (summary %q), want rule %q mode %s summary %q", d, summary(d), tt.wantRule, tt.wantMode, tt.wantSummary)
			}
		})
	}
}

func TestAllowRuleWithFailingConditionDoesNotAllow(t *testing.T) {
	f := parse(t, `
rules:
  - name: cheap-is-fine
    match: {tools: [refund_invoice]}
    when: "args.amount < 10"
    mode: allow
`)
	d, _ := f.Decide(context.Background(), &interlock.Call{Tool: "refund_invoice", Hints: interlock.HintsOf(nil), Args: map[string]any{}})
	if d.Mode != interlock.ModeFlag {
		t.Errorf("mode = %s: a condition that cannot be evaluated must not allow", d.Mode)
	}
}

func TestSummaryWithMissingArgumentFallsBack(t *testing.T) {
	f := parse(t, testPolicy)
	d, _ := f.Decide(context.Background(), &interlock.Call{Tool: "refund_invoice", Hints: interlock.HintsOf(nil), Args: map[string]any{"amount": 5.0}})
	if d.Rule != "refunds" || summary(d) != "" {
		t.Errorf("Decide = %+v: want rule refunds and no half-filled summary", d)
	}
}

// TestSummaryRendersStructuresAsJSON: json renders an array or object in
// a summary as a person reads it, not as Go prints a map.
func TestSummaryRendersStructuresAsJSON(t *testing.T) {
	f := parse(t, `
rules:
  - name: deletions
    match: {tools: [delete_entities]}
    mode: flag
    summary: "Delete {{json .args.deletions}}"
`)
	d, _ := f.Decide(context.Background(), &interlock.Call{Tool: "delete_entities", Hints: interlock.HintsOf(nil),
		Args: map[string]any{"deletions": []any{map[string]any{"entityName": "<Bob>", "observations": []any{"likes coffee"}}}}})
	if want := `Delete [{"entityName":"<Bob>","observations":["likes coffee"]}]`; summary(d) != want {
		t.Errorf("summary = %q, want %q", summary(d), want)
	}
}

func TestHintsAndToolModes(t *testing.T) {
	f := parse(t, testPolicy)
	unannotated := interlock.HintsOf(nil)
	if h := f.Hints("search_issues", "gh", unannotated); !h.ReadOnly {
		t.Errorf("override not applied: %+v", h)
	}
	if h := f.Hints("create_issue", "gh", unannotated); h != unannotated {
		t.Errorf("hints changed without a rule: %+v", h)
	}
	tests := []struct {
		tool, upstream string
		hints          interlock.Hints
		want           []interlock.Mode
	}{
		{"refund_invoice", "", unannotated, []interlock.Mode{interlock.ModeDeny, interlock.ModeFlag}},
		{"send_reminder", "", unannotated, []interlock.Mode{interlock.ModeAllow, interlock.ModeFlag}},
		{"delete_customer", "prod", unannotated, []interlock.Mode{interlock.ModeDeny}},
		{"search_issues", "gh", f.Hints("search_issues", "gh", unannotated), []interlock.Mode{interlock.ModeAllow}},
		{"list_things", "", interlock.Hints{ReadOnly: true}, []interlock.Mode{interlock.ModeAllow}},
	}
	for _, tt := range tests {
		if got := f.ToolModes(tt.tool, tt.upstream, tt.hints); !slices.Equal(got, tt.want) {
			t.Errorf("ToolModes(%s) = %v, want %v", tt.tool, got, tt.want)
		}
	}
}

func summary(d interlock.Decision) string {
	if d.Summarize == nil {
		return ""
	}
	return d.Summarize(nil)
}

func TestElicitRules(t *testing.T) {
	f := parse(t, `
rules:
  - name: deletes
    match: {tools: [delete_customer]}
    mode: elicit
    fallback: deny
    timeout: 2m
    confirm: "I understand"
    type_back: "{{.args.id}}"
  - name: promote
    match: {tools: [promote_release]}
    mode: elicit
    choices:
      environment: {title: Target environment, options: [staging, production]}
`)
	d, err := f.Decide(context.Background(), &interlock.Call{Tool: "delete_customer", Hints: interlock.HintsOf(nil), Args: map[string]any{"id": "acct_9931"}})
	if err != nil {
		t.Fatal(err)
	}
	if d.Mode != interlock.ModeElicit || d.Fallback != interlock.ModeDeny || d.Timeout != 2*time.Minute ||
		d.Form.Confirm != "I understand" || d.Form.TypeBack != "acct_9931" {
		t.Errorf("decision = %+v", d)
	}
	if _, err := f.Decide(context.Background(), &interlock.Call{Tool: "delete_customer", Hints: interlock.HintsOf(nil), Args: map[string]any{}}); err == nil {
		t.Error("a type_back that cannot be filled must not decide")
	}
	d, _ = f.Decide(context.Background(), &interlock.Call{Tool: "promote_release", Hints: interlock.HintsOf(nil), Args: map[string]any{"service": "web"}})
	if len(d.Form.Choices) != 1 || d.Form.Choices[0].Arg != "environment" || len(d.Form.Choices[0].Options) != 2 {
		t.Errorf("choices = %+v", d.Form.Choices)
	}
	if got := f.HumanArgs("promote_release", "", interlock.HintsOf(nil)); !slices.Equal(got, []string{"environment"}) {
		t.Errorf("HumanArgs = %v", got)
	}
	if got := f.ToolModes("promote_release", "", interlock.HintsOf(nil)); !slices.Equal(got, []interlock.Mode{interlock.ModeElicit, interlock.ModeToken}) {
		t.Errorf("ToolModes = %v: the fallback belongs in it", got)
	}
}

func TestElicitRuleErrors(t *testing.T) {
	tests := []struct{ src, want string }{
		{"rules:\n  - {name: a, mode: elicit, fallback: allow}\n", `rule "a": fallback must be token or deny`},
		{"rules:\n  - {name: a, mode: flag, type_back: x}\n", `rule "a": type_back applies only to mode elicit`},
		{"rules:\n  - {name: a, mode: elicit, timeout: later}\n", `rule "a": timeout "later" is not a duration`},
		{"rules:\n  - {name: a, mode: elicit, type_back: '{{.args.password}}'}\n", `rule "a": type_back names the secret argument password`},
		{"rules:\n  - {name: a, mode: elicit, type_back: '{{index .args \"password\"}}'}\n", `rule "a": type_back names the secret argument password`},
		{"rules:\n  - {name: a, mode: elicit, type_back: '{{with .args}}{{.api_key}}{{end}}'}\n", `rule "a": type_back names the secret argument api_key`},
		{"rules:\n  - {name: a, mode: elicit, type_back: '{{$a := .args}}{{$a.githubToken}}'}\n", `rule "a": type_back names the secret argument githubToken`},
		{"rules:\n  - {name: a, mode: elicit, type_back: '{{if .args.id}}{{printf \"%s\" (index .args \"Client-Secret\")}}{{end}}'}\n", `rule "a": type_back names the secret argument Client-Secret`},
		{"redact: [pin]\nrules:\n  - {name: a, mode: elicit, type_back: '{{.args.pin}}'}\n", `rule "a": type_back names the secret argument pin`},
		{"redact: [pin]\nrules:\n  - {name: a, mode: elicit, choices: {pin: {options: [x]}}}\n", `rule "a": choice pin is a secret argument`},
		{"rules:\n  - {name: a, mode: elicit, choices: {api_key: {options: [x]}}}\n", `rule "a": choice api_key is a secret argument`},
		{"rules:\n  - {name: a, mode: elicit, choices: {env: {title: x}}}\n", `rule "a": choice env needs options`},
		{"rules:\n  - {name: a, mode: elicit, type_back: '{{.args'}\n", `rule "a": type_back:`},
	}
	for _, tt := range tests {
		_, err := Parse("p.yaml", []byte(tt.src))
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("Parse(%q) = %v, want %q", tt.src, err, tt.want)
		}
	}
}

func TestCELErrorShowsWhereAndWhat(t *testing.T) {
	tests := []struct {
		name string
		when string
		want string
	}{
		{"syntax", "args.amount >", `policy.yaml:4: rule "c": when: Syntax error: mismatched input '<EOF>'`},
		{"undeclared", "amount > 10", `policy.yaml:4: rule "c": when: undeclared reference to 'amount'`},
		{"second line", "tool == 'x' &&\n  user == 'y'", `policy.yaml:4: rule "c": when: undeclared reference to 'user'`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			src := "rules:\n  - name: c\n    mode: deny\n    when: " + strconv.Quote(tt.when) + "\n"
			_, err := Parse("policy.yaml", []byte(src))
			var errs LoadErrors
			if !errors.As(err, &errs) || len(errs) != 1 {
				t.Fatalf("Parse = %v, want one LoadError", err)
			}
			got := strings.Split(errs[0].Error(), "\n")
			if !strings.HasPrefix(got[0], tt.want) {
				t.Errorf("first line %q, want prefix %q", got[0], tt.want)
			}
			if len(got) != 4 {
				t.Fatalf("got %d lines, want message, expression, caret, vocabulary:\n%s", len(got), errs[0])
			}
			expr, caret := strings.TrimPrefix(got[1], "    "), strings.TrimPrefix(got[2], "    ")
			if !strings.Contains(tt.when, expr) {
				t.Errorf("expression line %q is not a line of %q", expr, tt.when)
			}
			col := strings.Index(caret, "^")
			if col < 0 || strings.TrimSpace(caret) != "^" {
				t.Fatalf("caret line %q", caret)
			}
			if rest := expr[min(col, len(expr)):]; tt.name != "syntax" && !strings.HasPrefix(rest, "amount") && !strings.HasPrefix(rest, "user") {
				t.Errorf("caret points at %q", rest)
			}
			if !strings.Contains(got[3], "tool, upstream, args, principal, tenant") || !strings.Contains(got[3], "isUnder(path, dir)") {
				t.Errorf("vocabulary line %q", got[3])
			}
		})
	}
}

// TestApprovalFieldsReachTheDecision: require_passkey and max_pending of
// an approval rule are the decision's.
func TestApprovalFieldsReachTheDecision(t *testing.T) {
	f := parse(t, "rules:\n"+
		"  - {name: signed, mode: approval, approvers: [bob], require_passkey: true, max_pending: 3, match: {tools: [wire_money]}}\n"+
		"  - {name: plain, mode: approval, approvers: [bob], match: {tools: [send_reminder]}}\n")
	tests := []struct {
		tool       string
		passkey    bool
		maxPending int
	}{
		{"wire_money", true, 3},
		{"send_reminder", false, 0},
	}
	for _, tt := range tests {
		t.Run(tt.tool, func(t *testing.T) {
			d, err := f.Decide(context.Background(), &interlock.Call{Tool: tt.tool, Hints: interlock.HintsOf(nil)})
			if err != nil {
				t.Fatal(err)
			}
			if d.Mode != interlock.ModeApproval || d.RequirePasskey != tt.passkey || d.MaxPending != tt.maxPending {
				t.Errorf("Decide(%s) = mode %s, RequirePasskey %t, MaxPending %d; want approval, %t, %d",
					tt.tool, d.Mode, d.RequirePasskey, d.MaxPending, tt.passkey, tt.maxPending)
			}
		})
	}
}
