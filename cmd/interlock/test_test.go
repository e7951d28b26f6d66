package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestPolicyTest runs `interlock test` through the real binary: the demo's
// cases pass against the built-in config, a failing case is named with the
// decision it got, and a bad cases file or config is exit 2 at its line.
func TestPolicyTest(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) string { return writeFile(t, dir, name, body) }
	demoCases, err := filepath.Abs(filepath.Join("..", "..", "examples", "demo-cases.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	failing := write("failing.yaml", `cases:
  - name: small refunds need a token
    tool: refund_invoice
    args: {invoice_id: inv_1, amount: 20}
    expect: {mode: token, rule: refunds}
  - name: deleting is forbidden
    tool: delete_customer
    args: {id: acct_1}
    expect: {code: TOOL_NOT_ALLOWED}
`)
	stricter := write("stricter.yaml", `default_mode: deny
rules:
  - name: no-deletes
    match: {tools: [delete_customer]}
    mode: deny
  - name: refunds
    match: {tools: [refund_invoice]}
    mode: deny
`)
	for _, tc := range []struct {
		name        string
		args        []string
		code        int
		stdout      []string
		stderr      []string
		notInStdout []string
	}{
		{name: "the demo's cases pass against the built-in config", args: []string{demoCases}, code: 0,
			stdout: []string{"against built-in config", "unannotated tool", "7 passed, 0 failed"}},
		{name: "the demo's cases pass with hints from the demo itself", args: []string{"--connect", demoCases}, code: 0,
			stdout: []string{"hints its upstream advertises", "7 passed, 0 failed"}},
		{name: "a failing case is named with its decision", args: []string{failing}, code: 1,
			stdout: []string{
				`FAIL "deleting is forbidden" (` + failing + `:6): got mode elicit, rule "delete-customer"; expected code TOOL_NOT_ALLOWED`,
				"1 passed, 1 failed"},
			notInStdout: []string{`FAIL "small refunds`},
			stderr:      []string{"1 of 2 cases failed"}},
		{name: "against a stricter config the other case fails", args: []string{"--config", stricter, failing}, code: 1,
			stdout: []string{
				`FAIL "small refunds need a token" (` + failing + `:2): got mode deny, rule "refunds", code TOOL_NOT_ALLOWED; expected mode token`,
				"1 passed, 1 failed"},
			notInStdout: []string{`FAIL "deleting`}},
		{name: "a condition that cannot be evaluated decides as the gate does", code: 1,
			args:   []string{write("missing.yaml", "cases:\n  - name: no amount\n    tool: refund_invoice\n    args: {invoice_id: inv_1}\n    expect: {mode: token}\n")},
			stdout: []string{`got mode approval, rule "large-refunds", code INTERNAL_ERROR`, "restrictive reading applies", "no such key: amount"}},
		{name: "a bad cases file is exit 2 at its lines", code: 2,
			args:   []string{write("bad.yaml", "cases:\n  - name: x\n    tool: t\n    hints: {readonly: true}\n    expect: {mode: tokn}\n")},
			stderr: []string{"bad.yaml:4: case \"x\": unknown hint \"readonly\"", "bad.yaml:5: case \"x\": expect.mode: unknown mode \"tokn\""}},
		{name: "an unknown field is exit 2 at its line", code: 2,
			args:   []string{write("unknown.yaml", "cases:\n  - name: x\n    tool: t\n    expect: {mode: flag}\n    expected: {mode: flag}\n")},
			stderr: []string{`unknown.yaml:5: unknown field "expected"`}},
		{name: "a rule the config does not have is exit 2", code: 2,
			args:   []string{write("norule.yaml", "cases:\n  - name: x\n    tool: t\n    expect: {rule: refundz}\n")},
			stderr: []string{`norule.yaml:4: case "x": expect.rule "refundz" is not a rule of built-in config`}},
		{name: "an upstream the config does not have is exit 2", code: 2,
			args:   []string{write("noupstream.yaml", "cases:\n  - name: x\n    tool: t\n    upstream: dmeo\n    expect: {mode: flag}\n")},
			stderr: []string{`noupstream.yaml:4: case "x": upstream "dmeo" is not an upstream of built-in config: use one of demo`}},
		{name: "a bad config is exit 2 at its line", code: 2,
			args:   []string{"--config", write("config.yaml", "default_mode: allow\n"), demoCases},
			stderr: []string{"config.yaml:1: default_mode: allow"}},
		{name: "no cases file is a usage error", code: 2, stderr: []string{"give the cases file"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, stdout, stderr := runCLI(t, append([]string{"test"}, tc.args...)...)
			if code != tc.code {
				t.Errorf("exit %d, want %d\nstdout:\n%s\nstderr:\n%s", code, tc.code, stdout, stderr)
			}
			for _, want := range tc.stdout {
				if !strings.Contains(stdout, want) {
					t.Errorf("stdout lacks %q:\n%s", want, stdout)
				}
			}
			for _, unwanted := range tc.notInStdout {
				if strings.Contains(stdout, unwanted) {
					t.Errorf("stdout has %q:\n%s", unwanted, stdout)
				}
			}
			for _, want := range tc.stderr {
				if !strings.Contains(stderr, want) {
					t.Errorf("stderr lacks %q:\n%s", want, stderr)
				}
			}
		})
	}
}

// writeFile writes body to dir/name and returns the path.
func writeFile(t *testing.T, dir, name, body string) string {
	t.Helper()
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}
