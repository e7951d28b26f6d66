package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/interlock-mcp/interlock"
)

// binary is the interlock command built once for these tests.
var binary string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "interlock-bin")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binary = filepath.Join(dir, "interlock")
	build := exec.Command("go", "build", "-o", binary, ".")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "building interlock:", err)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// command prepares the binary with MCP_DRY_RUN set as given ("" unsets it).
func command(dryRun string, args ...string) *exec.Cmd {
	cmd := exec.Command(binary, args...)
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "MCP_DRY_RUN=") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	if dryRun != "" {
		cmd.Env = append(cmd.Env, "MCP_DRY_RUN="+dryRun)
	}
	return cmd
}

// connectClient connects a go-sdk client named name over tr; closing the
// session is the caller's.
func connectClient(t *testing.T, name string, tr mcp.Transport) *mcp.ClientSession {
	t.Helper()
	cs, err := mcp.NewClient(&mcp.Implementation{Name: name}, nil).Connect(context.Background(), tr, nil)
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

func connectStdio(t *testing.T, dryRun string) *mcp.ClientSession {
	t.Helper()
	cmd := command(dryRun, "serve", "--stdio", "--data", t.TempDir())
	cs := connectClient(t, "it", &mcp.CommandTransport{Command: cmd})
	t.Cleanup(func() { cs.Close() })
	return cs
}

// servedHTTP starts `interlock serve` on a free loopback port and returns
// the MCP URL from its banner.
func servedHTTP(t *testing.T, extra ...string) string {
	t.Helper()
	return servedHTTPWith(t, nil, extra...)
}

// servedHTTPWith is servedHTTP with extra environment variables.
func servedHTTPWith(t *testing.T, env []string, extra ...string) string {
	t.Helper()
	cmd := command("", append([]string{"serve", "--listen", "127.0.0.1:0", "--data", t.TempDir()}, extra...)...)
	cmd.Env = append(cmd.Env, env...)
	url, exited := launch(t, cmd)
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case err := <-exited:
			if err != nil {
				t.Errorf("interlock serve did not exit cleanly on SIGTERM: %v", err)
			}
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			t.Error("interlock serve did not stop on SIGTERM")
		}
	})
	return url
}

// launch starts cmd, an `interlock serve` on HTTP, and returns the MCP URL
// from its banner and a channel that receives its exit.
func launch(t *testing.T, cmd *exec.Cmd) (string, <-chan error) {
	t.Helper()
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	urlc := make(chan string, 1)
	go func() {
		re := regexp.MustCompile(`serving\s+(http://\S+/mcp)`)
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			if m := re.FindStringSubmatch(sc.Text()); m != nil {
				urlc <- m[1]
			}
		}
	}()
	go func() { exited <- cmd.Wait() }()
	select {
	case url := <-urlc:
		return url, exited
	case err := <-exited:
		t.Fatalf("interlock serve exited early: %v", err)
	case <-time.After(30 * time.Second):
		_ = cmd.Process.Kill()
		t.Fatal("interlock serve did not print where it listens")
	}
	return "", exited
}

func callTool(t *testing.T, cs *mcp.ClientSession, name string, args map[string]any) *mcp.CallToolResult {
	t.Helper()
	res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: name, Arguments: args})
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return res
}

func structured(t *testing.T, res *mcp.CallToolResult) map[string]any {
	t.Helper()
	b, _ := json.Marshal(res.StructuredContent)
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatalf("structuredContent %s: %v", b, err)
	}
	return m
}

func code(t *testing.T, res *mcp.CallToolResult) interlock.Code {
	t.Helper()
	if !res.IsError {
		return ""
	}
	return interlock.Code(structured(t, res)["code"].(string))
}

