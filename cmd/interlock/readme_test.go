package main

import (
	"bufio"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/interlock-mcp/interlock"
)

// A fenced block of a Markdown file: its language, the attributes of its
// info string (```sh test=init), its text and the line it starts on.
type fenced struct {
	lang  string
	attrs map[string]string
	text  string
	line  int
}

// fencedBlocks reads the fenced blocks of a Markdown file.
func fencedBlocks(t *testing.T, path string) []fenced {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var blocks []fenced
	var cur *fenced
	for i, line := range strings.Split(string(raw), "\n") {
		switch {
		case cur == nil && strings.HasPrefix(line, "```"):
			fields := strings.Fields(strings.TrimPrefix(line, "```"))
			b := fenced{attrs: map[string]string{}, line: i + 1}
			if len(fields) > 0 {
				b.lang = fields[0]
				for _, f := range fields[1:] {
					k, v, _ := strings.Cut(f, "=")
					b.attrs[k] = v
				}
			}
			cur = &b
		case cur != nil && strings.HasPrefix(line, "```"):
			blocks = append(blocks, *cur)
			cur = nil
		case cur != nil:
			cur.text += line + "\n"
		}
	}
	if cur != nil {
		t.Fatalf("%s:%d: a fenced block is not closed", path, cur.line)
	}
	return blocks
}

// repoRoot is the module's root, two directories above this package.
func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	return root
}

// readmeSandbox is a new user's machine for the README's commands: a home
// directory with interlock where go install puts it, and npx standing in
// for the real one with the server-filesystem and the MCP Inspector's
// command line pinned in interop/ (the tests never use the network).
type readmeSandbox struct {
	t    *testing.T
	root string // the repository
	home string
	env  []string
	// outputs of the blocks run so far, by their test name, with the home
	// directory written as /home/you as the README writes it
	outputs map[string]string
}

func newReadmeSandbox(t *testing.T) *readmeSandbox {
	t.Helper()
	root := repoRoot(t)
	serverJS := filepath.Join(root, "interop", "node_modules", "@modelcontextprotocol", "server-filesystem", "dist", "index.js")
	if _, err := os.Stat(serverJS); err != nil {
		t.Fatalf("server-filesystem is not installed (npm ci --prefix interop, as make test does): %v", err)
	}
	// The Inspector's --cli is its package inspector-cli, byte for byte:
	// only that is pinned, at the version the README names.
	inspectorJS := filepath.Join(root, "interop", "node_modules", "@modelcontextprotocol", "inspector-cli", "build", "cli.js")
	var inspector struct{ Version string }
	if raw, err := os.ReadFile(filepath.Join(filepath.Dir(filepath.Dir(inspectorJS)), "package.json")); err != nil || json.Unmarshal(raw, &inspector) != nil || inspector.Version != readmeInspector {
		t.Fatalf("the MCP Inspector's command line %s is not installed in interop/node_modules (npm ci --prefix interop, as make test does): %v %q", readmeInspector, err, inspector.Version)
	}
	if _, err := exec.LookPath("node"); err != nil {
		t.Fatalf("node is needed to run server-filesystem: %v", err)
	}
	home := t.TempDir()
	bin := filepath.Join(home, "go", "bin")
	stubs := filepath.Join(t.TempDir(), "stubs")
	for _, dir := range []string{bin, stubs} {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	copyFile(t, binary, filepath.Join(bin, "interlock"))
	npx := fmt.Sprintf(`#!/bin/sh
# npx for the README's test: only the packages pinned in interop/node_modules, no network.
[ "$1" = "-y" ] && shift
case "$1" in
@modelcontextprotocol/server-filesystem) shift; exec node %q "$@" ;;
@modelcontextprotocol/inspector@%s) shift; exec node %q "$@" ;;
*) echo "npx (test stand-in): $1 is not pinned in interop/node_modules" >&2; exit 1 ;;
esac
`, serverJS, readmeInspector, inspectorJS)
	if err := os.WriteFile(filepath.Join(stubs, "npx"), []byte(npx), 0o755); err != nil {
		t.Fatal(err)
	}
	// Go's own caches stay where they are, so that go install and go build
	// reuse the modules this test was built with instead of downloading.
	goEnv := map[string]string{}
	for _, name := range []string{"GOPATH", "GOMODCACHE", "GOCACHE", "GOPROXY", "GOFLAGS"} {
		out, err := exec.Command("go", "env", name).Output()
		if err != nil {
			t.Fatal(err)
		}
		goEnv[name] = strings.TrimSpace(string(out))
	}
	var env []string
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		if name == "HOME" || name == "PATH" || name == "MCP_DRY_RUN" || strings.HasPrefix(name, "INTERLOCK_") || goEnv[name] != "" {
			continue
		}
		env = append(env, kv)
	}
	env = append(env, "HOME="+home, "PATH="+bin+string(os.PathListSeparator)+stubs+string(os.PathListSeparator)+os.Getenv("PATH"))
	for name, v := range goEnv {
		if v != "" {
			env = append(env, name+"="+v)
		}
	}
	return &readmeSandbox{root: root, home: home, env: env, outputs: map[string]string{}}
}

