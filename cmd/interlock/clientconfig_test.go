package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/interlock-mcp/interlock"
)

// TestClaudeDesktopConfig: a client's own configuration, unchanged, is
// checked and served: its server's tools are listed through interlock, and
// a destructive one is held.
func TestClaudeDesktopConfig(t *testing.T) {
	data := t.TempDir()
	config := filepath.Join(data, "claude_desktop_config.json")
	cfg := fmt.Sprintf(`{
  "mcpServers": {
    "billing": {
      "command": %q,
      "args": ["demo", "--db", %q],
      "autoApprove": []
    }
  }
}
`, binary, filepath.Join(data, "demo.db"))
	if err := os.WriteFile(config, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	if code, out, errText := runCLI(t, "check", "--config", config); code != 0 {
		t.Fatalf("check: %d %q %q", code, out, errText)
	}
	cmd := command("false", "serve", "--stdio", "--config", config, "--data", data)
	cs := connectClient(t, "claude", &mcp.CommandTransport{Command: cmd})
	defer cs.Close()
	tools, err := cs.ListTools(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tl := range tools.Tools {
		names = append(names, tl.Name)
	}
	for _, want := range []string{"list_customers", "delete_customer"} {
		if !slices.Contains(names, want) {
			t.Errorf("tools %v lack %s", names, want)
		}
	}
	res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "delete_customer", Arguments: map[string]any{"id": "acct_1024"}})
	if err != nil {
		t.Fatal(err)
	}
	if b := interlock.BodyOfResult(res); !res.IsError || b.Code != interlock.CodeDryRunPreview {
		t.Errorf("a destructive call under the built-in policy: %+v", b)
	}
	res, err = cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "get_customer", Arguments: map[string]any{"id": "acct_1024"}})
	if err != nil || res.IsError {
		t.Errorf("a read-only call: %v %+v", err, res)
	}
}
