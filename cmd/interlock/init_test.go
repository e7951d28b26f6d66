package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.yaml.in/yaml/v4"

	"github.com/interlock-mcp/interlock"
	"github.com/interlock-mcp/interlock/config"
	"github.com/interlock-mcp/interlock/policy"
)

// clientFile writes a client's configuration whose "billing" server is the
// demo, beside a key of the client's own, and any servers of extra (JSON
// members) after it.
func clientFile(t *testing.T, dir, name, key string, extra ...string) string {
	t.Helper()
	servers := fmt.Sprintf(`"billing": {"command": %q, "args": ["demo", "--db", %q], "autoApprove": []}`, binary, filepath.Join(dir, "demo.db"))
	for _, e := range extra {
		servers += ",\n    " + e
	}
	path := filepath.Join(dir, name)
	data := fmt.Sprintf("{\n  \"globalShortcut\": \"Ctrl+Space\",\n  %q: {\n    %s\n  }\n}\n", key, servers)
	if err := os.WriteFile(path, []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// starterRules reads the rules init wrote, by name.
func starterRules(t *testing.T, path string) (map[string]map[string]any, []byte) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Rules []map[string]any `yaml:"rules"`
	}
	if err := yaml.Load(data, &doc); err != nil {
		t.Fatal(err)
	}
	rules := map[string]map[string]any{}
	for _, r := range doc.Rules {
		match := r["match"].(map[string]any)
		for _, tool := range match["tools"].([]any) {
			rules[tool.(string)] = r
		}
	}
	return rules, data
}

func TestInitFromClientFiles(t *testing.T) {
	for _, tt := range []struct {
		client, key, typ string
	}{
		{"claude_desktop_config.json", "mcpServers", ""},
		{"mcp.json", "servers", "stdio"}, // VS Code's .vscode/mcp.json
	} {
		t.Run(tt.client, func(t *testing.T) {
			dir := t.TempDir()
			client := clientFile(t, dir, tt.client, tt.key)
			out := filepath.Join(dir, "interlock.yaml")
			code, snippet, errText := runCLI(t, "init", "--from", client, "--out", out)
			if code != 0 {
				t.Fatalf("init: exit %d\n%s", code, errText)
			}
			if code, stdout, errText := runCLI(t, "check", "--config", out, "--connect"); code != 0 {
				t.Fatalf("check --connect of the written file: exit %d\n%s%s", code, stdout, errText)
			}

			rules, data := starterRules(t, out)
			del := rules["delete_customer"]
			if del == nil || del["mode"] != "token" {
				t.Fatalf("delete_customer (destructive): rule %v\n%s", del, data)
			}
			if p, _ := del["preview"].(map[string]any); p["tool"] != "get_customer" || fmt.Sprint(p["args"]) != "map[id:args.id]" {
				t.Errorf("delete_customer's preview: %v", del["preview"])
			}
			if s, _ := del["summary"].(string); !strings.Contains(s, "delete_customer") || !strings.Contains(s, "{{.args.id}}") {
				t.Errorf("delete_customer's summary %q names neither the tool nor its argument", s)
			}
			if r := rules["send_reminder"]; r == nil || r["mode"] != "flag" {
				t.Errorf("send_reminder (a write, not destructive): rule %v", r)
			}
			for _, readOnly := range []string{"get_customer", "list_customers", "quote_refund"} {
				if r := rules[readOnly]; r != nil {
					t.Errorf("%s is read-only, yet has rule %v", readOnly, r)
				}
			}
			if !regexp.MustCompile(`(?m)^  # delete_customer: destructive per its annotations`).Match(data) {
				t.Errorf("the rule does not say why it was proposed:\n%s", data)
			}
			if !strings.Contains(string(data), "mcpServers:\n  billing:\n") || strings.Contains(string(data), "autoApprove") {
				t.Errorf("the servers are not the client's, as interlock reads them:\n%s", data)
			}

			var routed map[string]any
			if err := json.Unmarshal([]byte(snippet), &routed); err != nil {
				t.Fatalf("the snippet is not JSON: %v\n%s", err, snippet)
			}
			if routed["globalShortcut"] != "Ctrl+Space" {
				t.Errorf("the client's own key is lost: %v", routed)
			}
			servers, _ := routed[tt.key].(map[string]any)
			il, _ := servers["interlock"].(map[string]any)
			abs, _ := filepath.Abs(out)
			wantArgs := fmt.Sprint([]any{"serve", "--stdio", "--config", abs, "--data", filepath.Join(dir, ".interlock")})
			if len(servers) != 1 || il == nil || il["command"] != binary || fmt.Sprint(il["args"]) != wantArgs ||
				fmt.Sprint(il["env"]) != "map[MCP_DRY_RUN:true]" || (il["type"] != nil) != (tt.typ != "") {
				t.Errorf("the snippet does not route the client through interlock: %s", snippet)
			}
			if tt.typ != "" && il["type"] != tt.typ {
				t.Errorf("type %v, want %s", il["type"], tt.typ)
			}
		})
	}
}

