package main

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestInitReadsClientFilesAsClientsDo: init reads VS Code's JSONC as check
// does, the servers of one project of Claude Code's ~/.claude.json, and
// names secrets in interlock.yaml as ${NAME}, their values staying in the
// client's file, in interlock's entry.
func TestInitReadsClientFilesAsClientsDo(t *testing.T) {
	dir := t.TempDir()
	demo := fmt.Sprintf(`"command": %q, "args": ["demo", "--db", %q]`, binary, filepath.Join(dir, "demo.db"))
	t.Setenv("INTERLOCK_INIT_TEST_PAT", "ghp_from_the_prompt")

	t.Run("VS Code's JSONC, with inputs and a literal token", func(t *testing.T) {
		client := filepath.Join(dir, "mcp.json")
		if err := os.WriteFile(client, []byte(`// .vscode/mcp.json
{
  "inputs": [{"type": "promptString", "id": "interlock-init-test-pat", "password": true},],
  /* one server */
  "servers": {
    "billing": {`+demo+`,
      "env": {"GITHUB_TOKEN": "${input:interlock-init-test-pat}", "API_KEY": "sk_live_1", "REGION": "eu", "HOME_DIR": "${env:HOME}"}, // as VS Code has it
    },
  },
}
`), 0o600); err != nil {
			t.Fatal(err)
		}
		out := filepath.Join(dir, "vscode.yaml")
		code, snippet, errText := runCLI(t, "init", "--from", client, "--out", out)
		if code != 0 {
			t.Fatalf("init: exit %d\n%s", code, errText)
		}
		data, _ := os.ReadFile(out)
		for _, want := range []string{`API_KEY: ${API_KEY}`, `GITHUB_TOKEN: ${INTERLOCK_INIT_TEST_PAT}`, `HOME_DIR: ${HOME}`, `REGION: eu`} {
			if !strings.Contains(string(data), want) {
				t.Errorf("interlock.yaml lacks %q:\n%s", want, data)
			}
		}
		if strings.Contains(string(data), "sk_live_1") || strings.Contains(string(data), "${input:") {
			t.Errorf("interlock.yaml holds the token or a VS Code input:\n%s", data)
		}
		var routed struct {
			Inputs  []any `json:"inputs"`
			Servers map[string]struct {
				Env map[string]string `json:"env"`
			} `json:"servers"`
		}
		if err := json.Unmarshal([]byte(snippet), &routed); err != nil {
			t.Fatalf("%v\n%s", err, snippet)
		}
		env := routed.Servers["interlock"].Env
		if len(routed.Inputs) != 1 || env["API_KEY"] != "sk_live_1" || env["INTERLOCK_INIT_TEST_PAT"] != "${input:interlock-init-test-pat}" ||
			env["HOME"] != "${env:HOME}" || env["MCP_DRY_RUN"] != "true" || len(env) != 4 {
			t.Errorf("interlock's entry does not pass the values: %v\n%s", env, snippet)
		}
		if !strings.Contains(errText, "It reads API_KEY, HOME, INTERLOCK_INIT_TEST_PAT from its environment") {
			t.Errorf("stderr does not name the variables: %s", errText)
		}
	})

	t.Run("Claude Code's user file", func(t *testing.T) {
		project := filepath.Join(dir, "project")
		client := filepath.Join(dir, ".claude.json")
		if err := os.WriteFile(client, fmt.Appendf(nil, `{
  "numStartups": 2,
  "projects": {
    "/elsewhere": {"mcpServers": {"other": {"command": "other-server"}}},
    %q: {"allowedTools": [], "mcpServers": {"billing": {%s}}}
  },
  "mcpServers": {}
}`, project, demo), 0o600); err != nil {
			t.Fatal(err)
		}
		code, _, errText := runCLI(t, "init", "--from", client, "--out", filepath.Join(dir, "none.yaml"))
		if code != 1 || !strings.Contains(errText, "only for the projects "+project+" (1), /elsewhere (1)") && !strings.Contains(errText, "/elsewhere (1), "+project+" (1)") ||
			!strings.Contains(errText, "--project DIR") {
			t.Errorf("no project: exit %d %q", code, errText)
		}
		out := filepath.Join(dir, "claude.yaml")
		code, snippet, errText := runCLI(t, "init", "--from", client, "--out", out, "--project", project)
		if code != 0 || !strings.Contains(errText, "Reading the servers of project "+project) {
			t.Fatalf("init --project: exit %d\n%s", code, errText)
		}
		if data, _ := os.ReadFile(out); !strings.Contains(string(data), "mcpServers:\n  billing:\n") {
			t.Errorf("interlock.yaml:\n%s", data)
		}
		var routed struct {
			NumStartups int `json:"numStartups"`
			Projects    map[string]struct {
				MCPServers map[string]any `json:"mcpServers"`
			} `json:"projects"`
		}
		if err := json.Unmarshal([]byte(snippet), &routed); err != nil {
			t.Fatalf("%v\n%s", err, snippet)
		}
		if routed.NumStartups != 2 || routed.Projects[project].MCPServers["interlock"] == nil || len(routed.Projects[project].MCPServers) != 1 ||
			routed.Projects["/elsewhere"].MCPServers["other"] == nil {
			t.Errorf("the project's servers are not routed through interlock:\n%s", snippet)
		}
	})
}

// TestInitUnderGoRun: a binary go run built lives in a go-build directory
// that is gone once it exits, so the client is given the interlock on PATH,
// or init says to install it.
func TestInitUnderGoRun(t *testing.T) {
	dir := t.TempDir()
	temp := filepath.Join(dir, "go-build123", "b001", "exe", "interlock")
	installed := filepath.Join(dir, "bin", "interlock")
	for _, p := range []string{temp, installed} {
		if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.Link(binary, p); err != nil {
			t.Fatal(err)
		}
	}
	client := clientFile(t, dir, "claude_desktop_config.json", "mcpServers")
	run := func(path, out string) (int, string, string) {
		cmd := exec.Command(temp, "init", "--from", client, "--out", filepath.Join(dir, out))
		cmd.Env = append(os.Environ(), "PATH="+path)
		var stdout, stderr strings.Builder
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err := cmd.Run()
		if ee, ok := err.(*exec.ExitError); ok {
			return ee.ExitCode(), stdout.String(), stderr.String()
		}
		return 0, stdout.String(), stderr.String()
	}
	if code, _, errText := run(filepath.Join(dir, "nowhere"), "a.yaml"); code != 1 || !strings.Contains(errText, "go install ./cmd/interlock") {
		t.Errorf("no interlock on PATH: exit %d %q", code, errText)
	}
	code, snippet, errText := run(filepath.Dir(installed), "b.yaml")
	if code != 0 || !strings.Contains(snippet, fmt.Sprintf(`"command": %q`, installed)) || strings.Contains(snippet, "go-build") {
		t.Errorf("exit %d, snippet %s\n%s", code, snippet, errText)
	}
}
