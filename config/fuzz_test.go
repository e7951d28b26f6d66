package config

import (
	"context"
	"testing"

	"github.com/interlock-mcp/interlock"
)

// FuzzParse: no configuration file makes loading panic, and every file that
// loads decides calls without panicking.
func FuzzParse(f *testing.F) {
	for _, s := range []string{
		"rules:\n  - {name: a, mode: deny, match: {tools: ['delete_*']}, when: \"args.id == 'x'\"}\n",
		"default_mode: token\nrules:\n  - name: p\n    mode: elicit\n    type_back: '{{.args.id}}'\n    choices: {env: {options: [a, b]}}\n",
		"upstreams:\n  - {name: u, command: [x]}\nauth:\n  keys:\n    - {sha256: '" + "00000000000000000000000000000000000000000000000000000000000000aa" + "', principal: p}\n",
		"rules:\n  - {name: t, mode: token, summary: '{{.args}}', preview: {tool: g, args: {id: args.id}}}\n",
	} {
		f.Add([]byte(s))
	}
	lookup := func(string) (string, bool) { return "", false }
	f.Fuzz(func(t *testing.T, src []byte) {
		file, err := Parse("fuzz.yaml", src, lookup)
		if err != nil {
			return
		}
		for _, tool := range []string{"delete_customer", "a/b", "get"} {
			for _, h := range []interlock.Hints{interlock.HintsOf(nil), {ReadOnly: true}} {
				c := &interlock.Call{Tool: tool, Hints: file.Policy.Hints(tool, "u", h), Args: map[string]any{"id": "x", "n": 1.5}}
				if d, err := file.Policy.Decide(context.Background(), c); err == nil && d.Summarize != nil {
					d.Summarize(map[string]any{"name": "n"})
				}
				file.Policy.ToolModes(tool, "u", h)
				file.Policy.HumanArgs(tool, "u", h)
			}
		}
	})
}
