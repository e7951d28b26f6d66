package policy_test

import (
	"context"
	"fmt"

	"github.com/interlock-mcp/interlock"
	"github.com/interlock-mcp/interlock/policy"
)

// A file with mistakes is rejected whole, each problem with its line.
// Fields the file does not know are reported first; once the file reads,
// every rule is checked.
func ExampleParse_errors() {
	_, err := policy.Parse("interlock.yaml", []byte(`
rules:
  - name: refunds
    mode: confirm
    summry: "Refund {{.args.amount}}"
`))
	fmt.Println(err)

	_, err = policy.Parse("interlock.yaml", []byte(`
rules:
  - name: refunds
    mode: confirm
  - name: deletes
    mode: elicit
    fallback: allow
`))
	fmt.Println(err)
	// Output:
	// interlock.yaml:5: unknown field "summry": check its spelling and where it is indented
	// interlock.yaml:4: rule "refunds": unknown mode "confirm": use one of allow, flag, token, elicit, approval, deny
	// interlock.yaml:7: rule "deletes": fallback must be token or deny, not "allow": a client that cannot show a form must never be let through
}

// The first matching rule decides; CEL conditions see the arguments.
func ExamplePolicy_Decide() {
	f, err := policy.Parse("interlock.yaml", []byte(`
rules:
  - name: big-refunds
    match: {tools: [refund_invoice]}
    when: "args.amount > 1000"
    mode: deny
  - name: refunds
    match: {tools: [refund_invoice]}
    mode: token
    summary: "Refund ${{.args.amount}} on {{.args.invoice_id}}."
`))
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, amount := range []float64{20, 2000} {
		d, _ := f.Decide(context.Background(), &interlock.Call{
			Tool:  "refund_invoice",
			Hints: interlock.HintsOf(nil),
			Args:  map[string]any{"invoice_id": "inv_1003", "amount": amount},
		})
		summary := ""
		if d.Summarize != nil {
			summary = d.Summarize(nil)
		}
		fmt.Printf("%v: rule %s, mode %s %s\n", amount, d.Rule, d.Mode, summary)
	}
	// Output:
	// 20: rule refunds, mode token Refund $20 on inv_1003.
	// 2000: rule big-refunds, mode deny
}
