package policy

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/interlock-mcp/interlock"
	"github.com/interlock-mcp/interlock/redact"
)

// TestUnfaithful names the rules whose condition reads an argument the
// audit log holds redacted, on the way to the decision, however the
// condition spells its way to it.
func TestUnfaithful(t *testing.T) {
	redacted := map[string]any{"user": "bob", "password": redact.Value, "opts": map[string]any{"token": redact.Value}}
	tests := []struct {
		name, when string
		args       map[string]any
		want       []string
	}{
		// A condition that does not hold lets the next rule be tried, and
		// that one reads the password too.
		{"a redacted argument by name", "args.password == 'x'", redacted, []string{"r", "later"}},
		{"by index", `args["password"] == 'x'`, redacted, []string{"r", "later"}},
		{"by presence", "has(args.password)", redacted, []string{"r"}},
		{"nested under a read argument", "args.opts.token == 'x'", redacted, []string{"r", "later"}},
		{"args as a whole", "args.exists(k, k == 'x')", redacted, []string{"r", "later"}},
		// A missing key fails to evaluate: the deny rule holds.
		{"at a computed key", "args[tool] == 'x'", redacted, []string{"r"}},
		{"only arguments kept in the clear, and the rule decides", "args.user == 'bob'", redacted, nil},
		{"no argument redacted", "args.password == 'x'", map[string]any{"password": "x"}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := parse(t, "rules:\n  - name: r\n    when: \""+strings.ReplaceAll(tt.when, `"`, `\"`)+"\"\n    mode: deny\n  - name: later\n    when: \"args.password == 'y'\"\n    mode: flag\n  - name: last\n    mode: token\n")
			c := &interlock.Call{Tool: "login", Hints: interlock.HintsOf(nil), Args: tt.args}
			f.Judge(context.Background(), c)
			if got := f.Unfaithful(c); !slices.Equal(got, tt.want) {
				t.Errorf("Unfaithful = %v, want %v", got, tt.want)
			}
		})
	}
}
