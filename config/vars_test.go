package config

import (
	"strings"
	"testing"
)

// TestClientVariables: a client's server gets the values its client would
// give it: ${VAR} and ${env:VAR} from the environment, ${VAR:-default}
// the default when VAR is unset, in command, args, url and cwd as in env
// and headers; VS Code's ${input:id}, which interlock cannot ask for, is
// read from the variable its id names, and never passed on as written.
func TestClientVariables(t *testing.T) {
	env := map[string]string{"GITHUB_TOKEN": "ghp_1", "ROOT": "/srv", "EMPTY": ""}
	lookup := func(k string) (string, bool) { v, ok := env[k]; return v, ok }
	f, err := Parse("mcp.json", []byte(`{"servers": {
  "gh": {"command": "${ROOT}/bin/gh-${MODE:-stdio}", "args": ["--token", "${input:github_token}", "${env:ROOT}", "${EMPTY:-x}", "${workspaceFolder.name}", "$HOME"],
    "env": {"TOKEN": "${input:githubToken}", "LEVEL": "${LOG_LEVEL:-info}", "DIR": "${env:ROOT}"}, "cwd": "${ROOT}"},
  "api": {"type": "http", "url": "https://${HOST:-api.example.com}/mcp", "headers": {"Authorization": "Bearer ${input:github-token}"}}}}`), lookup)
	if err != nil {
		t.Fatal(err)
	}
	api, gh := f.Upstreams[0], f.Upstreams[1]
	if got := strings.Join(gh.Command, " "); got != "/srv/bin/gh-stdio --token ghp_1 /srv x ${workspaceFolder.name} $HOME" {
		t.Errorf("command %q", got)
	}
	if gh.Env["TOKEN"] != "ghp_1" || gh.Env["LEVEL"] != "info" || gh.Env["DIR"] != "/srv" || gh.Dir != "/srv" {
		t.Errorf("env %v, dir %q", gh.Env, gh.Dir)
	}
	if api.URL != "https://api.example.com/mcp" || api.Headers["Authorization"] != "Bearer ghp_1" {
		t.Errorf("url %q, headers %v", api.URL, api.Headers)
	}

	_, err = Parse("mcp.json", []byte(`{"servers": {"gh": {"command": "gh",
  "args": ["${input:api_key}"],
  "env": {"A": "${env:NOT_SET}", "B": "${INTERLOCK_SECRET:-x}"}}}}`), lookup)
	for _, want := range []string{
		`mcp.json:2: upstream "gh": args[0] refers to ${input:api_key}, a value VS Code asks the user for, which interlock cannot: set API_KEY in interlock's environment`,
		`mcp.json:3: upstream "gh": env A refers to ${env:NOT_SET}, which is not set in interlock's environment`,
		`mcp.json:3: upstream "gh": env B refers to ${INTERLOCK_SECRET}: the sealing keys stay inside the gateway`,
	} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("err = %v, want %q", err, want)
		}
	}
}

func TestInputVar(t *testing.T) {
	for id, want := range map[string]string{
		"github_token": "GITHUB_TOKEN", "github-token": "GITHUB_TOKEN", "githubToken": "GITHUB_TOKEN",
		"API.key": "API_KEY", "pat": "PAT", "1password": "INPUT_1PASSWORD", "--": "INPUT_",
	} {
		if got := InputVar(id); got != want {
			t.Errorf("InputVar(%q) = %q, want %q", id, got, want)
		}
	}
}
