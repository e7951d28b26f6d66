package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A child that exits at once is named in the banner with its command and
// what it said on standard error; the gateway serves the rest.
func TestServeBannerSaysWhyAnUpstreamIsDown(t *testing.T) {
	dir := t.TempDir()
	config := filepath.Join(dir, "down.yaml")
	body := "upstreams:\n  - name: github\n    command: [sh, -c, \"echo 'Error: GITHUB_PERSONAL_ACCESS_TOKEN not set' >&2; exit 1\"]\n"
	if err := os.WriteFile(config, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	code, _, stderr := runBinary(t, "serve", "--stdio", "--config", config, "--data", dir)
	if code != 0 {
		t.Fatalf("exit %d; stderr:\n%s", code, stderr)
	}
	for _, want := range []string{
		`  upstream  github: down, retrying in the background: upstream "github" (` + config + `:2): command ["sh","-c",`,
		`its stderr ended with ["Error: GITHUB_PERSONAL_ACCESS_TOKEN not set"]`,
	} {
		if !strings.Contains(stderr, want) {
			t.Errorf("stderr does not contain %q:\n%s", want, stderr)
		}
	}
}

// A rule whose glob matches none of the tools served is named in the
// banner, with the tool it most likely meant; the gateway serves.
func TestServeBannerWarnsOfARuleThatMatchesNoTool(t *testing.T) {
	dir := t.TempDir()
	config := filepath.Join(dir, "typo.yaml")
	body := "upstreams:\n  - name: demo\n    command: [interlock, demo, --db, " + filepath.Join(dir, "demo.db") + "]\n" +
		"rules:\n  - name: deletes\n    match: {tools: [delete_custmer]}\n    mode: deny\n"
	if err := os.WriteFile(config, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	code, _, stderr := runBinary(t, "serve", "--stdio", "--config", config, "--data", dir)
	want := "  warning   " + config + `:6: rule "deletes": tool glob "delete_custmer" matches no tool that the upstreams offer: did you mean delete_customer?`
	if code != 0 || !strings.Contains(stderr, want) {
		t.Errorf("exit %d; stderr does not contain %q:\n%s", code, want, stderr)
	}
}
