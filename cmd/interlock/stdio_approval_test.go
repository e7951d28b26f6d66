package main

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
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
			config := filepath.Join(data, "interlock.yaml")
			cfg := fmt.Sprintf(`upstreams:
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
%s`, binary, filepath.Join(data, "demo.db"), gateway.HashKey("bob-key"), tt.store(t))
			if err := os.WriteFile(config, []byte(cfg), 0o600); err != nil {
				t.Fatal(err)
			}
			stdioData, httpData := data, data
			if tt.own {
				stdioData, httpData = t.TempDir(), t.TempDir()
			}
			cmd := command("false", "serve", "--stdio", "--config", config, "--data", stdioData)
			var banner lockedBuffer
			cmd.Stderr = &banner
			cs, err := mcp.NewClient(&mcp.Implementation{Name: "editor"}, nil).Connect(context.Background(), &mcp.CommandTransport{Command: cmd}, nil)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { cs.Close() })
			remind := func() interlock.Body {
				t.Helper()
				res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "send_reminder", Arguments: map[string]any{"customer_id": "acct_9931"}})
				if err != nil {
					t.Fatal(err)
				}
				return interlock.BodyOfResult(res)
			}

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

// TestTokensOutliveTheProcess: with no store and no INTERLOCK_SECRET, a
// confirm token one gateway on stdio issued is redeemed by another on the
// same data directory after the first has stopped: the sealing key and
// the token's nonce both live in the data directory. It is redeemed once.
func TestTokensOutliveTheProcess(t *testing.T) {
	data := t.TempDir()
	connect := func() *mcp.ClientSession {
		t.Helper()
		cmd := command("false", "serve", "--stdio", "--data", data)
		cs, err := mcp.NewClient(&mcp.Implementation{Name: "editor"}, nil).Connect(context.Background(), &mcp.CommandTransport{Command: cmd}, nil)
		if err != nil {
			t.Fatal(err)
		}
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
