package main

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/interlock-mcp/interlock"
	"github.com/interlock-mcp/interlock/audit"
)

// demoConfig writes the built-in configuration, with its demo database in
// dir and extra lines at the top, to dir/name and returns its path.
func demoConfig(t *testing.T, dir, name, extra string) string {
	t.Helper()
	cfg := strings.Replace(string(builtinConfig), "command: [interlock, demo]",
		fmt.Sprintf("command: [%s, demo, --db, %s]", binary, filepath.Join(dir, "demo.db")), 1)
	return writeFile(t, dir, name, extra+cfg)
}

// demoCall is a call of a demo tool.
type demoCall struct {
	tool string
	args map[string]any
}

// callsThroughServe makes the calls, in order, through `interlock serve
// --stdio` with the config and data directory given, and returns the code
// each answered ("" for a call that ran). The gateway has exited, and its
// audit log is complete, when it returns.
func callsThroughServe(t *testing.T, config, data string, calls []demoCall) []interlock.Code {
	t.Helper()
	cmd := command("", "serve", "--stdio", "--config", config, "--data", data)
	cs := connectClient(t, "it", &mcp.CommandTransport{Command: cmd})
	var codes []interlock.Code
	for _, c := range calls {
		res := callTool(t, cs, c.tool, c.args)
		var got interlock.Code
		if res.IsError {
			got = interlock.Code(fmt.Sprint(structured(t, res)["code"]))
		}
		codes = append(codes, got)
	}
	if err := cs.Close(); err != nil {
		t.Fatal(err)
	}
	return codes
}

// exported reads the audit log of a data directory through `audit export`.
func exported(t *testing.T, data, config string) []audit.Record {
	t.Helper()
	code, out, errText := runCLI(t, "audit", "export", "--data", data, "--config", config)
	if code != 0 {
		t.Fatalf("audit export: %d %s", code, errText)
	}
	var recs []audit.Record
	for line := range strings.Lines(out) {
		var r audit.Record
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatalf("export line %q: %v", line, err)
		}
		recs = append(recs, r)
	}
	return recs
}

var shadowCalls = []demoCall{
	{"list_customers", map[string]any{}},                                       // allow in both
	{"refund_invoice", map[string]any{"invoice_id": "inv_1003", "amount": 20}}, // token live, deny in the shadow
	{"send_reminder", map[string]any{"customer_id": "acct_9931"}},              // the same rule and mode in both
	{"delete_customer", map[string]any{"id": "acct_2048"}},                     // elicit live, the shadow's default
}

// TestShadowPolicy serves the demo with a shadow policy: calls answer
// exactly as without it, and each decision the shadow takes differently is
// an audit event with both decisions.
func TestShadowPolicy(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir, "candidate.yaml", `default_mode: deny
rules:
  - name: reminders
    match: {tools: [send_reminder]}
    mode: flag
  - name: no-refunds
    match: {tools: [refund_invoice]}
    mode: deny
`)
	plain, withShadow := t.TempDir(), t.TempDir()
	want := callsThroughServe(t, demoConfig(t, plain, "config.yaml", ""), plain, shadowCalls)
	config := demoConfig(t, dir, "config.yaml", "shadow: candidate.yaml\n")
	got := callsThroughServe(t, config, withShadow, shadowCalls)
	if fmt.Sprint(got) != fmt.Sprint(want) || want[1] == interlock.CodeToolNotAllowed {
		t.Errorf("with a shadow policy the calls answered %v, without %v", got, want)
	}

	var differs []string
	for _, r := range exported(t, withShadow, config) {
		if r.Event != "shadow_differs" {
			continue
		}
		differs = append(differs, fmt.Sprintf("%s %s@%s: %s/%s -> %s/%s", r.Tool, r.Tenant, r.Upstream, r.Rule, r.Mode, r.ShadowRule, r.ShadowMode))
		if r.Args != nil || r.Decision != "" || r.Principal == "" || r.Hash == "" {
			t.Errorf("shadow_differs record %d: args %v, decision %q, principal %q, hash %q", r.Seq, r.Args, r.Decision, r.Principal, r.Hash)
		}
	}
	wantDiffers := []string{
		"refund_invoice local@demo: refunds/token -> no-refunds/deny",
		"delete_customer local@demo: delete-customer/elicit -> /deny",
	}
	if strings.Join(differs, "\n") != strings.Join(wantDiffers, "\n") {
		t.Errorf("shadow_differs events:\n%s\nwant:\n%s", strings.Join(differs, "\n"), strings.Join(wantDiffers, "\n"))
	}
	if code, out, errText := runCLI(t, "audit", "verify", "--data", withShadow, "--config", config); code != 0 {
		t.Errorf("audit verify: %d %s %s", code, out, errText)
	}
}

// TestShadowPolicyChecks: check names a shadow policy that loads.
func TestShadowPolicyChecks(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir, "candidate.yaml", "default_mode: deny\nrules:\n  - name: r\n    mode: flag\n")
	config := demoConfig(t, dir, "config.yaml", "shadow: candidate.yaml\n")
	code, out, errText := runCLI(t, "check", "--config", config)
	if code != 0 || !strings.Contains(out, "; shadow policy "+filepath.Join(dir, "candidate.yaml")+": 1 rules)") {
		t.Errorf("check: exit %d\n%s%s", code, out, errText)
	}
}

// TestShadowPolicyLoadErrors: a shadow policy that does not load is the
// config's load error, at the shadow file's line.
func TestShadowPolicyLoadErrors(t *testing.T) {
	for _, tc := range []struct {
		name, shadow, want string
	}{
		{"a bad rule", "rules:\n  - name: x\n    mode: tokn\n", "candidate.yaml:3: rule \"x\": unknown mode \"tokn\""},
		{"an unknown field", "rules: []\ndefualt_mode: deny\n", "candidate.yaml:2: unknown field \"defualt_mode\""},
		{"a live section", "upstreams:\n  - name: x\n    command: [x]\n", "candidate.yaml:1: upstreams: a shadow policy holds only rules and default_mode"},
		{"a missing file", "", "config.yaml:1: shadow policy: open"},
		{"a shadow of its own", "rules: []\nshadow: candidate.yaml\n", "candidate.yaml:2: shadow: a shadow policy cannot name a shadow policy of its own"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			if tc.shadow != "" {
				writeFile(t, dir, "candidate.yaml", tc.shadow)
			}
			config := demoConfig(t, dir, "config.yaml", "shadow: candidate.yaml\n")
			code, _, errText := runCLI(t, "check", "--config", config)
			if code != 1 || !strings.Contains(errText, tc.want) {
				t.Errorf("check: exit %d, stderr:\n%s\nwant %q", code, errText, tc.want)
			}
		})
	}
}