// readmeInspector is the version of the MCP Inspector the README runs:
// the last that runs on Node 20.
const readmeInspector = "0.15.0"

// varyingRE matches what differs from one run to the next in what the
// README's commands print: confirm tokens (as the README shortens them,
// with an ellipsis, too) and times.
var varyingRE = regexp.MustCompile(`ilt1_[A-Za-z0-9_-]+…?|\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z`)

// readmeVarying writes what varies from run to run as one placeholder.
func readmeVarying(s string) string { return varyingRE.ReplaceAllString(s, "…") }

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	if err := os.Link(from, to); err == nil {
		return
	}
	raw, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, raw, 0o755); err != nil {
		t.Fatal(err)
	}
}

// asWritten writes the sandbox's home directory as the README does.
func (s *readmeSandbox) asWritten(text string) string {
	return strings.ReplaceAll(text, s.home, "/home/you")
}

// sh runs a script with bash in dir, as the README's reader would in a
// shell, and fails the test unless it exits 0. It returns what the script
// printed on standard output and standard error together.
func (s *readmeSandbox) sh(t *testing.T, dir, script string, extraEnv ...string) string {
	t.Helper()
	out, err := s.try(dir, script, extraEnv...)
	if err != nil {
		t.Fatalf("in %s:\n%s\nfailed: %v\n%s", dir, script, err, out)
	}
	return out
}

func (s *readmeSandbox) try(dir, script string, extraEnv ...string) (string, error) {
	out, err := s.run(dir, script, extraEnv...)
	return out.both.String(), err
}

// printed is what a script wrote on standard output, on standard error,
// and on both in the order it wrote them.
type printed struct{ stdout, stderr, both lockedBuffer }

type bothWriter struct {
	own  *lockedBuffer
	both *lockedBuffer
}

func (w bothWriter) Write(p []byte) (int, error) {
	w.both.Write(p)
	return w.own.Write(p)
}

// run runs a script with bash in dir, as the README's reader would.
func (s *readmeSandbox) run(dir, script string, extraEnv ...string) (*printed, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", "-e", "-o", "pipefail", "-c", script)
	cmd.Dir = dir
	cmd.Env = append(slices.Clone(s.env), extraEnv...)
	out := &printed{}
	cmd.Stdout = bothWriter{&out.stdout, &out.both}
	cmd.Stderr = bothWriter{&out.stderr, &out.both}
	return out, cmd.Run()
}

// start runs a command line that does not end (a gateway on HTTP) in its
// own process group, with --listen on a free port instead of the README's
// 8740 so that tests may run side by side, and returns the base URL its
// banner names. The process group is stopped when the test ends.
func (s *readmeSandbox) start(t *testing.T, dir, line string) (string, *lockedBuffer) {
	t.Helper()
	cmd := exec.Command("bash", "-c", "exec "+line+" --listen 127.0.0.1:0")
	cmd.Dir = dir
	cmd.Env = s.env
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	logs := &lockedBuffer{}
	cmd.Stdout, cmd.Stderr = logs, logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(15 * time.Second):
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			t.Errorf("%s did not stop on SIGTERM", line)
		}
	})
	re := regexp.MustCompile(`serving\s+(http://\S+)/mcp`)
	deadline := time.Now().Add(4 * time.Minute) // go run may compile first
	for {
		if m := re.FindStringSubmatch(logs.String()); m != nil {
			return m[1], logs
		}
		select {
		case err := <-exited:
			t.Fatalf("%s exited before serving: %v\n%s", line, err, logs.String())
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s did not print where it serves:\n%s", line, logs.String())
		}
	}
}

// commandLines are the lines of a shell block that are commands, without
// their trailing comments.
func commandLines(text string) []string {
	var lines []string
	for _, line := range strings.Split(text, "\n") {
		if i := strings.Index(line, "  #"); i >= 0 {
			line = line[:i]
		}
		if line = strings.TrimSpace(line); line != "" && !strings.HasPrefix(line, "#") {
			lines = append(lines, line)
		}
	}
	return lines
}