func TestInitWriteKeepsABackup(t *testing.T) {
	dir := t.TempDir()
	client := clientFile(t, dir, ".mcp.json", "mcpServers")
	original, _ := os.ReadFile(client)
	out := filepath.Join(dir, "interlock.yaml")
	if code, _, errText := runCLI(t, "init", "--from", client, "--out", out, "--write"); code != 0 {
		t.Fatalf("init --write: exit %d\n%s", code, errText)
	}
	if backup, _ := os.ReadFile(client + ".bak"); string(backup) != string(original) {
		t.Errorf("the backup is not the original:\n%s", backup)
	}
	// The rewritten file is the client's, routed through interlock, and
	// interlock serves it as it is.
	rewritten, _ := os.ReadFile(client)
	if !strings.Contains(string(rewritten), `"globalShortcut": "Ctrl+Space"`) || !strings.Contains(string(rewritten), `"--config",`) ||
		strings.Contains(string(rewritten), `"billing"`) {
		t.Errorf("rewritten:\n%s", rewritten)
	}

	code, _, errText := runCLI(t, "init", "--from", client, "--out", filepath.Join(dir, "other.yaml"), "--write")
	if code != 1 || !strings.Contains(errText, ".mcp.json.bak exists") {
		t.Errorf("a second --write: exit %d %q", code, errText)
	}
	if now, _ := os.ReadFile(client); string(now) != string(rewritten) {
		t.Error("a refused --write changed the client's file")
	}
	if _, err := os.Stat(filepath.Join(dir, "other.yaml")); err == nil {
		t.Error("a refused --write wrote a configuration")
	}
}

