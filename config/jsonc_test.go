package config

import (
	"strings"
	"testing"
)

// TestClientFilesAreJSONC: VS Code's and Cursor's files allow comments and
// trailing commas, so interlock reads them as those clients do; what is
// still not JSON is an error at its line that says so, not a YAML error.
func TestClientFilesAreJSONC(t *testing.T) {
	vscode := `// .vscode/mcp.json
{
  "inputs": [
    {"type": "promptString", "id": "github_token", "password": true}, // asked once
  ],
  /* the servers,
     one per tool box */
  "servers": {
    "fs": {"command": "npx", "args": ["-y", "a//b", "/* kept */", "c,]"],},
    "gh": {
      "type": "http",
      "url": "https://api.example.com/mcp", // remote
      "unknown": 1
    },
  },
}
`
	_, err := Parse("mcp.json", []byte(vscode), func(string) (string, bool) { return "", false })
	if err == nil || !strings.Contains(err.Error(), `mcp.json:13: `) || !strings.Contains(err.Error(), `unknown field "unknown"`) {
		t.Fatalf("a misspelt key in a commented file: %v, want it at line 13", err)
	}
	f, err := Parse("mcp.json", []byte(strings.Replace(vscode, `"unknown": 1`, `"description": "a key VS Code keeps"`, 1)), func(string) (string, bool) { return "", false })
	if err != nil {
		t.Fatal(err)
	}
	if len(f.Upstreams) != 2 || strings.Join(f.Upstreams[0].Command, " ") != "npx -y a//b /* kept */ c,]" || f.Upstreams[0].Line != 9 {
		for _, u := range f.Upstreams {
			t.Errorf("upstream %s at line %d: %q", u.Name, u.Line, u.Command)
		}
	}

	for _, tt := range []struct{ name, file, want string }{
		{"a missing comma", "{\"mcpServers\": {\n  \"a\": {\"command\": \"x\"}\n  \"b\": {\"command\": \"y\"}}}", "c.json:3: mcpServers: expected ',' or '}' in an object (column 3): an MCP client's file is JSON"},
		{"an open comment", "{\"mcpServers\": {\n  /* a\n}}", "c.json:2: a /* comment is not closed"},
		{"only comments", "// nothing yet\n", "c.json:1: the file holds only comments"},
		{"a duplicate server", "{\"mcpServers\": {\"a\": {\"command\": \"x\"},\n \"a\": {\"command\": \"y\"}}}", "c.json:2: mcpServers.a: duplicate key"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse("c.json", []byte(tt.file), func(string) (string, bool) { return "", false })
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("err = %v, want %q", err, tt.want)
			}
		})
	}

	// YAML in flow style is still YAML, // in a plain value and all.
	if _, err := Parse("interlock.yaml", []byte(`{upstreams: [{name: a, url: https://mcp.example.com/mcp}]}`), func(string) (string, bool) { return "", false }); err != nil {
		t.Errorf("flow-style YAML: %v", err)
	}
}