func TestDemoToolsThroughStdio(t *testing.T) {
	cs := connectStdio(t, "")
	res, err := cs.ListTools(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	type hints struct{ readOnly, destructive, idempotent, openWorld bool }
	want := map[string]hints{
		"list_customers":    {readOnly: true},
		"get_customer":      {readOnly: true},
		"list_invoices":     {readOnly: true},
		"get_service":       {readOnly: true},
		"preview_reminder":  {readOnly: true},
		"quote_plan_change": {readOnly: true},
		"quote_refund":      {readOnly: true},
		"send_reminder":     {openWorld: true},
		"delete_customer":   {destructive: true},
		"upgrade_plan":      {destructive: true},
		"downgrade_plan":    {destructive: true},
		"promote_release":   {destructive: true, openWorld: true},
		"refund_invoice":    {destructive: true, openWorld: true},
	}
	if len(res.Tools) != len(want) {
		t.Fatalf("got %d tools, want %d", len(res.Tools), len(want))
	}
	for _, tool := range res.Tools {
		w, ok := want[tool.Name]
		if !ok {
			t.Errorf("unexpected tool %s", tool.Name)
			continue
		}
		a := tool.Annotations
		got := hints{a.ReadOnlyHint, *a.DestructiveHint, a.IdempotentHint, *a.OpenWorldHint}
		if got != w {
			t.Errorf("%s: hints %+v, want %+v", tool.Name, got, w)
		}
	}

	c := structured(t, callTool(t, cs, "get_customer", map[string]any{"id": "acct_9931"}))
	if c["name"] != "Northwind Traders" || c["plan"] != "pro" || c["invoice_count"] != 3.0 {
		t.Errorf("get_customer = %v", c)
	}
	if got := code(t, callTool(t, cs, "get_customer", map[string]any{"id": "acct_0000"})); got != interlock.CodeNotFound {
		t.Errorf("unknown customer: %s", got)
	}
	if got := code(t, callTool(t, cs, "delete_customer", map[string]any{"id": "acct_9931", "__confirm": true})); got != interlock.CodeDryRunPreview {
		t.Errorf("delete_customer under dry run: %s", got)
	}
	if got := code(t, callTool(t, cs, "refund_invoice", map[string]any{"invoice_id": "inv_1005", "amount": 2000})); got != interlock.CodeDryRunPreview {
		t.Errorf("large refund under dry run: %s", got)
	}
}

// TestSendReminderTwoKeys drives the flag contract end to end: the real
// binary, its demo child, and the go-sdk client.
func TestSendReminderTwoKeys(t *testing.T) {
	tests := []struct {
		dryRun  string
		confirm bool
		runs    bool
	}{
		{"", false, false},
		{"", true, false},
		{"false", false, false},
		{"false", true, true},
		{"0", true, false},
		{"no", true, false},
		{"FALSE", true, false},
		{"fasle", true, false},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("MCP_DRY_RUN=%q/confirm=%v", tt.dryRun, tt.confirm), func(t *testing.T) {
			cs := connectStdio(t, tt.dryRun)
			args := map[string]any{"customer_id": "acct_9931"}
			if tt.confirm {
				args["__confirm"] = true
			}
			res := callTool(t, cs, "send_reminder", args)
			if tt.runs {
				if res.IsError || structured(t, res)["customer_id"] != "acct_9931" {
					t.Fatalf("want the reminder sent, got %+v", res)
				}
				return
			}
			body := structured(t, res)
			// While dry run is on the hint names both keys; with it off, only
			// the agent's.
			hint, _ := body["recovery_hint"].(string)
			if body["code"] != string(interlock.CodeDryRunPreview) || strings.HasPrefix(hint, interlock.FlagHint) != (tt.dryRun != "false") ||
				!strings.Contains(hint, "__confirm") {
				t.Fatalf("body = %v", body)
			}
			if preview, _ := body["preview"].(map[string]any); preview["customer_id"] != "acct_9931" || preview["__confirm"] != nil {
				t.Errorf("preview = %v", body["preview"])
			}
			if !strings.Contains(body["summary"].(string), "acct_9931") {
				t.Errorf("summary = %v", body["summary"])
			}
		})
	}
}

func TestServeHTTP(t *testing.T) {
	for _, mode := range []string{"sessions", "stateless"} {
		t.Run(mode, func(t *testing.T) {
			var extra []string
			if mode == "stateless" {
				extra = append(extra, "--stateless")
			}
			url := servedHTTP(t, extra...)
			cs := connectClient(t, "it", &mcp.StreamableClientTransport{Endpoint: url})
			defer cs.Close()
			if res := callTool(t, cs, "list_customers", map[string]any{}); res.IsError {
				t.Errorf("list_customers: %+v", res)
			}
			if got := code(t, callTool(t, cs, "send_reminder", map[string]any{"customer_id": "acct_9931", "__confirm": true})); got != interlock.CodeDryRunPreview {
				t.Errorf("send_reminder: %s", got)
			}
			if got := code(t, callTool(t, cs, "get_customer", map[string]any{"id": 5})); got != interlock.CodeValidationFailed {
				t.Errorf("bad id type: %s", got)
			}
		})
	}
}

