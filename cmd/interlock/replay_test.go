package main

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/interlock-mcp/interlock"
	"github.com/interlock-mcp/interlock/audit"
	"github.com/interlock-mcp/interlock/sqlite"
)

// TestReplay records real calls through the gateway, then replays the
// audit log against candidate policies: the unchanged policy changes
// nothing, a changed rule shows up, and a condition over an argument the
// log holds redacted is flagged rather than guessed.
func TestReplay(t *testing.T) {
	dir, data := t.TempDir(), t.TempDir()
	// customer_id is redacted in this deployment's audit log.
	config := demoConfig(t, dir, "config.yaml", "redact: [customer_id]\n")
	callsThroughServe(t, config, data, []demoCall{
		{"list_customers", map[string]any{}},
		{"refund_invoice", map[string]any{"invoice_id": "inv_1003", "amount": 20}},
		{"refund_invoice", map[string]any{"invoice_id": "inv_1003", "amount": 5000}},
		{"send_reminder", map[string]any{"customer_id": "acct_9931"}},
	})
	write := func(name, body string) string { return writeFile(t, dir, name, body) }
	noRefunds := write("no-refunds.yaml", `rules:
  - name: no-refunds
    match: {tools: [refund_invoice]}
    when: "num(args.amount) > 10"
    mode: deny
  - name: reminders
    match: {tools: [send_reminder]}
    mode: flag
`)
	vip := write("vip.yaml", `rules:
  - name: vip-reminders
    match: {tools: [send_reminder]}
    when: "args.customer_id == 'acct_9931'"
    mode: token
  - name: reminders
    match: {tools: [send_reminder]}
    mode: flag
  - name: refunds
    match: {tools: [refund_invoice]}
    mode: token
  - name: large-refunds
    match: {tools: [refund_invoice]}
    mode: approval
    approvers: [operator]
`)
	for _, tc := range []struct {
		name    string
		args    []string
		code    int
		shown   int
		lines   []string
		summary string
	}{
		{name: "the live policy again changes nothing", args: []string{"--policy", config}, code: 0,
			summary: "0 of 4 calls would be decided differently\n"},
		{name: "a rule change shows each call it changes", args: []string{"--policy", noRefunds}, code: 2, shown: 2,
			lines: []string{
				`~ refund_invoice (local/`, `): token (rule "refunds") -> deny (rule "no-refunds")`,
				`): approval (rule "large-refunds") -> deny (rule "no-refunds")`,
			},
			summary: "2 of 4 calls would be decided differently\n"},
		{name: "a condition over a redacted argument is flagged", args: []string{"--policy", vip}, code: 2, shown: 2,
			lines: []string{
				`? send_reminder (local/`, `): flag (rule "reminders") -> flag (rule "reminders") (cannot be told: rule "vip-reminders" reads an argument the log holds redacted)`,
				`~ refund_invoice (local/`, `): approval (rule "large-refunds") -> token (rule "refunds")`,
			},
			summary: "1 of 4 calls would be decided differently; 1 cannot be replayed faithfully\n"},
		{name: "calls before --since are left out", args: []string{"--policy", noRefunds, "--since", "2999-01-01T00:00:00Z"}, code: 0,
			summary: "0 of 0 calls would be decided differently\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, stdout, stderr := runCLI(t, append([]string{"replay", "--config", config, "--data", data}, tc.args...)...)
			if code != tc.code {
				t.Errorf("exit %d, want %d\nstdout:\n%s\nstderr:\n%s", code, tc.code, stdout, stderr)
			}
			if !strings.HasPrefix(stdout, "replaying the calls recorded in sqlite "+filepath.Join(data, "audit.db")) || !strings.HasSuffix(stdout, tc.summary) {
				t.Errorf("stdout does not begin with the log nor end with %q:\n%s", tc.summary, stdout)
			}
			for _, want := range tc.lines {
				if !strings.Contains(stdout, want) {
					t.Errorf("stdout lacks %q:\n%s", want, stdout)
				}
			}
			if changes := strings.Count(stdout, "\n~ ") + strings.Count(stdout, "\n? "); changes != tc.shown {
				t.Errorf("%d decisions shown, want %d:\n%s", changes, tc.shown, stdout)
			}
		})
	}
	t.Run("a candidate that does not load is exit 1 at its line", func(t *testing.T) {
		bad := write("bad.yaml", "rules:\n  - name: x\n    mode: tokn\n")
		code, _, stderr := runCLI(t, "replay", "--config", config, "--data", data, "--policy", bad)
		if code != 1 || !strings.Contains(stderr, "bad.yaml:3: rule \"x\": unknown mode \"tokn\"") {
			t.Errorf("exit %d, stderr:\n%s", code, stderr)
		}
	})
	t.Run("no log is exit 1", func(t *testing.T) {
		code, _, stderr := runCLI(t, "replay", "--config", config, "--data", t.TempDir(), "--policy", noRefunds)
		if code != 1 || !strings.Contains(stderr, "no audit log at") {
			t.Errorf("exit %d, stderr:\n%s", code, stderr)
		}
	})
}

// TestReplayRecordsWithoutHints: calls recorded before records kept their
// hints are decided for an unannotated tool, and the count says how many;
// with --connect they take the hints the upstream advertises.
func TestReplayRecordsWithoutHints(t *testing.T) {
	dir, data := t.TempDir(), t.TempDir()
	config := demoConfig(t, dir, "config.yaml", "")
	log, err := sqlite.OpenAudit(context.Background(), filepath.Join(data, "audit.db"))
	if err != nil {
		t.Fatal(err)
	}
	at := time.Date(2026, 11, 1, 9, 0, 0, 0, time.UTC)
	if err := log.Append(context.Background(), false,
		&audit.Record{Time: at, Event: "call", Tenant: "local", Principal: "alice", Tool: "get_customer", Upstream: "demo",
			Mode: "allow", Args: map[string]any{"id": "acct_9931"}, Decision: audit.DecisionAllowed, Outcome: audit.OutcomeOK},
		&audit.Record{Time: at, Event: "call", Tenant: "local", Principal: "alice", Tool: "refund_invoice", Upstream: "demo",
			Rule: "refunds", Mode: "token", Args: map[string]any{"invoice_id": "inv_1003", "amount": 20.0},
			Decision: audit.DecisionAsked, Outcome: string(interlock.CodeConfirmationRequired)}); err != nil {
		t.Fatal(err)
	}
	log.Close()
	for _, tc := range []struct {
		name   string
		args   []string
		code   int
		output string
	}{
		{"decided for an unannotated tool", nil, 2, `~ get_customer (local/alice, record 1, 2026-11-01T09:00:00Z): allow (default) -> flag (default)
1 of 2 calls would be decided differently; 2 recorded without hints were decided for an unannotated tool (destructive, open-world)
`},
		{"with the hints the demo advertises", []string{"--connect"}, 0, "0 of 2 calls would be decided differently\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, stdout, stderr := runCLI(t, append([]string{"replay", "--config", config, "--data", data, "--policy", config}, tc.args...)...)
			if code != tc.code || !strings.HasSuffix(stdout, tc.output) {
				t.Errorf("exit %d, want %d\nstdout:\n%s\nwant it to end with:\n%s\nstderr:\n%s", code, tc.code, stdout, tc.output, stderr)
			}
		})
	}
}