// clientSession starts what the client's file says (the command, its
// arguments and env, as Claude Code would) with MCP_DRY_RUN as given, and
// connects to it over stdio.
func (s *readmeSandbox) clientSession(t *testing.T, clientFile, dryRun string) *mcp.ClientSession {
	t.Helper()
	raw, err := os.ReadFile(clientFile)
	if err != nil {
		t.Fatal(err)
	}
	var file struct {
		MCPServers map[string]struct {
			Command string            `json:"command"`
			Args    []string          `json:"args"`
			Env     map[string]string `json:"env"`
		} `json:"mcpServers"`
	}
	if err := json.Unmarshal(raw, &file); err != nil {
		t.Fatal(err)
	}
	server, ok := file.MCPServers["interlock"]
	if !ok || len(file.MCPServers) != 1 {
		t.Fatalf("the client's file does not run interlock alone:\n%s", raw)
	}
	cmd := exec.Command(server.Command, server.Args...)
	cmd.Dir = s.home
	cmd.Env = slices.Clone(s.env)
	for k, v := range server.Env {
		if k == "MCP_DRY_RUN" {
			v = dryRun
		}
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	cmd.Stderr = io.Discard
	cs := connectClient(t, "claude-code", &mcp.CommandTransport{Command: cmd})
	t.Cleanup(func() { cs.Close() })
	return cs
}

func callBody(t *testing.T, cs *mcp.ClientSession, tool string, args map[string]any) (interlock.Body, *mcp.CallToolResult) {
	t.Helper()
	res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: tool, Arguments: args})
	if err != nil {
		t.Fatalf("%s: %v", tool, err)
	}
	if !res.IsError {
		return interlock.Body{}, res
	}
	return interlock.BodyOfResult(res), res
}