func TestCommandLineErrors(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	bad := write("bad.yaml", "rules:\n  - name: a\n    mdoe: flag\n  - name: b\n    mode: deny\n    when: 'args.x >'\n")
	ghost := write("ghost.yaml", "upstreams:\n  - name: ghost\n    command: [/nonexistent/server]\n")
	empty, blank, comments := write("empty.yaml", ""), write("blank.yaml", "\n  \n"), write("comments.yaml", "# rules to come\n")
	tests := []struct {
		name     string
		args     []string
		wantCode int
		stdout   string
		stderr   []string
	}{
		{"check the built-in config", []string{"check"}, 0, "built-in config: ok", nil},
		{"check a bad file", []string{"check", "--config", bad}, 1, "", []string{bad + `:3: unknown field "mdoe"`}},
		{"check a missing file", []string{"check", "--config", filepath.Join(dir, "nope.yaml")}, 1, "", []string{"nope.yaml"}},
		{"check the built-in config connected", []string{"check", "--connect"}, 0, "built-in config: ok (1 upstreams, 6 rules, 0 API keys; connected: 13 tools)", nil},
		{"check an empty file", []string{"check", "--config", empty}, 1, "", []string{empty + ":1: the file is empty: a configuration needs at least the upstreams"}},
		{"check a file of whitespace", []string{"check", "--config", blank}, 1, "", []string{blank + ":1: the file is empty:"}},
		{"check a file of comments", []string{"check", "--config", comments}, 1, "", []string{comments + ":1: the file holds only comments:"}},
		{"serve refuses an empty file", []string{"serve", "--stdio", "--config", empty, "--data", dir}, 1, "", []string{empty + ":1: the file is empty:"}},
		{"check refuses a command that is not here", []string{"check", "--config", ghost}, 1, "", []string{ghost + `:3: upstream "ghost": command "/nonexistent/server" is not an executable on this machine's PATH`}},
		{"non-loopback without keys", []string{"serve", "--listen", "0.0.0.0:0", "--data", dir}, 1, "", []string{"auth.keys", "interlock key"}},
		// The gateway serves without it (here until stdin ends) and says why.
		{"an upstream that does not start", []string{"serve", "--stdio", "--config", ghost, "--data", dir}, 0, "", []string{"upstream unreachable at start", "upstream=ghost", ghost + ":2"}},
		{"unknown command", []string{"launch"}, 2, "", []string{`unknown command "launch"`}},
		{"unknown flag", []string{"serve", "--port", "1"}, 2, "", []string{"flag provided but not defined: -port"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, stdout, stderr := runCLI(t, tt.args...)
			if code != tt.wantCode {
				t.Fatalf("exit %d, want %d; stderr:\n%s", code, tt.wantCode, stderr)
			}
			if !strings.Contains(stdout, tt.stdout) {
				t.Errorf("stdout %q does not contain %q", stdout, tt.stdout)
			}
			for _, w := range tt.stderr {
				if !strings.Contains(stderr, w) {
					t.Errorf("stderr does not contain %q:\n%s", w, stderr)
				}
			}
		})
	}
	if _, _, stderr := runCLI(t, "check", "--config", bad); strings.Contains(stderr, "goroutine") || strings.Contains(stderr, "panic") {
		t.Errorf("stack trace on bad input:\n%s", stderr)
	}
}

func TestKeyOutputIsAValidConfig(t *testing.T) {
	code, stdout, _ := runCLI(t, "key", "--principal", "ci", "--tenant", "acme")
	if code != 0 {
		t.Fatalf("exit %d", code)
	}
	p := filepath.Join(t.TempDir(), "keys.yaml")
	if err := os.WriteFile(p, []byte(stdout), 0o600); err != nil {
		t.Fatal(err)
	}
	code, out, stderr := runCLI(t, "check", "--config", p)
	if code != 0 || !strings.Contains(out, "1 API keys") {
		t.Errorf("check: exit %d, %s %s", code, out, stderr)
	}
}

// TestTypeScriptClient runs the interop suite (interop/, the official
// TypeScript SDK client) against this binary.
func TestTypeScriptClient(t *testing.T) {
	runNodeSuite(t, "interop", filepath.Join("@modelcontextprotocol", "sdk"))
}

// runNodeSuite runs the node test suite in dir (relative to the
// repository) against this binary; module is a package its npm ci
// installs, checked first so a missing install says what to run.
func runNodeSuite(t *testing.T, dir, module string, env ...string) {
	t.Helper()
	abs, err := filepath.Abs(filepath.Join("..", "..", dir))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(abs, "node_modules", module)); err != nil {
		t.Fatalf("%s is not installed: run `npm ci --prefix %s` first (%v)", module, dir, err)
	}
	// The reference servers' test waits out their 5 s timers a few times
	// for each client and transport.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "node", "--test", "--test-concurrency=1")
	cmd.Dir = abs
	cmd.Env = append(append(os.Environ(), "INTERLOCK_BIN="+binary), env...)
	out, err := cmd.CombinedOutput()
	// The failing tests come first: a log that keeps only a run's head
	// and tail still says what failed and why.
	if err != nil {
		t.Fatalf("%s suite failed: %v\nfailing:\n%s\nwhole output:\n%s", dir, err, tapFailures(string(out)), out)
	}
	if !strings.Contains(string(out), "# fail 0") {
		t.Fatalf("%s suite did not report zero failures:\nfailing:\n%s\nwhole output:\n%s", dir, tapFailures(string(out)), out)
	}
	// A run that passed nothing, or skipped or cancelled some of its
	// tests, proves less than its name: every test must run, and pass.
	summary := tapSummary(string(out))
	if summary["pass"] <= 0 || summary["skipped"] != 0 || summary["todo"] != 0 || summary["cancelled"] != 0 {
		t.Fatalf("%s suite: %v, want tests passed and none skipped, todo or cancelled\nwhole output:\n%s", dir, summary, out)
	}
}

