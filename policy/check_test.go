package policy

import (
	"strings"
	"testing"

	"github.com/interlock-mcp/interlock"
)

func TestCheckTools(t *testing.T) {
	offered := []OfferedTool{
		{Name: "get_customer", Upstream: "demo", Hints: interlock.Hints{ReadOnly: true}, Arguments: []string{"id"}},
		{Name: "delete_customer", Upstream: "demo", Hints: interlock.HintsOf(nil), Arguments: []string{"id"}},
		{Name: "promote_release", Upstream: "demo", Hints: interlock.HintsOf(nil), Arguments: []string{"service", "environment"}},
		{Name: "gh_delete_repo", Upstream: "github", Hints: interlock.HintsOf(nil), Arguments: []string{"owner", "repo"}},
	}
	// Three lines where a configuration file would name the upstreams,
	// demo and github, so that the rules start where they would.
	const upstreams = "#\n#\n#\nrules:\n"
	tests := []struct {
		name  string
		rules string
		want  []string // the first line of each error, in order
	}{
		{"everything offered", `
  - name: deletes
    match: {tools: [delete_customer]}
    mode: elicit
    preview: {tool: get_customer, args: {id: args.id}}
    type_back: "{{.args.id}}"
  - name: repos
    match: {tools: ["gh_*"], upstream: github}
    mode: elicit
    type_back: "{{.args.owner}}/{{.args.repo}}"
  - name: promote
    match: {tools: [promote_release], upstream: demo}
    mode: elicit
    choices: {environment: {options: [staging, production]}}
`, nil},
		{"typo in a glob", `
  - name: deletes
    match:
      tools:
        - delete_customer
        - delete_custmer
    mode: deny
`, []string{`p.yaml:9: rule "deletes": tool glob "delete_custmer" matches no tool that the upstreams offer: did you mean delete_customer?`}},
		{"glob on the wrong upstream", `
  - name: repos
    match: {tools: ["gh_*"], upstream: demo}
    mode: deny
`, []string{`p.yaml:6: rule "repos": tool glob "gh_*" matches no tool that upstream "demo" offers`}},
		{"missing preview tool", `
  - name: deletes
    match: {tools: [delete_customer]}
    mode: token
    preview:
      tool: get_costumer
`, []string{`p.yaml:9: rule "deletes": preview tool "get_costumer" is not offered by any upstream, so every call the rule gates would fail (INTERNAL_ERROR): did you mean get_customer?`}},
		{"preview tool that writes", `
  - name: deletes
    match: {tools: [delete_customer]}
    mode: token
    preview: {tool: gh_delete_repo}
`, []string{`p.yaml:8: rule "deletes": preview tool "gh_delete_repo" is not read-only`}},
		{"preview argument the preview lacks", `
  - name: deletes
    match: {tools: [delete_customer]}
    mode: token
    preview:
      tool: get_customer
      args:
        customer_id: args.id
`, []string{`p.yaml:11: rule "deletes": preview argument customer_id is not an argument of get_customer (its arguments: id)`}},
		{"type_back of a missing argument", `
  - name: deletes
    match: {tools: [delete_customer]}
    mode: elicit
    type_back: '{{index .args "customer_id"}}'
`, []string{`p.yaml:8: rule "deletes": type_back names args.customer_id, an argument that delete_customer does not take (its arguments: id)`}},
		{"choice of a missing argument", `
  - name: promote
    match: {tools: [promote_release]}
    mode: elicit
    choices:
      environment: {options: [staging]}
      region: {options: [eu, us]}
`, []string{`p.yaml:10: rule "promote": choice region names an argument that promote_release does not take (its arguments: service, environment)`}},
		{"a summary naming a missing argument", `
  - name: deletes
    match: {tools: [delete_customer]}
    mode: token
    summary: "Delete {{.args.customer}}."
`, []string{`p.yaml:8: rule "deletes": summary names args.customer, an argument that delete_customer does not take (its arguments: id): fix the name, or list it under optional if the template handles its absence`}},
		{"a summary through index", `
  - name: deletes
    match: {tools: [delete_customer]}
    mode: token
    summary: '{{index .args "ident"}}'
`, []string{`p.yaml:8: rule "deletes": summary names args.ident, an argument that delete_customer does not take (its arguments: id)`}},
		{"a condition reading a missing argument", `
  - name: deletes
    match: {tools: ["*delete*"]}
    when: "args.owner == 'me'"
    mode: deny
`, []string{`p.yaml:7: rule "deletes": when reads args.owner, an argument that delete_customer does not take (its arguments: id), so every call of it is decided as if the condition failed`}},
		{"a preview argument reading a missing argument", `
  - name: deletes
    match: {tools: [delete_customer]}
    mode: token
    preview: {tool: get_customer, args: {id: args.customer_id}}
`, []string{`p.yaml:8: rule "deletes": preview argument id reads args.customer_id, an argument that delete_customer does not take (its arguments: id)`}},
		{"an argument the rule says is optional", `
  - name: deletes
    match: {tools: ["*delete*"]}
    when: "has(args.owner) && args.owner == 'me'"
    summary: "{{with .args.owner}}{{.}}/{{end}}{{.args.id}}"
    optional: [owner, id]
    mode: deny
`, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f, err := Parse("p.yaml", []byte(upstreams+strings.TrimPrefix(tt.rules, "\n")))
			if err != nil {
				t.Fatal(err)
			}
			errs := f.CheckTools(offered)
			if len(errs) != len(tt.want) {
				t.Fatalf("got %d errors, want %d:\n%v", len(errs), len(tt.want), errs)
			}
			for i, w := range tt.want {
				if got := errs[i].Error(); !strings.HasPrefix(got, w) {
					t.Errorf("error %d:\n got %s\nwant %s", i, got, w)
				}
			}
		})
	}
}

func TestEditDistance(t *testing.T) {
	tests := []struct {
		a, b string
		want int
	}{{"", "", 0}, {"writ_file", "write_file", 1}, {"abc", "", 3}, {"kitten", "sitting", 3}}
	for _, tt := range tests {
		t.Run(tt.a+"/"+tt.b, func(t *testing.T) {
			if got := editDistance(tt.a, tt.b); got != tt.want {
				t.Errorf("editDistance(%q, %q) = %d, want %d", tt.a, tt.b, got, tt.want)
			}
		})
	}
}