// TestReadme runs the README's shell blocks (```sh test=NAME) in order, on a
// new user's machine (a scratch home directory), and checks what each does:
// the install and build lines, the two set-up commands, and the five
// minutes in front of server-filesystem, where a client started from the
// file init wrote has its move_file held in dry run, confirmed with a
// token, and then approved in the console of a gateway beside it. A block
// of output (```text output=NAME) must appear in what block NAME printed; a
// JSON or YAML block the test names is compared with the file it shows.
func TestReadme(t *testing.T) {
	s := newReadmeSandbox(t)
	blocks := fencedBlocks(t, filepath.Join(s.root, "README.md"))
	byTest := map[string]fenced{}
	for _, b := range blocks {
		if b.lang == "sh" && b.attrs["test"] == "" {
			t.Errorf("README.md:%d: a sh block without test=NAME: mark what it runs, or make it ```text", b.line)
		}
		if name := b.attrs["test"]; name != "" {
			if _, dup := byTest[name]; dup {
				t.Errorf("README.md:%d: test=%s twice", b.line, name)
			}
			byTest[name] = b
		}
	}
	block := func(name string) fenced {
		t.Helper()
		b, ok := byTest[name]
		if !ok {
			t.Fatalf("README.md has no block test=%s", name)
		}
		delete(byTest, name)
		return b
	}
	// runBlock runs block NAME in dir, expects the exit status its exit=N
	// says (0 unless it says), and holds what it printed to each of its
	// output blocks (```text output=NAME, stream=stderr for standard error
	// alone), which must say the same but for the home directory (written
	// /home/you), confirm tokens and times.
	ran := map[string]string{}
	runBlock := func(t *testing.T, name, dir string, extraEnv ...string) *printed {
		t.Helper()
		b := block(name)
		ran[name] = b.text
		out, err := s.run(dir, b.text, extraEnv...)
		code := 0
		if exit, ok := err.(*exec.ExitError); ok {
			code = exit.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		if want := cmp.Or(b.attrs["exit"], "0"); fmt.Sprint(code) != want {
			t.Fatalf("README.md:%d: exit %d, want %s:\n%s", b.line, code, want, s.asWritten(out.both.String()))
		}
		shown := 0
		for _, o := range blocks {
			if o.attrs["output"] != name {
				continue
			}
			shown++
			got := out.both.String()
			if o.attrs["stream"] == "stderr" {
				got = out.stderr.String()
			}
			if got = s.asWritten(got); readmeVarying(got) != readmeVarying(o.text) {
				t.Errorf("README.md:%d: not what %s printed, which is:\n%s", o.line, name, got)
			}
		}
		return out
	}

	t.Run("install", func(t *testing.T) {
		b := block("install")
		lines := commandLines(b.text)
		if !slices.Equal(lines, []string{"git clone https://github.com/interlock-mcp/interlock", "cd interlock", "go install ./cmd/interlock", "interlock version"}) {
			t.Fatalf("README.md:%d: the install lines changed: %q", b.line, lines)
		}
		if err := exec.Command("git", "-C", s.root, "rev-parse", "HEAD").Run(); err != nil {
			t.Skipf("the source is not a git checkout to clone: %v", err)
		}
		// The clone comes from this repository (its last commit) instead of
		// GitHub, and installs into a GOBIN of its own on the PATH.
		gobin := t.TempDir()
		script := strings.Replace(b.text, "https://github.com/interlock-mcp/interlock", s.root+" interlock", 1)
		out := s.sh(t, t.TempDir(), script, "GOBIN="+gobin, "PATH="+gobin+string(os.PathListSeparator)+os.Getenv("PATH"))
		if !strings.Contains(out, "interlock ") {
			t.Errorf("the install from a clone: %q", out)
		}
	})

	t.Run("setup", func(t *testing.T) {
		b, tests := block("setup"), block("make-test")
		if got := commandLines(b.text); !slices.Equal(got, []string{"go run ./cmd/interlock serve"}) {
			t.Fatalf("README.md:%d: the user's set-up command changed: %q", b.line, got)
		}
		if got := commandLines(tests.text); !slices.Equal(got, []string{"make test"}) {
			t.Fatalf("README.md:%d: the contributor's command changed: %q", tests.line, got)
		}
		// The first, in a clone, on a data directory of its own: the demo,
		// its console link, and a destructive call held in dry run.
		base, banner := s.start(t, s.root, "go run ./cmd/interlock serve --data "+t.TempDir())
		for _, want := range []string{"console   " + base + "/console/login?once=", "upstream  demo: 13 tools", "dry run   ON"} {
			if !strings.Contains(banner.String(), want) {
				t.Errorf("the demo's banner lacks %q:\n%s", want, banner.String())
			}
		}
		cs := connectClient(t, "newcomer", &mcp.StreamableClientTransport{Endpoint: base + "/mcp"})
		defer cs.Close()
		if body, _ := callBody(t, cs, "send_reminder", map[string]any{"customer_id": "acct_9931", "__confirm": true}); body.Code != interlock.CodeDryRunPreview {
			t.Errorf("send_reminder on the demo: %+v", body)
		}
		// The second runs every test: what it would run is checked, not run.
		plan := s.sh(t, s.root, "make -n test")
		for _, want := range []string{"bash scripts/services", "npm ci --prefix interop", "go vet ./...", "go test -count=1 -timeout 25m ./..."} {
			if !strings.Contains(plan, want) {
				t.Errorf("make test no longer runs %q:\n%s", want, plan)
			}
		}
	})

	t.Run("inspector", func(t *testing.T) {
		// The demo's upgrade_plan held, then confirmed with its token, by
		// the Inspector's command line, in a directory of its own.
		dir := t.TempDir()
		held := runBlock(t, "inspector", dir)
		var result struct {
			StructuredContent interlock.Body
		}
		if err := json.Unmarshal([]byte(held.stdout.String()), &result); err != nil || result.StructuredContent.Code != interlock.CodeConfirmationRequired {
			t.Fatalf("the held call: %v\n%s", err, held.both.String())
		}
		token := "TOKEN=" + result.StructuredContent.ConfirmToken
		confirmed := runBlock(t, "inspector-confirm", dir, token)
		if !strings.Contains(confirmed.stdout.String(), `"to_plan": "scale"`) {
			t.Fatalf("the confirmed call:\n%s", confirmed.both.String())
		}
		// As the README says, the token is spent.
		again := s.sh(t, dir, ran["inspector-confirm"], token)
		if !strings.Contains(again, string(interlock.CodeConsentTokenInvalid)) {
			t.Errorf("the same token again:\n%s", again)
		}
	})

	// The five minutes, in the home directory.
	t.Run("client-config", func(t *testing.T) {
		s.sh(t, s.home, block("client-config").text)
		if _, err := os.Stat(filepath.Join(s.home, "projects", "notes.txt")); err != nil {
			t.Fatal(err)
		}
	})
	clientFile := filepath.Join(s.home, ".mcp.json")
	original, _ := os.ReadFile(clientFile)

	t.Run("init", func(t *testing.T) {
		runBlock(t, "init", s.home)
		if kept, _ := os.ReadFile(clientFile + ".bak"); string(kept) != string(original) {
			t.Errorf("the backup is not the original file:\n%s", kept)
		}
		written, err := os.ReadFile(filepath.Join(s.home, "interlock.yaml"))
		if err != nil {
			t.Fatal(err)
		}
		for _, b := range blocks {
			if b.attrs["excerpt"] == "interlock.yaml" && !strings.Contains(string(written), b.text) {
				t.Errorf("README.md:%d: not what init wrote:\n%s\ninterlock.yaml:\n%s", b.line, b.text, written)
			}
		}
		var want, got any
		snippet := block("snippet")
		if err := json.Unmarshal([]byte(snippet.text), &want); err != nil {
			t.Fatalf("README.md:%d: %v", snippet.line, err)
		}
		rewritten, _ := os.ReadFile(clientFile)
		if err := json.Unmarshal([]byte(s.asWritten(string(rewritten))), &got); err != nil {
			t.Fatal(err)
		}
		if fmt.Sprint(want) != fmt.Sprint(got) {
			t.Errorf("README.md:%d: the client's file init wrote is\n%s", snippet.line, s.asWritten(string(rewritten)))
		}
	})

	t.Run("check", func(t *testing.T) {
		runBlock(t, "check", s.home)
	})

	notes := filepath.Join(s.home, "projects", "notes.txt")
	moved := filepath.Join(s.home, "projects", "notes-2026.txt")
	move := func(from, to string) map[string]any { return map[string]any{"source": from, "destination": to} }

	t.Run("inspector-client", func(t *testing.T) {
		// The Inspector runs the client's file as it is: dry run on.
		runBlock(t, "inspector-client", s.home)
		if _, err := os.Stat(moved); err == nil {
			t.Fatal("the file moved in dry run")
		}
	})

	t.Run("held-then-confirmed", func(t *testing.T) {
		// As the client starts it: dry run on.
		cs := s.clientSession(t, clientFile, "true")
		if body, res := callBody(t, cs, "read_text_file", map[string]any{"path": notes}); body.Code != "" || !strings.Contains(fmt.Sprint(res.Content[0]), "first draft") {
			t.Errorf("reading through interlock: %+v %v", body, res.Content)
		}
		if body, _ := callBody(t, cs, "move_file", move(notes, moved)); body.Code != interlock.CodeDryRunPreview {
			t.Fatalf("move_file in dry run: %+v", body)
		}
		cs.Close()
		// With "MCP_DRY_RUN": "false" in the client's env: a token, then the move.
		cs = s.clientSession(t, clientFile, "false")
		asked, _ := callBody(t, cs, "move_file", move(notes, moved))
		if asked.Code != interlock.CodeConfirmationRequired || asked.ConfirmToken == "" || !strings.Contains(asked.Summary, "move_file") {
			t.Fatalf("move_file with dry run off: %+v", asked)
		}
		if _, err := os.Stat(moved); err == nil {
			t.Fatal("the file moved before the user confirmed")
		}
		args := move(notes, moved)
		args["__confirm_token"] = asked.ConfirmToken
		if body, _ := callBody(t, cs, "move_file", args); body.Code != "" {
			t.Fatalf("move_file with its token: %+v", body)
		}
		if _, err := os.Stat(moved); err != nil {
			t.Fatalf("the confirmed move did not happen: %v", err)
		}
	})

	t.Run("audit", func(t *testing.T) {
		out := s.sh(t, s.home, block("audit").text)
		for _, want := range []string{"move_file", "confirmed", "token", "ok: "} {
			if !strings.Contains(out, want) {
				t.Errorf("the audit commands do not show %q:\n%s", want, out)
			}
		}
	})

	t.Run("approval", func(t *testing.T) {
		rule := block("approval-rule")
		config := filepath.Join(s.home, "interlock.yaml")
		written, _ := os.ReadFile(config)
		// The reader's edit: the move-file rule, replaced by the README's.
		re := regexp.MustCompile(`(?m)^  - name: move-file\n(    .*\n)*`)
		if !re.Match(written) {
			t.Fatalf("interlock.yaml has no move-file rule to change:\n%s", written)
		}
		edited := re.ReplaceAllLiteralString(string(written), rule.text)
		if err := os.WriteFile(config, []byte(edited), 0o600); err != nil {
			t.Fatal(err)
		}
		s.sh(t, s.home, "interlock check --config interlock.yaml")

		// The client restarted on the new rule, before any console runs.
		cs := s.clientSession(t, clientFile, "false")
		back := move(moved, notes)
		first, _ := callBody(t, cs, "move_file", back)
		if first.Code != interlock.CodeApprovalPending || first.ApprovalURL != "" || !strings.Contains(first.RecoveryHint, "no console is running") {
			t.Fatalf("move_file with no console running: %+v", first)
		}

		lines := commandLines(block("console").text)
		if len(lines) != 1 {
			t.Fatalf("the console block is not one command: %q", lines)
		}
		base, _ := s.start(t, s.home, lines[0])
		// The console announces itself in the data directory just after its
		// banner; the same call asks again until the answer names it.
		var pending interlock.Body
		waitFor(t, "the pending answer to name the console", func() bool {
			pending, _ = callBody(t, cs, "move_file", back)
			return pending.ApprovalURL != ""
		})
		if pending.Code != interlock.CodeApprovalPending || pending.ApprovalID != first.ApprovalID || pending.ApprovalURL != base+"/console/approvals/"+first.ApprovalID {
			t.Fatalf("move_file with the console at %s: %+v", base, pending)
		}

		linkScript := block("console-link").text
		var link string
		waitFor(t, "interlock console link to find the console", func() bool {
			out, err := s.try(s.home, linkScript)
			link = strings.TrimSpace(out)
			return err == nil
		})
		// It prints the link on standard output and what it does on standard error.
		link = regexp.MustCompile(`http://\S+`).FindString(link)
		if !strings.HasPrefix(link, base+"/console/login?once=") {
			t.Fatalf("console link printed no link to %s", base)
		}
		browser := newConsoleBrowser()
		if status, _ := consoleGet(t, browser, link); status != http.StatusSeeOther && status != http.StatusFound && status != http.StatusOK {
			t.Fatalf("the one-time link: %d", status)
		}
		_, page := consoleGet(t, browser, pending.ApprovalURL)
		m := regexp.MustCompile(`name="csrf" value="([^"]+)"`).FindStringSubmatch(page)
		if m == nil {
			t.Fatalf("the approval's page has no form:\n%s", page)
		}
		res, err := browser.PostForm(base+"/console/approvals/"+first.ApprovalID+"/decide",
			url.Values{"csrf": {m[1]}, "decision": {"approve"}, "reason": {"tidying up"}})
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if res.StatusCode >= 400 {
			t.Fatalf("approving in the console: %d", res.StatusCode)
		}

		if body, _ := callBody(t, cs, "move_file", back); body.Code != "" {
			t.Fatalf("the approved move: %+v", body)
		}
		if _, err := os.Stat(notes); err != nil {
			t.Fatalf("the approved move did not happen: %v", err)
		}
		export := s.sh(t, s.home, "interlock audit export --data .interlock")
		if !strings.Contains(export, `"approvers":["operator"]`) {
			t.Errorf("the audit does not name the operator as approver:\n%s", export)
		}
	})

	t.Run("vscode", func(t *testing.T) {
		// VS Code's file, JSONC, with a server that does not start.
		runBlock(t, "vscode-config", s.home)
		site := filepath.Join(s.home, "site")
		out := runBlock(t, "vscode-init", site)
		var file struct {
			Servers map[string]struct {
				Type string `json:"type"`
			} `json:"servers"`
		}
		if err := json.Unmarshal([]byte(out.stdout.String()), &file); err != nil || file.Servers["interlock"].Type != "stdio" || len(file.Servers) != 1 {
			t.Errorf("init from VS Code's file printed (%v):\n%s", err, out.stdout.String())
		}
		runBlock(t, "vscode-check", site)
	})

	for name, b := range byTest {
		t.Errorf("README.md:%d: block test=%s is not run by TestReadme", b.line, name)
	}
}

// TestDocsConfigsCheck: every YAML block of the pages in docs/ is a file
// interlock check accepts. A block that starts with a list item is a rule
// (or rules) and is checked under rules:; a block of cases is run by
// interlock test against the built-in configuration. Commands it names are
// stubbed on PATH and ${VARS} set, as on the machine the page describes.
func TestDocsConfigsCheck(t *testing.T) {
	root := repoRoot(t)
	pages, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	vars := regexp.MustCompile(`\$\{([A-Z_][A-Z0-9_]*)\}`)
	commands := regexp.MustCompile(`(?m)^\s*(?:-\s+)?command:\s*\[?\s*"?([^\s,"\]]+)`)
	checked := 0
	for _, page := range pages {
		// deployment.md shows fragments with keys elided (keys: [...]).
		if filepath.Base(page) == "deployment.md" {
			continue
		}
		for _, b := range fencedBlocks(t, page) {
			if b.lang != "yaml" || b.attrs["nocheck"] != "" {
				continue
			}
			where := fmt.Sprintf("%s:%d", filepath.Base(page), b.line)
			t.Run(where, func(t *testing.T) {
				dir := t.TempDir()
				stubs := filepath.Join(dir, "bin")
				if err := os.Mkdir(stubs, 0o755); err != nil {
					t.Fatal(err)
				}
				env := []string{"PATH=" + stubs + string(os.PathListSeparator) + os.Getenv("PATH")}
				for _, m := range vars.FindAllStringSubmatch(b.text, -1) {
					env = append(env, m[1]+"=placeholder-"+strings.ToLower(m[1]))
				}
				for _, m := range commands.FindAllStringSubmatch(b.text, -1) {
					if _, err := exec.LookPath(m[1]); err != nil && !strings.Contains(m[1], "/") {
						if err := os.WriteFile(filepath.Join(stubs, m[1]), []byte("#!/bin/sh\nexit 0\n"), 0o755); err != nil {
							t.Fatal(err)
						}
					}
				}
				if err := os.WriteFile(filepath.Join(dir, "candidate.yaml"), []byte("rules: []\n"), 0o600); err != nil {
					t.Fatal(err)
				}
				text := b.text
				args := []string{"check", "--config"}
				first := strings.TrimLeft(text, "\n")
				switch {
				case strings.HasPrefix(first, "cases:"):
					args = []string{"test"}
				case strings.HasPrefix(first, "  - "):
					text = "rules:\n" + text
				}
				file := filepath.Join(dir, "example.yaml")
				if err := os.WriteFile(file, []byte(text), 0o600); err != nil {
					t.Fatal(err)
				}
				cmd := command("", append(args, file)...)
				cmd.Env = append(cmd.Env, env...)
				out, err := cmd.CombinedOutput()
				if err != nil {
					t.Errorf("%s: interlock %s: %v\n%s\n%s", where, args[0], err, out, b.text)
				}
			})
			checked++
		}
	}
	if checked == 0 {
		t.Fatal("no YAML blocks found in docs/")
	}
}

// TestCLIDocListsEveryFlag: docs/cli.md names every command interlock help
// lists and, in that command's section, every flag its --help lists.
func TestCLIDocListsEveryFlag(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join(repoRoot(t), "docs", "cli.md"))
	if err != nil {
		t.Fatal(err)
	}
	doc := string(raw)
	section := func(heading string) string {
		i := strings.Index(doc, "\n## "+heading+"\n")
		if i < 0 {
			t.Fatalf("docs/cli.md has no section %q", heading)
		}
		rest := doc[i+1:]
		if j := strings.Index(rest[3:], "\n## "); j >= 0 {
			rest = rest[:j+3]
		}
		return rest
	}
	flagLine := regexp.MustCompile(`(?m)^  (--?[a-z][a-z-]*)`)
	for _, tc := range []struct {
		heading string
		args    []string
	}{
		{"serve", []string{"serve"}},
		{"demo", []string{"demo"}},
		{"check", []string{"check"}},
		{"init", []string{"init"}},
		{"test", []string{"test"}},
		{"replay", []string{"replay"}},
		{"key and secret", []string{"key"}},
		{"audit", []string{"audit", "verify"}},
		{"audit", []string{"audit", "tail"}},
		{"audit", []string{"audit", "export"}},
		{"approvals", []string{"approvals"}},
		{"status", []string{"status"}},
		{"console link", []string{"console", "link"}},
	} {
		code, out, _ := runCLI(t, append(tc.args, "--help")...)
		if code != 0 {
			t.Errorf("interlock %s --help exits %d", strings.Join(tc.args, " "), code)
		}
		text := section(tc.heading)
		for _, m := range flagLine.FindAllStringSubmatch(out, -1) {
			if !strings.Contains(text, "`"+m[1]) && !strings.Contains(text, "["+m[1]) {
				t.Errorf("docs/cli.md, %s: %s is not documented", tc.heading, m[1])
			}
		}
	}
	_, usage, _ := runCLI(t, "help")
	sc := bufio.NewScanner(strings.NewReader(usage))
	for sc.Scan() {
		if f := strings.Fields(sc.Text()); len(f) > 1 && f[0] == "interlock" && strings.HasPrefix(sc.Text(), "  ") && !strings.Contains(doc, "interlock "+f[1]) {
			t.Errorf("docs/cli.md does not name interlock %s", f[1])
		}
	}
}

