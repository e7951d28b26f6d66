package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/interlock-mcp/interlock"
	"github.com/interlock-mcp/interlock/gateway"
)

// lockedBuffer collects a process's output while tests read it.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// serveLogged starts `interlock serve` on a free loopback port with its
// log kept, and returns the base URL from its banner, the log and the
// process.
func serveLogged(t *testing.T, env []string, args ...string) (string, *lockedBuffer, *exec.Cmd) {
	t.Helper()
	cmd := command("", append([]string{"serve", "--listen", "127.0.0.1:0"}, args...)...)
	cmd.Env = append(cmd.Env, env...)
	logs := &lockedBuffer{}
	cmd.Stderr = logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			t.Error("interlock serve did not stop on SIGTERM")
		}
	})
	re := regexp.MustCompile(`serving\s+(http://\S+)/mcp`)
	var base string
	waitFor(t, "the banner", func() bool {
		if m := re.FindStringSubmatch(logs.String()); m != nil {
			base = m[1]
		}
		return base != ""
	})
	return base, logs, cmd
}

// waitFor polls cond until it holds, or fails the test after 20 seconds.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(25 * time.Millisecond)
	}
}

// reminderConfig is a configuration of the demo in which send_reminder has
// mode reminders and refunds need a token; broken adds a field no rule
// has, on line 10.
func reminderConfig(t *testing.T, dir, reminders string, broken bool) []byte {
	t.Helper()
	extra := ""
	if broken {
		extra = "    mood: calm\n"
	}
	return fmt.Appendf(nil, `upstreams:
  - name: demo
    command: [%q, demo, --db, %q]
rules:
  - name: refunds
    match: {tools: [refund_invoice]}
    mode: token
  - name: reminders
    match: {tools: [send_reminder]}
%s    mode: %s
`, binary, filepath.Join(dir, "demo.db"), extra, reminders)
}

