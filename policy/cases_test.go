package policy

import (
	"context"
	"strings"
	"testing"

	"github.com/interlock-mcp/interlock"
)

// TestJudge: the verdict a case compares is the gate's decision, with the
// code the caller would get before giving any key.
func TestJudge(t *testing.T) {
	f := parse(t, `max_argument_bytes: 64
rules:
  - name: reads
    match: {annotations: {readOnlyHint: true}}
    mode: allow
  - name: mark-safe
    match: {tools: [lookup]}
    annotations: {readOnlyHint: true}
    mode: allow
  - name: no-drops
    match: {tools: [drop_*]}
    mode: deny
  - name: deletes
    match: {tools: [delete]}
    mode: elicit
    type_back: "{{.args.id}}"
`)
	tests := []struct {
		name  string
		tool  string
		hints interlock.Hints
		args  map[string]any
		want  string
	}{
		{"an unannotated tool no rule matches", "send", interlock.HintsOf(nil), map[string]any{}, `mode flag, no rule (default)`},
		{"a read-only tool", "list", interlock.Hints{ReadOnly: true}, map[string]any{}, `mode allow, rule "reads"`},
		{"hints the rules override", "lookup", interlock.HintsOf(nil), map[string]any{}, `mode allow, rule "reads"`},
		{"deny", "drop_table", interlock.HintsOf(nil), map[string]any{}, `mode deny, rule "no-drops", code TOOL_NOT_ALLOWED`},
		{"a decision the policy cannot complete", "delete", interlock.HintsOf(nil), map[string]any{}, `mode elicit, rule "deletes", code INTERNAL_ERROR`},
		{"arguments too large", "send", interlock.HintsOf(nil), map[string]any{"text": strings.Repeat("x", 100)}, `mode -, no rule (default), code VALIDATION_FAILED`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v := f.Judge(context.Background(), &interlock.Call{Tool: tt.tool, Hints: tt.hints, Args: tt.args})
			if got := v.String(); got != tt.want {
				t.Errorf("verdict %s, want %s (%v)", got, tt.want, v.Err)
			}
		})
	}
}

// TestCaseHints: a case's hints take the specification's defaults for
// what they leave out.
func TestCaseHints(t *testing.T) {
	tests := []struct {
		hints string
		want  interlock.Hints
	}{
		{"{}", interlock.Hints{Destructive: true, OpenWorld: true}},
		{"{readOnly: true}", interlock.Hints{ReadOnly: true, OpenWorld: true}},
		{"{readOnly: true, destructive: true}", interlock.Hints{ReadOnly: true, OpenWorld: true}},
		{"{destructive: false, openWorld: false, idempotent: true}", interlock.Hints{Idempotent: true}},
	}
	for _, tt := range tests {
		t.Run(tt.hints, func(t *testing.T) {
			cs, err := ParseCases("cases.yaml", []byte("cases:\n  - name: c\n    tool: t\n    hints: "+tt.hints+"\n    expect: {mode: flag}\n"))
			if err != nil {
				t.Fatal(err)
			}
			if got := cs.Cases[0].ToolHints(); got != tt.want {
				t.Errorf("hints %+v, want %+v", got, tt.want)
			}
		})
	}
}

// TestParseCasesErrors: every problem of a cases file is reported at its
// line, with what to write instead.
func TestParseCasesErrors(t *testing.T) {
	tests := []struct {
		name, src, want string
	}{
		{"empty", "", "cases.yaml:1: no cases"},
		{"no name", "cases:\n  - tool: t\n    expect: {mode: flag}\n", "cases.yaml:2: case has no name"},
		{"a name twice", "cases:\n  - name: a\n    tool: t\n    expect: {mode: flag}\n  - name: a\n    tool: t\n    expect: {mode: flag}\n", `cases.yaml:5: case "a" is already defined on line 2`},
		{"no tool", "cases:\n  - name: a\n    expect: {mode: flag}\n", `cases.yaml:2: case "a" has no tool`},
		{"no expectation", "cases:\n  - name: a\n    tool: t\n", `cases.yaml:2: case "a" expects nothing`},
		{"an unknown field in expect", "cases:\n  - name: a\n    tool: t\n    expect: {mode: flag, rules: x}\n", `cases.yaml:4: unknown field "rules"`},
		{"an empty entry", "cases:\n  -\n", `cases.yaml:2: cases has an empty entry`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ParseCases("cases.yaml", []byte(tt.src))
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %v, want %q", err, tt.want)
			}
		})
	}
}