// TestReleaseStampsTheVersion: make release builds every platform with the
// version from git describe stamped in, and a binary built with those
// flags says that version.
func TestReleaseStampsTheVersion(t *testing.T) {
	root := repoRoot(t)
	plan, err := exec.Command("make", "-C", root, "-n", "release", "VERSION=v0.0.0-stamped").CombinedOutput()
	if err != nil {
		t.Fatalf("make -n release: %v\n%s", err, plan)
	}
	// The loop runs in one shell: what it would build is read from its words.
	for _, want := range []string{"linux/amd64", "linux/arm64", "darwin/amd64", "darwin/arm64", "windows/amd64", "-X main.version=v0.0.0-stamped", "SHA256SUMS"} {
		if !strings.Contains(string(plan), want) {
			t.Errorf("make release does not %q:\n%s", want, plan)
		}
	}
	out := filepath.Join(t.TempDir(), "interlock")
	build := exec.Command("go", "build", "-ldflags", "-X main.version=v0.0.0-stamped", "-o", out, ".")
	if b, err := build.CombinedOutput(); err != nil {
		t.Fatalf("%v\n%s", err, b)
	}
	if got, err := exec.Command(out, "version").Output(); err != nil || string(got) != "interlock v0.0.0-stamped\n" {
		t.Errorf("interlock version: %q %v", got, err)
	}
}

