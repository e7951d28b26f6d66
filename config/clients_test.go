package config

import (
	"fmt"
	"slices"
	"strings"
	"testing"
)

// TestClientConfigs: the configuration files MCP clients already have are
// interlock configurations as they are: each server an upstream of its
// name, the built-in policy deciding; and interlock's YAML may hold the
// same map beside its rules.
func TestClientConfigs(t *testing.T) {
	type up struct {
		name, url string
		command   []string
	}
	tests := []struct {
		name, file string
		want       []up
		problems   []string
	}{
		{"Claude Desktop", `{"mcpServers": {"filesystem": {"command": "npx", "args": ["-y", "@modelcontextprotocol/server-filesystem", "/tmp"]}}}`,
			[]up{{name: "filesystem", command: []string{"npx", "-y", "@modelcontextprotocol/server-filesystem", "/tmp"}}}, nil},
		{"Cursor, with its own keys and a remote server", `{"mcpServers": {
  "github": {"command": "docker", "args": ["run", "-i", "--rm", "ghcr.io/github/github-mcp-server"], "env": {"GITHUB_TOKEN": "ghp_x"}, "autoApprove": [], "timeout": 60},
  "remote": {"url": "https://mcp.example.com/mcp", "headers": {"Authorization": "Bearer x"}}}}`,
			[]up{{name: "github", command: []string{"docker", "run", "-i", "--rm", "ghcr.io/github/github-mcp-server"}}, {name: "remote", url: "https://mcp.example.com/mcp"}}, nil},
		{"VS Code, with inputs", `{"inputs": [{"type": "promptString", "id": "k"}], "servers": {"fs": {"type": "stdio", "command": "npx", "args": ["x"]}, "api": {"type": "http", "url": "https://api.example.com/mcp"}}}`,
			[]up{{name: "api", url: "https://api.example.com/mcp"}, {name: "fs", command: []string{"npx", "x"}}}, nil},
		{"Claude Desktop, with settings of its own", `{"globalShortcut": "Ctrl+Space", "mcpServers": {"fs": {"command": "npx", "args": ["x"]}}}`,
			[]up{{name: "fs", command: []string{"npx", "x"}}}, nil},
		{"a disabled server is left out", `{"mcpServers": {"on": {"command": "a"}, "off": {"command": "b", "disabled": true}}}`,
			[]up{{name: "on", command: []string{"a"}}}, nil},
		{"interlock's YAML holding the map beside its rules", "mcpServers:\n  fs:\n    command: npx\n    args: [\"-y\", \"@modelcontextprotocol/server-filesystem\", /tmp]\nrules:\n  - name: writes\n    match: {tools: [write_file], upstream: fs}\n    mode: token\n",
			[]up{{name: "fs", command: []string{"npx", "-y", "@modelcontextprotocol/server-filesystem", "/tmp"}}}, nil},
		{"an SSE server", `{"mcpServers": {"old": {"type": "sse", "url": "http://127.0.0.1:9000/sse"}}}`, nil,
			[]string{"mcpServers.old speaks the SSE transport"}},
		{"a server with neither command nor url", `{"servers": {"x": {"args": ["a"]}}}`, nil,
			[]string{"servers.x has no command or url"}},
		{"an unknown type", `{"mcpServers": {"x": {"type": "websocket", "url": "ws://x"}}}`, nil,
			[]string{`mcpServers.x has type "websocket"`}},
		{"a misspelt key", `{"mcpServers": {"x": {"command": "a", "argz": []}}}`, nil,
			[]string{`unknown field "argz"`}},
		{"the same name as an upstream", "upstreams:\n  - name: fs\n    command: [a]\nmcpServers:\n  fs:\n    command: b\n", nil,
			[]string{`upstream "fs" is already defined on line 2`}},
		{"a rule naming a server's upstream that does not exist", "mcpServers:\n  fs: {command: a}\nrules:\n  - {name: r, match: {upstream: github}, mode: deny}\n", nil,
			[]string{"github"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f, err := Parse("client.json", []byte(tt.file), func(string) (string, bool) { return "", false })
			if len(tt.problems) > 0 {
				for _, p := range tt.problems {
					if err == nil || !strings.Contains(err.Error(), p) {
						t.Errorf("err = %v, want it to say %q", err, p)
					}
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var got []up
			for _, u := range f.Upstreams {
				got = append(got, up{name: u.Name, url: u.URL, command: u.Command})
			}
			if !slices.EqualFunc(got, tt.want, func(a, b up) bool {
				return a.name == b.name && a.url == b.url && slices.Equal(a.command, b.command)
			}) {
				t.Errorf("upstreams %+v, want %+v", got, tt.want)
			}
			if f.Policy.DefaultMode != "flag" {
				t.Errorf("default mode %q: the built-in policy should decide", f.Policy.DefaultMode)
			}
		})
	}
}

// TestYAMLMistakes: the parser's words for the mistakes people make most
// are replaced by what to do, at the line of the mistake.
func TestYAMLMistakes(t *testing.T) {
	tests := []struct {
		name, file string
		line       int
		says       string
	}{
		{"an npm scope unquoted in a list", "upstreams:\n  - name: fs\n    command: [npx, -y, @modelcontextprotocol/server-filesystem, /tmp]\n", 3,
			`a value that starts with "@" must be quoted: write "@modelcontextprotocol/server-filesystem"`},
		{"an npm scope unquoted as a value", "mcpServers:\n  fs:\n    command: npx\n    args:\n      - -y\n      - @modelcontextprotocol/server-filesystem\n", 6,
			`must be quoted: write "@modelcontextprotocol/server-filesystem"`},
		{"a backquote", "rules:\n  - name: r\n    summary: `rm`\n    mode: deny\n", 3, "a value that starts with \"`\" must be quoted"},
		{"a command as one string", "upstreams:\n  - name: fs\n    command: npx -y server\n", 3,
			"a list goes here, not the text `npx -y ...`: write [a, b, c]"},
		{"a tab", "upstreams:\n\t- name: fs\n", 2, "a tab in the indentation: YAML indents with spaces only"},
		{"a colon and a space in a value", "rules:\n  - name: r\n    when: args.path: x\n    mode: deny\n", 3, `quote the whole value`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse("interlock.yaml", []byte(tt.file), func(string) (string, bool) { return "", false })
			want := fmt.Sprintf("interlock.yaml:%d: ", tt.line)
			if err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), tt.says) {
				t.Errorf("err = %v, want %q and %q", err, want, tt.says)
			}
		})
	}
}

