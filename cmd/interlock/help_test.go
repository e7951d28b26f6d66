package main

import (
	"encoding/json"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

func TestHonestHelp(t *testing.T) {
	commands := map[string][]string{
		"serve":        {"--config", "--listen", "--stdio", "--stateless", "--data"},
		"demo":         {"--db", "--reset"},
		"check":        {"--config"},
		"init":         {"--from", "--out", "--data", "--force", "--write"},
		"test":         {"--config", "--connect"},
		"replay":       {"--policy", "--config", "--data", "--since", "--connect"},
		"key":          {"--principal", "--tenant", "--groups"},
		"approvals":    {"--url", "--reason"},
		"secret":       nil,
		"status":       {"--data"},
		"console link": {"--data"},
		"audit verify": {"--data", "--config", "--checkpoints", "--public-key"},
		"audit tail":   {"--data", "--config", "-n", "-f", "--json"},
		"audit export": {"--data", "--config", "--since"},
	}
	for name, flags := range commands {
		t.Run(name, func(t *testing.T) {
			code, out, errText := runCLI(t, append(strings.Fields(name), "--help")...)
			if code != 0 || errText != "" {
				t.Fatalf("exit %d, stderr %q", code, errText)
			}
			for _, f := range flags {
				if !regexp.MustCompile(`(?m)^\s+` + regexp.QuoteMeta(f) + `\b`).MatchString(out) {
					t.Errorf("help does not list %s:\n%s", f, out)
				}
			}
			if regexp.MustCompile(`(?m)^\s+-[a-z]{2,}`).MatchString(out) {
				t.Errorf("help lists a long flag with one dash:\n%s", out)
			}
			for _, env := range []string{"MCP_DRY_RUN", "INTERLOCK_SECRET", "interlock secret"} {
				if !strings.Contains(out, env) {
					t.Errorf("help does not mention %s", env)
				}
			}
		})
	}
	// A command with subcommands answers --help with their list, as a
	// help asked for: on standard output, exit 0.
	for name, subs := range map[string][]string{"audit": {"verify", "tail", "export"}, "console": {"link"}, "approvals": {"list", "approve", "deny"}} {
		t.Run(name+" subcommands", func(t *testing.T) {
			for _, ask := range []string{"--help", "-h", "help"} {
				code, out, errText := runCLI(t, name, ask)
				if code != 0 || errText != "" {
					t.Fatalf("%s %s: exit %d, stderr %q", name, ask, code, errText)
				}
				for _, s := range subs {
					if !strings.Contains(out, s) {
						t.Errorf("%s %s does not name %s:\n%s", name, ask, s, out)
					}
				}
			}
		})
	}
	t.Run("version", func(t *testing.T) {
		for _, arg := range []string{"--version", "version"} {
			if code, out, _ := runCLI(t, arg); code != 0 || out != "interlock "+version+"\n" {
				t.Errorf("%s: %d %q", arg, code, out)
			}
		}
	})
	t.Run("key keeps the key off standard output", func(t *testing.T) {
		code, out, errText := runCLI(t, "key", "--principal", "ci-bot")
		key := regexp.MustCompile(`ilk_[A-Za-z0-9_-]{43}`).FindString(errText)
		if code != 0 || key == "" || strings.Contains(out, "ilk_") || !strings.Contains(errText, "Authorization: Bearer "+key) {
			t.Fatalf("exit %d\nstdout %q\nstderr %q", code, out, errText)
		}
		if !strings.Contains(out, "sha256: ") || !strings.Contains(out, "principal: ci-bot") {
			t.Errorf("stdout lacks the config lines: %q", out)
		}
	})
	t.Run("secret", func(t *testing.T) {
		code, out, _ := runCLI(t, "secret")
		if code != 0 || !regexp.MustCompile(`^[A-Za-z0-9_-]{43}\n$`).MatchString(out) {
			t.Errorf("%d %q", code, out)
		}
	})
	t.Run("an unknown flag is a usage error", func(t *testing.T) {
		if code, _, errText := runCLI(t, "serve", "--bogus"); code != 2 || !strings.Contains(errText, "bogus") {
			t.Errorf("%d %q", code, errText)
		}
	})
}

func TestServeRefusesWhatDoesNotGoTogether(t *testing.T) {
	for _, args := range [][]string{{"--stdio", "--listen", "127.0.0.1:0"}, {"--listen", "127.0.0.1:0", "--stdio"}, {"--stdio", "--stateless"}} {
		code, _, errText := runCLI(t, append([]string{"serve", "--data", t.TempDir()}, args...)...)
		if code != 2 || !strings.Contains(errText, "do not go together") {
			t.Errorf("%v: exit %d, %q", args, code, errText)
		}
	}
}

// TestBannerSaysWhyDryRunIsOn: a value that looks like "false" but is not
// is shown, so the operator sees the typo.
func TestBannerSaysWhyDryRunIsOn(t *testing.T) {
	for value, want := range map[string]string{"FALSE": `MCP_DRY_RUN="FALSE" is not exactly "false"`, "": "MCP_DRY_RUN is not set", "false": "dry run   OFF"} {
		cmd := command(value, "serve", "--stdio", "--data", t.TempDir())
		cmd.Stdin = strings.NewReader("")
		var stderr strings.Builder
		cmd.Stderr = &stderr
		_ = cmd.Run()
		if !strings.Contains(stderr.String(), want) {
			t.Errorf("MCP_DRY_RUN=%q: banner lacks %q:\n%s", value, want, stderr.String())
		}
	}
}

// TestBuiltinConfigWorksWhenCopied: the built-in config, written to a file
// as a starting point, serves the demo with no PATH set up.
func TestBuiltinConfigWorksWhenCopied(t *testing.T) {
	dir := t.TempDir()
	config := dir + "/interlock.yaml"
	if err := os.WriteFile(config, builtinConfig, 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := command("", "serve", "--stdio", "--config", config, "--data", dir)
	cmd.Env = append(cmd.Env, "PATH=/nonexistent")
	cmd.Dir = dir
	cs := connectClient(t, "copy", &mcp.CommandTransport{Command: cmd})
	defer cs.Close()
	if res := callTool(t, cs, "list_customers", map[string]any{}); res.IsError {
		t.Errorf("list_customers: %+v", res)
	}
}

// TestJSONLogs: with --log-format json every line the gateway logs is a
// JSON object, and a decision's line says how the call was confirmed.
func TestJSONLogs(t *testing.T) {
	cmd := command("false", "serve", "--stdio", "--data", t.TempDir(), "--log-format", "json", "--log-level", "debug")
	var stderr strings.Builder
	cmd.Stderr = &stderr
	cs := connectClient(t, "logs", &mcp.CommandTransport{Command: cmd})
	callTool(t, cs, "send_reminder", map[string]any{"customer_id": "acct_9931", "__confirm": true})
	cs.Close()
	found := false
	for line := range strings.Lines(stderr.String()) {
		if !strings.HasPrefix(line, "{") {
			continue // the banner
		}
		var rec map[string]any
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Errorf("not JSON: %q", line)
		}
		if rec["msg"] == "tool call" && rec["tool"] == "send_reminder" {
			found = rec["decision"] == "confirmed" && rec["confirmed_by"] == "flag" && rec["outcome"] == "ok"
		}
	}
	if !found {
		t.Errorf("no decision line says how send_reminder was confirmed:\n%s", stderr.String())
	}
	for _, bad := range [][]string{{"--log-format", "xml"}, {"--log-level", "loud"}} {
		if code, _, errText := runCLI(t, append([]string{"serve", "--stdio", "--data", t.TempDir()}, bad...)...); code != 1 || !strings.Contains(errText, bad[0]) {
			t.Errorf("%v: %d %q", bad, code, errText)
		}
	}
}

// TestKeyGroups: interlock key --groups writes the groups rules name as
// group:NAME approvers into the key's config lines.
func TestKeyGroups(t *testing.T) {
	for _, tt := range []struct{ groups, want string }{
		{"finance", "      groups: [finance]\n"},
		{"finance, ops ,", "      groups: [finance, ops]\n"},
		{"", ""},
	} {
		code, out, _ := runCLI(t, "key", "--principal", "bob", "--groups", tt.groups)
		if code != 0 || !strings.HasSuffix(out, "      tenant: default\n"+tt.want) {
			t.Errorf("--groups %q: exit %d\n%s", tt.groups, code, out)
		}
	}
}