// TestDocsLinks: every relative link of the README and the pages in docs/
// names a file that exists and, with #anchor, a heading of that file (as
// GitHub makes anchors of headings).
func TestDocsLinks(t *testing.T) {
	root := repoRoot(t)
	pages, _ := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	pages = append(pages, filepath.Join(root, "README.md"))
	link := regexp.MustCompile(`\]\(([^)\s]+)\)`)
	heading := regexp.MustCompile("(?m)^#{1,6} (.+)$")
	anchors := func(path string) map[string]bool {
		raw, err := os.ReadFile(path)
		if err != nil {
			return nil
		}
		// Headings inside fenced blocks are not headings.
		var prose strings.Builder
		fence := false
		for _, line := range strings.Split(string(raw), "\n") {
			if strings.HasPrefix(line, "```") {
				fence = !fence
			} else if !fence {
				prose.WriteString(line + "\n")
			}
		}
		set := map[string]bool{}
		for _, m := range heading.FindAllStringSubmatch(prose.String(), -1) {
			var slug strings.Builder
			for _, r := range strings.ToLower(m[1]) {
				switch {
				case r == ' ':
					slug.WriteRune('-')
				case r == '-' || r == '_' || r >= 'a' && r <= 'z' || r >= '0' && r <= '9':
					slug.WriteRune(r)
				}
			}
			set[slug.String()] = true
		}
		return set
	}
	for _, page := range pages {
		raw, err := os.ReadFile(page)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range link.FindAllStringSubmatch(string(raw), -1) {
			target := m[1]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			file, anchor, _ := strings.Cut(target, "#")
			path := page
			if file != "" {
				path = filepath.Join(filepath.Dir(page), file)
			}
			rel, _ := filepath.Rel(root, path)
			if _, err := os.Stat(path); err != nil {
				t.Errorf("%s: link to %s: no such file", filepath.Base(page), target)
				continue
			}
			if anchor != "" && !anchors(path)[anchor] {
				t.Errorf("%s: link to %s: %s has no heading #%s", filepath.Base(page), target, rel, anchor)
			}
		}
	}
}