func TestInitRefusals(t *testing.T) {
	dir := t.TempDir()
	client := clientFile(t, dir, "claude_desktop_config.json", "mcpServers")
	exists := filepath.Join(dir, "exists.yaml")
	if err := os.WriteFile(exists, []byte("# mine\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	empty := filepath.Join(dir, "empty.json")
	if err := os.WriteFile(empty, []byte(`{"mcpServers": {}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	routed := filepath.Join(dir, "routed.json")
	if err := os.WriteFile(routed, []byte(fmt.Sprintf(`{"mcpServers": {"interlock": {"command": %q, "args": ["serve", "--stdio"]}}}`, binary)), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name string
		args []string
		code int
		want string
	}{
		{"a file routed through interlock", []string{"--from", routed, "--out", filepath.Join(dir, "c.yaml")}, 1, "already routes through interlock"},
		{"an existing --out", []string{"--from", client, "--out", exists}, 1, "exists.yaml exists: give another --out, or --force"},
		{"no servers", []string{"--from", empty, "--out", filepath.Join(dir, "b.yaml")}, 1, "has no servers"},
		{"--out is --from", []string{"--from", client, "--out", client, "--force"}, 1, "is the client's own file"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			code, _, errText := runCLI(t, append([]string{"init"}, tt.args...)...)
			if code != tt.code || !strings.Contains(errText, tt.want) {
				t.Errorf("exit %d %q, want %d and %q", code, errText, tt.code, tt.want)
			}
		})
	}
	if data, _ := os.ReadFile(exists); string(data) != "# mine\n" {
		t.Errorf("an existing --out was overwritten: %q", data)
	}
	if code, _, errText := runCLI(t, "init", "--from", client, "--out", exists, "--force"); code != 0 {
		t.Errorf("--force: exit %d %q", code, errText)
	}
}

// TestInitFindsTheClientFile runs init without --from in a home and a
// project of the test's own: it reads the one client file it finds where
// the clients keep theirs, and asks for --from when it finds none or
// several.
func TestInitFindsTheClientFile(t *testing.T) {
	home, project := t.TempDir(), t.TempDir()
	desktop := filepath.Join(home, ".config", "Claude")
	if err := os.MkdirAll(desktop, 0o700); err != nil {
		t.Fatal(err)
	}
	run := func(args ...string) (int, string) {
		cmd := command("", append([]string{"init"}, args...)...)
		cmd.Dir = project
		cmd.Env = append(cmd.Env, "HOME="+home, "XDG_CONFIG_HOME=", "APPDATA=", "USERPROFILE=")
		var stderr strings.Builder
		cmd.Stderr = &stderr
		err := cmd.Run()
		if ee, ok := err.(*exec.ExitError); ok {
			return ee.ExitCode(), stderr.String()
		} else if err != nil {
			t.Fatal(err)
		}
		return 0, stderr.String()
	}
	t.Run("none", func(t *testing.T) {
		code, errText := run()
		if code != 2 || !strings.Contains(errText, "no MCP client's file found") || !strings.Contains(errText, "claude_desktop_config.json") {
			t.Errorf("exit %d %q", code, errText)
		}
	})
	found := clientFile(t, desktop, "claude_desktop_config.json", "mcpServers")
	t.Run("one", func(t *testing.T) {
		code, errText := run("--out", "interlock.yaml")
		if code != 0 || !strings.Contains(errText, "Reading "+found) {
			t.Fatalf("exit %d %q", code, errText)
		}
		if _, err := os.Stat(filepath.Join(project, "interlock.yaml")); err != nil {
			t.Error(err)
		}
	})
	clientFile(t, project, ".mcp.json", "mcpServers")
	t.Run("several", func(t *testing.T) {
		code, errText := run("--out", "other.yaml")
		if code != 2 || !strings.Contains(errText, "several MCP clients' files") || !strings.Contains(errText, ".mcp.json") || !strings.Contains(errText, found) {
			t.Errorf("exit %d %q", code, errText)
		}
	})
}

func TestInitKeepsAServerThatDoesNotStart(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "interlock.yaml")
	client := clientFile(t, dir, "claude_desktop_config.json", "mcpServers",
		`"files": {"command": "interlock-no-such-server", "args": ["-y", "@modelcontextprotocol/server-filesystem", "/tmp"], "env": {"HOME_DIR": "${HOME}"}}`)
	code, _, errText := runCLI(t, "init", "--from", client, "--out", out)
	if code != 0 || !strings.Contains(errText, `files: command "interlock-no-such-server" is not an executable`) {
		t.Fatalf("exit %d, stderr %q", code, errText)
	}
	rules, data := starterRules(t, out)
	for tool, r := range rules {
		if m := r["match"].(map[string]any); m["upstream"] == "files" {
			t.Errorf("a rule for %s of a server that did not start: %v", tool, r)
		}
	}
	if !strings.Contains(string(data), "  # Its tools were not listed (") {
		t.Errorf("no comment says the server's tools were not listed:\n%s", data)
	}
	// Its entry is as the client wrote it: ${HOME} is not expanded into
	// the file, and the npm scope is quoted.
	f, err := config.Parse(out, data, func(string) (string, bool) { return "x", true })
	if err != nil {
		t.Fatal(err)
	}
	if s := f.MCPServers["files"]; s == nil || !strings.Contains(string(data), `HOME_DIR: ${HOME}`) || !strings.Contains(string(data), `"@modelcontextprotocol/server-filesystem"`) {
		t.Errorf("the entry is not kept as written:\n%s", data)
	}

	// With no server listed, nothing is written.
	none := filepath.Join(dir, "none.json")
	if err := os.WriteFile(none, []byte(`{"mcpServers": {"files": {"command": "interlock-no-such-server"}}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	code, stdout, errText := runCLI(t, "init", "--from", none, "--out", filepath.Join(dir, "none.yaml"))
	if code != 1 || stdout != "" || !strings.Contains(errText, "nothing was written") {
		t.Errorf("exit %d, stdout %q, stderr %q", code, stdout, errText)
	}
	if _, err := os.Stat(filepath.Join(dir, "none.yaml")); err == nil {
		t.Error("a configuration was written though no server was listed")
	}
}

func TestInitReasonsAndPreviews(t *testing.T) {
	yes, no := true, false
	for _, tt := range []struct {
		name  string
		hints interlock.Hints
		a     *mcp.ToolAnnotations
		want  string
	}{
		{"no annotations", interlock.HintsOf(nil), nil, "no annotations: treated as destructive"},
		{"silent on destructive", interlock.HintsOf(&mcp.ToolAnnotations{IdempotentHint: true}), &mcp.ToolAnnotations{IdempotentHint: true},
			"its annotations do not say whether it is destructive: treated as destructive (idempotent, open-world)"},
		{"destructive", interlock.HintsOf(&mcp.ToolAnnotations{DestructiveHint: &yes, OpenWorldHint: &no}), &mcp.ToolAnnotations{DestructiveHint: &yes, OpenWorldHint: &no},
			"destructive per its annotations (closed-world)"},
		{"a write", interlock.HintsOf(&mcp.ToolAnnotations{DestructiveHint: &no}), &mcp.ToolAnnotations{DestructiveHint: &no},
			"writes, not destructive per its annotations (open-world)"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := reason(policy.OfferedTool{Name: "x", Hints: tt.hints}, &mcp.Tool{Name: "x", Annotations: tt.a}); got != tt.want {
				t.Errorf("%q, want %q", got, tt.want)
			}
		})
	}

	readOnly := interlock.Hints{ReadOnly: true}
	own := []policy.OfferedTool{
		{Name: "get_file_info", Hints: readOnly, Arguments: []string{"path"}},
		{Name: "list_directory", Hints: readOnly, Arguments: []string{"path"}},
		{Name: "read_file", Hints: readOnly, Arguments: []string{"head", "path"}},
		{Name: "get_user", Hints: readOnly, Arguments: []string{"id"}},
		{Name: "get_order", Hints: readOnly, Arguments: []string{"id"}},
		{Name: "list_issue_types", Hints: readOnly, Arguments: []string{"owner"}},
		{Name: "list_label_names", Hints: readOnly, Arguments: []string{"owner", "repo"}},
	}
	for _, tt := range []struct {
		tool     string
		args     []string
		required []string
		want     string
	}{
		{"delete_file", []string{"path"}, []string{"path"}, "get_file_info"},                     // a shared word wins
		{"edit_file", []string{"content", "path"}, []string{"content", "path"}, "get_file_info"}, // fewer arguments, but named alike
		{"write_file", []string{"content", "path"}, []string{"content", "path"}, ""},             // it may make the file the preview would read
		{"create_directory", []string{"path"}, []string{"path"}, ""},
		{"delete_file", []string{"path"}, nil, ""}, // path may be absent
		{"move_directory", []string{"path"}, []string{"path"}, "list_directory"},
		{"cancel_item", []string{"id"}, []string{"id"}, ""}, // two read-only tools take id, neither named alike
		// Sharing owner and a word is not reading the same issue: the
		// issue_number that names it is not taken.
		{"update_issue", []string{"issue_number", "owner", "repo", "title"}, []string{"issue_number", "owner", "repo"}, ""},
		{"delete_label", []string{"name", "owner", "repo"}, []string{"name", "owner", "repo"}, ""},
	} {
		t.Run(tt.tool, func(t *testing.T) {
			listed := map[string]*mcp.Tool{tt.tool: {Name: tt.tool, InputSchema: map[string]any{"type": "object", "required": tt.required}}}
			if got := previewFor(policy.OfferedTool{Name: tt.tool, Arguments: tt.args}, own, listed); got != tt.want {
				t.Errorf("preview %q, want %q", got, tt.want)
			}
		})
	}
}

// TestInitFromAnHTTPServer: a server reached over HTTP whose tools say
// little: a tool without annotations and one silent on whether it is
// destructive are held by a token, and writes that say they are not
// destructive share one flag rule.
func TestInitFromAnHTTPServer(t *testing.T) {
	s := mcp.NewServer(&mcp.Implementation{Name: "notes", Version: "1"}, nil)
	no := false
	object := func(props ...string) map[string]any {
		p := map[string]any{}
		for _, name := range props {
			p[name] = map[string]any{"type": "string"}
		}
		return map[string]any{"type": "object", "properties": p, "required": props}
	}
	for _, tool := range []*mcp.Tool{
		{Name: "list_notes", InputSchema: object(), Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true}},
		{Name: "wipe_cache", InputSchema: object()},
		{Name: "archive_note", InputSchema: object("id"), Annotations: &mcp.ToolAnnotations{IdempotentHint: true}},
		{Name: "rename_item", InputSchema: object("id", "title"), Annotations: &mcp.ToolAnnotations{DestructiveHint: &no}},
		{Name: "tag_item", InputSchema: object("id", "tag"), Annotations: &mcp.ToolAnnotations{DestructiveHint: &no}},
	} {
		s.AddTool(tool, func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return &mcp.CallToolResult{}, nil
		})
	}
	srv := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s }, nil))
	defer srv.Close()

	dir := t.TempDir()
	client := filepath.Join(dir, "mcp.json")
	if err := os.WriteFile(client, []byte(fmt.Sprintf(`{"servers": {"notes": {"type": "http", "url": %q}}}`, srv.URL)), 0o600); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "interlock.yaml")
	if code, _, errText := runCLI(t, "init", "--from", client, "--out", out); code != 0 {
		t.Fatalf("init: exit %d\n%s", code, errText)
	}
	if code, stdout, errText := runCLI(t, "check", "--config", out, "--connect"); code != 0 {
		t.Fatalf("check --connect of the written file: exit %d\n%s%s", code, stdout, errText)
	}
	rules, data := starterRules(t, out)
	for _, tt := range []struct{ tool, mode, why string }{
		{"wipe_cache", "token", "# wipe_cache: no annotations: treated as destructive.\n"},
		{"archive_note", "token", "# archive_note: its annotations do not say whether it is destructive: treated as destructive (idempotent, open-world).\n"},
		{"rename_item", "flag", "# rename_item: writes, not destructive per its annotations (open-world).\n"},
		{"tag_item", "flag", "# tag_item: writes, not destructive per its annotations (open-world).\n"},
	} {
		r := rules[tt.tool]
		if r == nil || r["mode"] != tt.mode || !strings.Contains(string(data), tt.why) {
			t.Errorf("%s: rule %v, want mode %s and the comment %q", tt.tool, r, tt.mode, tt.why)
		}
	}
	if rules["rename_item"]["name"] != "notes-writes" || rules["tag_item"]["name"] != "notes-writes" {
		t.Errorf("the writes are not one rule:\n%s", data)
	}
	if rules["wipe_cache"]["summary"] != "Call wipe_cache." {
		t.Errorf("wipe_cache's summary: %v", rules["wipe_cache"]["summary"])
	}
	if !strings.Contains(string(data), "    type: http\n    url: "+srv.URL+"\n") {
		t.Errorf("the server's entry:\n%s", data)
	}
}

// TestInitSummariesShowStructuresAsJSON: a drafted summary renders an
// array or object argument with json, so summaries, forms and the console
// show JSON rather than Go's map[k:v].
func TestInitSummariesShowStructuresAsJSON(t *testing.T) {
	listed := &mcp.Tool{Name: "delete_entities", InputSchema: map[string]any{
		"type": "object",
		"properties": map[string]any{
			"deletions": map[string]any{"type": "array"},
			"reason":    map[string]any{"type": "string"},
			"filter":    map[string]any{"type": []any{"object", "null"}},
		},
		"required": []any{"deletions", "reason"},
	}}
	got := summaryFor(policy.OfferedTool{Name: "delete_entities", Arguments: []string{"deletions", "filter", "reason"}}, listed)
	want := `Call delete_entities (deletions: {{json (index .args "deletions")}}, reason: {{.args.reason}}` +
		`{{with index .args "filter"}}, filter: {{json .}}{{end}}).`
	if got != want {
		t.Errorf("summary:\n%s\nwant:\n%s", got, want)
	}
}
