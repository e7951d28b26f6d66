package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/interlock-mcp/interlock"
	"github.com/interlock-mcp/interlock/gateway"
)

// TestApprovalOverStdio: a gateway on stdio and one on HTTP share a store:
// the data directory, with no store configured, or Redis or PostgreSQL,
// each gateway then on a data directory of its own. A call over stdio
// that needs approval waits; once the HTTP gateway runs, its answer names
// that gateway's console, which it announced in the store; an approver
// approves over REST there, and the stdio client's re-call runs exactly
// once. interlock check tells first that no console runs, then names it.
func TestApprovalOverStdio(t *testing.T) {
	tests := []struct {
		name, on string
		// store is the configuration's store section; own says whether
		// each gateway has a data directory of its own.
		store func(t *testing.T) string
		own   bool
	}{
		{"data directory", "this data directory", func(*testing.T) string { return "" }, false},
		{"redis", "this store", func(*testing.T) string { return redisStore("stdio-approval") }, true},
		{"postgres", "this store", pgStore, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			data := t.TempDir()
			config := reminderApprovalConfig(t, data, tt.store(t))
			stdioData, httpData := data, data
			if tt.own {
				stdioData, httpData = t.TempDir(), t.TempDir()
			}
			var banner lockedBuffer
			remind := stdioReminders(t, config, stdioData, &banner)

			first := remind()
			if first.Code != interlock.CodeApprovalPending || first.ApprovalURL != "" || !strings.Contains(first.RecoveryHint, "no console is running") {
				t.Fatalf("before any console runs: %+v", first)
			}
			if !strings.Contains(banner.String(), "no console is running on "+tt.on) {
				t.Errorf("the stdio banner does not warn that approvals cannot be decided:\n%s", banner.String())
			}

			// interlock check says the same before the console runs, and
			// names the console once it does.
			if code, _, errText := runCLI(t, "check", "--config", config, "--data", stdioData); code != 0 ||
				!strings.Contains(errText, "warning: rule reminders-need-approval asks for approval, and no console is running on "+tt.on) {
				t.Errorf("check before a console runs: exit %d\n%s", code, errText)
			}

			base, _, _ := serveLogged(t, []string{"MCP_DRY_RUN=false"}, "--config", config, "--data", httpData)
			if code, _, errText := runCLI(t, "check", "--config", config, "--data", stdioData); code != 0 ||
				!strings.Contains(errText, "the console at "+base+" decides them") {
				t.Errorf("check with the console at %s running: exit %d\n%s", base, code, errText)
			}
			waiting := remind()
			if waiting.Code != interlock.CodeApprovalPending || waiting.ApprovalID != first.ApprovalID ||
				waiting.ApprovalURL != base+"/console/approvals/"+first.ApprovalID {
				t.Fatalf("with the HTTP gateway's console running: %+v (console at %s)", waiting, base)
			}
			if status, body := restPost(t, base+"/v1/approvals/"+first.ApprovalID+"/approve", "bob-key", `{"reason":"ok"}`); status != http.StatusOK {
				t.Fatalf("bob approves on the HTTP gateway: %d %v", status, body)
			}
			if ran := remind(); ran.Code != "" {
				t.Fatalf("the stdio client's re-call: %+v", ran)
			}
			if again := remind(); again.Code != interlock.CodeApprovalPending || again.ApprovalID == first.ApprovalID {
				t.Errorf("a second re-call ran again, or did not ask anew: %+v", again)
			}
		})
	}
}

// reminderApprovalConfig writes into dir a configuration of the demo, its
// database there, in which send_reminder waits for bob's approval
// (bob-key), with the store section given, and returns its path.
func reminderApprovalConfig(t *testing.T, dir, store string) string {
	t.Helper()
	return writeFile(t, dir, "interlock.yaml", fmt.Sprintf(`upstreams:
  - name: demo
    command: [%q, demo, --db, %q]
auth:
  keys:
    - {sha256: %s, principal: bob, tenant: local}
rules:
  - name: reminders-need-approval
    match: {tools: [send_reminder]}
    mode: approval
    approvers: [bob]
%s`, binary, filepath.Join(dir, "demo.db"), gateway.HashKey("bob-key"), store))
}