// TestReloadOnSIGHUP: the real binary takes a new policy on SIGHUP, keeps
// the running one when the file is empty or has a mistake (and logs where
// it is), and keeps its sessions and the confirm tokens it handed out.
func TestReloadOnSIGHUP(t *testing.T) {
	dir := t.TempDir()
	config := filepath.Join(dir, "interlock.yaml")
	if err := os.WriteFile(config, reminderConfig(t, dir, "deny", false), 0o600); err != nil {
		t.Fatal(err)
	}
	first, err := os.ReadFile(config)
	if err != nil {
		t.Fatal(err)
	}
	firstSum := sha256.Sum256(first)
	data := filepath.Join(dir, "data")
	base, logs, cmd := serveLogged(t, []string{"MCP_DRY_RUN=false", "INTERLOCK_SECRET=" + strings.Repeat("h", 40)},
		"--config", config, "--data", data)
	changed := make(chan struct{}, 8)
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "reload"}, &mcp.ClientOptions{
		ToolListChangedHandler: func(context.Context, *mcp.ToolListChangedRequest) { changed <- struct{}{} },
	}).Connect(context.Background(), &mcp.StreamableClientTransport{Endpoint: base + "/mcp"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	remind := map[string]any{"customer_id": "acct_9931", interlock.MetaConfirm: true}
	refund := map[string]any{"invoice_id": "inv_1003", "amount": 1}
	if c := code(t, callTool(t, cs, "send_reminder", remind)); c != interlock.CodeToolNotAllowed {
		t.Fatalf("send_reminder at start: %s", c)
	}
	token, _ := structured(t, callTool(t, cs, "refund_invoice", refund))["confirm_token"].(string)
	if token == "" {
		t.Fatal("refund_invoice handed out no confirm token")
	}

	steps := []struct {
		name     string
		file     []byte
		logged   string
		reminder interlock.Code // "" means it ran
	}{
		// An editor that truncates the file before it writes it.
		{"an emptied file keeps the running policy", nil, config + ":1: the file is empty", interlock.CodeToolNotAllowed},
		{"a broken file keeps the running policy", reminderConfig(t, dir, "flag", true), config + ":10: ", interlock.CodeToolNotAllowed},
		{"a sound file takes effect", reminderConfig(t, dir, "flag", false), "configuration reloaded", ""},
	}
	for _, st := range steps {
		t.Run(st.name, func(t *testing.T) {
			if err := os.WriteFile(config, st.file, 0o600); err != nil {
				t.Fatal(err)
			}
			if err := cmd.Process.Signal(syscall.SIGHUP); err != nil {
				t.Fatal(err)
			}
			waitFor(t, fmt.Sprintf("%q in the log", st.logged), func() bool { return strings.Contains(logs.String(), st.logged) })
			res := callTool(t, cs, "send_reminder", remind)
			if st.reminder == "" && res.IsError || st.reminder != "" && code(t, res) != st.reminder {
				t.Errorf("send_reminder: %+v, want %q", res.StructuredContent, st.reminder)
			}
		})
	}
	// The session lived through both; its client heard that send_reminder
	// now takes __confirm, and the token from before the reloads is good.
	select {
	case <-changed:
	case <-time.After(20 * time.Second):
		t.Error("no notifications/tools/list_changed after the reload")
	}
	if res := callTool(t, cs, "refund_invoice", map[string]any{"invoice_id": "inv_1003", "amount": 1, interlock.MetaConfirmToken: token}); res.IsError {
		t.Errorf("redeeming a token from before the reloads: %+v", res.StructuredContent)
	}
	rc, out, errOut := runCLI(t, "audit", "export", "--data", data)
	if rc != 0 || !strings.Contains(out, `"config_rejected"`) || !strings.Contains(out, `"config_reloaded"`) {
		t.Errorf("audit export (exit %d) lacks the reload events:\n%s%s", rc, out, errOut)
	}
	// The start is on record with the configuration it began with.
	want := config + " sha256:" + hex.EncodeToString(firstSum[:]) + " version " + version
	if !strings.Contains(out, `"gateway_started"`) || !strings.Contains(out, want) {
		t.Errorf("audit export lacks the start, on %q:\n%s", want, out)
	}
}

// TestWatchPicksUpARenamedFile: --watch reloads a file that an editor
// replaced by renaming a new one over it.
func TestWatchPicksUpARenamedFile(t *testing.T) {
	dir := t.TempDir()
	config := filepath.Join(dir, "interlock.yaml")
	if err := os.WriteFile(config, reminderConfig(t, dir, "deny", false), 0o600); err != nil {
		t.Fatal(err)
	}
	base, _, _ := serveLogged(t, []string{"MCP_DRY_RUN=false"}, "--config", config, "--data", filepath.Join(dir, "data"), "--watch")
	const remind = `{"arguments":{"customer_id":"acct_9931","__confirm":true}}`
	if status, body := restPost(t, base+"/v1/tools/send_reminder/call", "", remind); body["code"] != string(interlock.CodeToolNotAllowed) {
		t.Fatalf("send_reminder at start: %d %v", status, body)
	}
	next := filepath.Join(dir, ".interlock.yaml.swp")
	if err := os.WriteFile(next, reminderConfig(t, dir, "flag", false), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(next, config); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "send_reminder to run under the new file", func() bool {
		status, _ := restPost(t, base+"/v1/tools/send_reminder/call", "", remind)
		return status == http.StatusOK
	})
}

// TestWatchNeedsAFile: --watch without --config is a usage error.
func TestWatchNeedsAFile(t *testing.T) {
	rc, _, stderr := runCLI(t, "serve", "--watch", "--data", t.TempDir())
	if rc != 2 || !strings.Contains(stderr, "--watch needs --config") {
		t.Errorf("exit %d, stderr %q", rc, stderr)
	}
}

// TestReloadAddsWebhooks: a webhook added by a reload is told of the next
// pending approval.
func TestReloadAddsWebhooks(t *testing.T) {
	hook, got := webhookReceiver(t)
	dir := t.TempDir()
	config := filepath.Join(dir, "interlock.yaml")
	approval := reminderConfig(t, dir, "approval\n    approvers: [operator]", false)
	if err := os.WriteFile(config, approval, 0o600); err != nil {
		t.Fatal(err)
	}
	base, logs, cmd := serveLogged(t, []string{"MCP_DRY_RUN=false"}, "--config", config, "--data", filepath.Join(dir, "data"))
	if err := os.WriteFile(config, fmt.Appendf(approval, "notify:\n  - url: %s/hook\n", hook.URL), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the reload", func() bool { return strings.Contains(logs.String(), "configuration reloaded") })
	status, body := restPost(t, base+"/v1/tools/send_reminder/call", "", `{"arguments":{"customer_id":"acct_9931"}}`)
	if status != http.StatusAccepted {
		t.Fatalf("send_reminder: %d %v", status, body)
	}
	select {
	case m := <-got:
		if m["approval_id"] != body["approval_id"] {
			t.Errorf("notification %v for %v", m, body)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the webhook added by the reload heard nothing")
	}
}

// webhookReceiver is a webhook that passes on each JSON body it receives.
func webhookReceiver(t *testing.T) (*httptest.Server, <-chan map[string]any) {
	t.Helper()
	got := make(chan map[string]any, 4)
	hook := httptest.NewServer(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) {
		var m map[string]any
		json.NewDecoder(r.Body).Decode(&m)
		got <- m
	}))
	t.Cleanup(hook.Close)
	return hook, got
}

// TestWatchPicksUpAChangedShadowPolicy: with --watch, a change of the
// shadow policy's file alone is reloaded, as a change of the configuration
// is: the new shadow's differences are audited.
func TestWatchPicksUpAChangedShadowPolicy(t *testing.T) {
	dir := t.TempDir()
	config := filepath.Join(dir, "interlock.yaml")
	shadow := filepath.Join(dir, "candidate.yaml")
	if err := os.WriteFile(shadow, []byte("default_mode: flag\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(config, append([]byte("shadow: candidate.yaml\n"), reminderConfig(t, dir, "flag", false)...), 0o600); err != nil {
		t.Fatal(err)
	}
	data := filepath.Join(dir, "data")
	base, logs, _ := serveLogged(t, []string{"MCP_DRY_RUN=false"}, "--config", config, "--data", data, "--watch")
	next := filepath.Join(dir, ".candidate.yaml.swp")
	if err := os.WriteFile(next, []byte("rules:\n  - name: no-reminders\n    match: {tools: [send_reminder]}\n    mode: deny\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(next, shadow); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the changed shadow policy to be reloaded", func() bool { return strings.Contains(logs.String(), "configuration reloaded") })
	const remind = `{"arguments":{"customer_id":"acct_9931","__confirm":true}}`
	if status, body := restPost(t, base+"/v1/tools/send_reminder/call", "", remind); status != http.StatusOK {
		t.Fatalf("send_reminder under the live policy: %d %v", status, body)
	}
	waitFor(t, "the new shadow's difference in the audit log", func() bool {
		_, out, _ := runCLI(t, "audit", "export", "--data", data)
		return strings.Contains(out, `"shadow_rule":"no-reminders"`)
	})
}

// TestReloadEndsARemovedApprover: after a reload that removes bob's key,
// the command line refuses bob at once, and so does the console session
// he made with it.
func TestReloadEndsARemovedApprover(t *testing.T) {
	dir := t.TempDir()
	config := filepath.Join(dir, "interlock.yaml")
	keys := fmt.Sprintf("auth:\n  keys:\n    - {sha256: %s, principal: agent}\n", gateway.HashKey("agent-key"))
	bob := fmt.Sprintf("    - {sha256: %s, principal: bob}\n", gateway.HashKey("bob-key"))
	rules := reminderConfig(t, dir, "approval\n    approvers: [bob]", false)
	if err := os.WriteFile(config, append([]byte(keys+bob), rules...), 0o600); err != nil {
		t.Fatal(err)
	}
	base, logs, cmd := serveLogged(t, []string{"MCP_DRY_RUN=false"}, "--config", config, "--data", filepath.Join(dir, "data"))
	status, body := restPost(t, base+"/v1/tools/send_reminder/call", "agent-key", `{"arguments":{"customer_id":"acct_9931"}}`)
	id, _ := body["approval_id"].(string)
	if status != http.StatusAccepted || id == "" {
		t.Fatalf("send_reminder: %d %v", status, body)
	}
	cli := func(args ...string) (int, string, string) {
		t.Helper()
		t.Setenv("INTERLOCK_KEY", "bob-key")
		return runCLI(t, append([]string{"approvals"}, append(args, "--url", base)...)...)
	}
	if code, out, errText := cli("list"); code != 0 || !strings.Contains(out, id) {
		t.Fatalf("bob's list before the reload: %d %q %q", code, out, errText)
	}
	if err := os.WriteFile(config, append([]byte(keys), rules...), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the reload", func() bool { return strings.Contains(logs.String(), "configuration reloaded") })
	for _, args := range [][]string{{"list"}, {"approve", id}} {
		if code, out, errText := cli(args...); code != 1 || !strings.Contains(errText, "does not take the key in INTERLOCK_KEY (401 Unauthorized)") {
			t.Errorf("%v after the reload: %d %q %q", args, code, out, errText)
		}
	}
	if status, _ := restPost(t, base+"/v1/tools/send_reminder/call", "agent-key", `{"arguments":{"customer_id":"acct_9931"}}`); status != http.StatusAccepted {
		t.Errorf("the call after bob was removed: %d, want it still waiting", status)
	}
}