// TestDocsExampleResults: the results the pages show (```json
// example=TOOL) are what the demo answers with dry run off, but for the
// values that change with every call (a token, an expiry).
func TestDocsExampleResults(t *testing.T) {
	calls := map[string]map[string]any{
		"send_reminder": {"customer_id": "acct_9931"},
		"upgrade_plan":  {"customer_id": "acct_9931", "to": "scale"},
	}
	root := repoRoot(t)
	cs := connectStdio(t, "false")
	seen := 0
	for _, page := range []string{"errors.md", "modes.md"} {
		for _, b := range fencedBlocks(t, filepath.Join(root, "docs", page)) {
			tool := b.attrs["example"]
			if b.lang != "json" || tool == "" {
				continue
			}
			seen++
			var want map[string]any
			if err := json.Unmarshal([]byte(b.text), &want); err != nil {
				t.Fatalf("%s:%d: %v", page, b.line, err)
			}
			got := structured(t, callTool(t, cs, tool, calls[tool]))
			for _, changes := range []string{"confirm_token", "expires_at"} {
				if _, ok := got[changes]; ok != (want[changes] != nil) {
					t.Errorf("%s:%d: %s present: %v, shown: %v", page, b.line, changes, ok, want[changes] != nil)
				}
				delete(got, changes)
				delete(want, changes)
			}
			if fmt.Sprint(got) != fmt.Sprint(want) {
				g, _ := json.MarshalIndent(got, "", "  ")
				t.Errorf("%s:%d: %s answers\n%s", page, b.line, tool, g)
			}
		}
	}
	if seen != len(calls) {
		t.Errorf("%d example results found, %d expected", seen, len(calls))
	}
}