// tapSummary reads the counts node's test runner ends its TAP output with
// ("# pass 12", "# skipped 0"); a count it does not print reads -1.
func tapSummary(out string) map[string]int {
	summary := map[string]int{"pass": -1, "skipped": -1, "todo": -1, "cancelled": -1}
	for line := range strings.Lines(out) {
		var name string
		var n int
		if _, err := fmt.Sscanf(line, "# %s %d", &name, &n); err == nil {
			if _, ok := summary[name]; ok {
				summary[name] = n
			}
		}
	}
	return summary
}

// tapFailures picks out of a node test run's TAP output each "not ok"
// line with its details (the error, the expected and actual values),
// without the stack traces.
func tapFailures(out string) string {
	var b strings.Builder
	lines := strings.Split(out, "\n")
	for i := 0; i < len(lines); i++ {
		trimmed := strings.TrimLeft(lines[i], " ")
		if !strings.HasPrefix(trimmed, "not ok ") {
			continue
		}
		indent := len(lines[i]) - len(trimmed)
		b.WriteString(lines[i] + "\n")
		skipUnder := -1 // the indent of a stack block being skipped
		kept := 0
		for i+1 < len(lines) {
			next := lines[i+1]
			rest := strings.TrimLeft(next, " ")
			depth := len(next) - len(rest)
			if rest != "" && depth <= indent {
				break
			}
			i++
			if rest == "..." && depth == indent+2 {
				break
			}
			if skipUnder >= 0 && (rest == "" || depth > skipUnder) {
				continue
			}
			skipUnder = -1
			if strings.HasPrefix(rest, "stack:") {
				skipUnder = depth
				continue
			}
			if kept < 60 {
				b.WriteString(next + "\n")
			}
			kept++
		}
	}
	if b.Len() == 0 {
		return "(no \"not ok\" line)\n"
	}
	return b.String()
}

// TestReadyzThroughServe: the built-in gateway is ready once its demo
// upstream is connected and its audit log answers.
func TestReadyzThroughServe(t *testing.T) {
	endpoint := servedHTTPWith(t, nil)
	resp, err := http.Get(strings.TrimSuffix(endpoint, "/mcp") + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK || strings.TrimSpace(string(b)) != `{"status":"ready"}` {
		t.Errorf("/readyz: %d %s", resp.StatusCode, b)
	}
}

// TestTapFailures: what a failed node suite reports first is each failing
// test and its assertion, not the stack, nor the tests that passed.
func TestTapFailures(t *testing.T) {
	out, err := os.ReadFile(filepath.Join("testdata", "failing.tap"))
	if err != nil {
		t.Fatal(err)
	}
	got := tapFailures(string(out))
	for _, want := range []string{"not ok 2 - fails", "a: works directly, fails through", "0: 'a: works directly, fails through'", "not ok 1 - outer", "1 subtest failed"} {
		if !strings.Contains(got, want) {
			t.Errorf("missing %q in:\n%s", want, got)
		}
	}
	for _, not := range []string{"ok 1 - passes", "Test.runInAsyncScope", "# pass 1"} {
		if strings.Contains(got, not) {
			t.Errorf("%q should be left out:\n%s", not, got)
		}
	}
	if got := tapFailures("TAP version 13\nok 1 - fine\n# fail 0\n"); !strings.Contains(got, "no \"not ok\" line") {
		t.Errorf("a run with no failure: %q", got)
	}
}

// TestTapSummary: the counts a node suite ends with are read, so a run
// that passed nothing or skipped a test is told from one that passed.
func TestTapSummary(t *testing.T) {
	out := "ok 1 - a\nok 2 - b # SKIP\n1..2\n# tests 2\n# suites 0\n# pass 1\n# fail 0\n# cancelled 0\n# skipped 1\n# todo 0\n# duration_ms 123.8\n"
	want := map[string]int{"pass": 1, "skipped": 1, "todo": 0, "cancelled": 0}
	if got := tapSummary(out); !maps.Equal(got, want) {
		t.Errorf("tapSummary = %v, want %v", got, want)
	}
	if got := tapSummary("# fail 0\n"); got["pass"] != -1 || got["skipped"] != -1 {
		t.Errorf("a summary without counts reads %v", got)
	}
}