// stdioReminders starts `interlock serve --stdio` on config and data, as
// an editor does, its standard error into banner, and returns a call of
// send_reminder through it.
func stdioReminders(t *testing.T, config, data string, banner io.Writer) func() interlock.Body {
	t.Helper()
	cmd := command("false", "serve", "--stdio", "--config", config, "--data", data)
	cmd.Stderr = banner
	cs := connectClient(t, "editor", &mcp.CommandTransport{Command: cmd})
	t.Cleanup(func() { cs.Close() })
	return func() interlock.Body {
		t.Helper()
		res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "send_reminder", Arguments: map[string]any{"customer_id": "acct_9931"}})
		if err != nil {
			t.Fatal(err)
		}
		return interlock.BodyOfResult(res)
	}
}

// TestStdioNamesOnlyALiveConsole: a gateway on stdio names the console
// the HTTP gateway on its data directory announced while it answers
// there. Once that gateway is killed (SIGKILL: its announcement stays in
// the store), calls name no console and say that none runs, also after
// another server took its port and answers 200 to everything.
func TestStdioNamesOnlyALiveConsole(t *testing.T) {
	data := t.TempDir()
	config := reminderApprovalConfig(t, data, "")
	httpGateway := startCrashable(t, []string{"MCP_DRY_RUN=false"}, "--config", config, "--data", data)
	remind := stdioReminders(t, config, data, io.Discard)

	named := remind()
	if named.Code != interlock.CodeApprovalPending || named.ApprovalURL != httpGateway.base+"/console/approvals/"+named.ApprovalID {
		t.Fatalf("with the HTTP gateway's console running at %s: %+v", httpGateway.base, named)
	}
	noConsole := func(b interlock.Body) bool {
		return b.Code == interlock.CodeApprovalPending && b.ApprovalURL == "" && strings.Contains(b.RecoveryHint, "no console is running")
	}
	httpGateway.kill()
	waitFor(t, "calls to stop naming the killed gateway's console", func() bool {
		b := remind()
		if b.ApprovalURL != "" && b.ApprovalURL != named.ApprovalURL {
			t.Fatalf("after the kill: %+v", b)
		}
		return noConsole(b)
	})

	// Whatever binds the port next is not named either.
	ln, err := net.Listen("tcp", strings.TrimPrefix(httpGateway.base, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	var asked atomic.Int32
	squatter := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		asked.Add(1)
		_, _ = io.WriteString(w, "ok")
	})}
	go func() { _ = squatter.Serve(ln) }()
	t.Cleanup(func() { squatter.Close() })
	waitFor(t, "the server on the port to be asked", func() bool {
		if b := remind(); !noConsole(b) {
			t.Fatalf("with another server on the killed gateway's port: %+v", b)
		}
		return asked.Load() > 0
	})
	if b := remind(); !noConsole(b) {
		t.Errorf("after the server on the port was asked: %+v", b)
	}
}

// TestTokensOutliveTheProcess: with no store and no INTERLOCK_SECRET, a
// confirm token one gateway on stdio issued is redeemed by another on the
// same data directory after the first has stopped: the sealing key and
// the token's nonce both live in the data directory. It is redeemed once.
func TestTokensOutliveTheProcess(t *testing.T) {
	data := t.TempDir()
	connect := func() *mcp.ClientSession {
		t.Helper()
		cmd := command("false", "serve", "--stdio", "--data", data)
		cs := connectClient(t, "editor", &mcp.CommandTransport{Command: cmd})
		return cs
	}
	upgrade := func(cs *mcp.ClientSession, token string) interlock.Body {
		t.Helper()
		args := map[string]any{"customer_id": "acct_2048", "to": "pro"}
		if token != "" {
			args["__confirm_token"] = token
		}
		res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "upgrade_plan", Arguments: args})
		if err != nil {
			t.Fatal(err)
		}
		return interlock.BodyOfResult(res)
	}
	first := connect()
	asked := upgrade(first, "")
	if asked.Code != interlock.CodeConfirmationRequired || asked.ConfirmToken == "" {
		t.Fatalf("the first call: %+v", asked)
	}
	first.Close()
	second := connect()
	defer second.Close()
	if ran := upgrade(second, asked.ConfirmToken); ran.Code != "" {
		t.Fatalf("the token redeemed by the next gateway: %+v", ran)
	}
	if again := upgrade(second, asked.ConfirmToken); again.Code != interlock.CodeConsentTokenInvalid {
		t.Errorf("the token redeemed twice: %+v", again)
	}
}
