package policy

import (
	"context"
	"testing"

	"github.com/interlock-mcp/interlock"
)

// TestFunctionsHoldWhereNaiveConditionsFailOpen: a rule that keeps a tool
// inside a directory, or a refund under a limit, holds for every spelling
// an agent may send.
func TestFunctionsHoldWhereNaiveConditionsFailOpen(t *testing.T) {
	f := parse(t, `
rules:
  - name: notes-only
    match: {tools: [write_file]}
    when: "!isUnder(args.path, '/srv/notes')"
    mode: deny
  - name: big-refunds
    match: {tools: [refund]}
    when: "num(args.amount) > 1000"
    mode: deny
  - name: small-refunds
    match: {tools: [refund]}
    when: "num(args.amount) <= 1000"
    mode: allow
  - name: clean
    match: {tools: [cleaned]}
    when: "cleanPath(args.path) == '/srv/notes/a'"
    mode: allow
`)
	tests := []struct {
		tool string
		args map[string]any
		want interlock.Mode
	}{
		{"write_file", map[string]any{"path": "/srv/notes/today.md"}, interlock.ModeFlag},
		{"write_file", map[string]any{"path": "/srv/notes"}, interlock.ModeFlag},
		{"write_file", map[string]any{"path": "/srv/notes/../secrets"}, interlock.ModeDeny},
		{"write_file", map[string]any{"path": "/srv/notes/a/../../secrets/x"}, interlock.ModeDeny},
		{"write_file", map[string]any{"path": "/srv/notesX/x"}, interlock.ModeDeny},
		{"write_file", map[string]any{"path": "//srv//notes//x"}, interlock.ModeFlag},
		{"write_file", map[string]any{"path": "notes/x"}, interlock.ModeDeny},
		{"write_file", map[string]any{"path": "../srv/notes/x"}, interlock.ModeDeny},
		{"write_file", map[string]any{"path": "/srv/notes/x\x00/../../etc"}, interlock.ModeDeny},
		{"write_file", map[string]any{"path": 7.0}, interlock.ModeDeny},
		{"write_file", map[string]any{}, interlock.ModeDeny},
		{"refund", map[string]any{"amount": 5000.0}, interlock.ModeDeny},
		{"refund", map[string]any{"amount": "5000"}, interlock.ModeDeny},
		{"refund", map[string]any{"amount": " 5e3 "}, interlock.ModeDeny},
		{"refund", map[string]any{"amount": "0x2000"}, interlock.ModeDeny},
		{"refund", map[string]any{"amount": "Infinity"}, interlock.ModeDeny},
		{"refund", map[string]any{"amount": "lots"}, interlock.ModeDeny},
		{"refund", map[string]any{"amount": true}, interlock.ModeDeny},
		{"refund", map[string]any{"amount": 12.5}, interlock.ModeAllow},
		{"refund", map[string]any{"amount": "12.5"}, interlock.ModeAllow},
		{"cleaned", map[string]any{"path": "/srv/./notes//b/../a"}, interlock.ModeAllow},
	}
	for _, tt := range tests {
		t.Run(tt.tool+" "+fmtArgs(tt.args), func(t *testing.T) {
			d, err := f.Decide(context.Background(), &interlock.Call{Tool: tt.tool, Hints: interlock.HintsOf(nil), Args: tt.args})
			if err != nil {
				t.Fatal(err)
			}
			if d.Mode != tt.want {
				t.Errorf("mode = %s (rule %q), want %s", d.Mode, d.Rule, tt.want)
			}
		})
	}
}

func fmtArgs(m map[string]any) string {
	for _, v := range m {
		if s, ok := v.(string); ok {
			return s
		}
	}
	return "other"
}