// TestClientFileKeepsInterlockKeys: in a client's JSON file the client's
// own settings are read past, but interlock's own keys are read as always:
// a rule written there is never dropped.
func TestClientFileKeepsInterlockKeys(t *testing.T) {
	f, err := Parse("client.json", []byte(`{"globalShortcut": "x", "mcpServers": {"fs": {"command": "a"}},
  "rules": [{"name": "no-writes", "match": {"tools": ["write_file"]}, "mode": "deny"}]}`), func(string) (string, bool) { return "", false })
	if err != nil {
		t.Fatal(err)
	}
	if len(f.Policy.Rules) != 1 || f.Policy.Rules[0].Name != "no-writes" {
		t.Errorf("rules %v", f.Policy.Rules)
	}
	if _, err := Parse("interlock.json", []byte(`{"globalShortcut": "x", "rules": []}`), func(string) (string, bool) { return "", false }); err == nil ||
		!strings.Contains(err.Error(), `unknown field "globalShortcut"`) {
		t.Errorf("a JSON file that is no client's file: %v", err)
	}
}

// TestClaudeCodeUserFile: Claude Code's ~/.claude.json keeps servers per
// project, under projects > DIR > mcpServers, and the user's for every
// project at the top: a gateway started in a project fronts that project's
// own, elsewhere the user's, and where neither has any it says which
// directories do.
func TestClaudeCodeUserFile(t *testing.T) {
	here := t.TempDir()
	t.Chdir(here)
	file := func(projectServers string) []byte {
		return fmt.Appendf(nil, `{
  "numStartups": 12,
  "projects": {
    "/work/other": {"allowedTools": [], "mcpServers": {"other": {"command": "o"}, "more": {"command": "m"}}},
    %q: {
      "allowedTools": [],
      "mcpServers": {%s},
      "hasTrustDialogAccepted": true
    }
  },
  "mcpServers": {%%s}
}`, here, projectServers)
	}
	none := func(string) (string, bool) { return "", false }
	for _, tt := range []struct {
		name, project, user string
		want                string
	}{
		{"the project's own", `"db": {"command": "db-server"}`, `"user": {"command": "u"}`, "db@7"},
		{"the user's, when the project has none", ``, `"user": {"command": "u"}`, "user@11"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			f, err := Parse(".claude.json", fmt.Appendf(nil, string(file(tt.project)), tt.user), none)
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, u := range f.Upstreams {
				got = append(got, fmt.Sprintf("%s@%d", u.Name, u.Line))
			}
			if strings.Join(got, " ") != tt.want {
				t.Errorf("upstreams %v, want %s", got, tt.want)
			}
		})
	}
	_, err := Parse(".claude.json", fmt.Appendf(nil, string(file("")), ""), none)
	if want := ".claude.json:3: Claude Code keeps no servers in this file for " + here + ", nor for every project (mcpServers), only for the projects /work/other (2): run interlock in one of those directories, or give interlock init --project DIR"; err == nil || err.Error() != want {
		t.Errorf("err = %v, want %q", err, want)
	}
}
