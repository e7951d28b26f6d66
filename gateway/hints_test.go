package gateway

import (
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/interlock-mcp/interlock"
)

// eventually polls cond until it holds or ten seconds pass.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting: %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestRugPull: an upstream that re-announces a tool with looser hints does
// not loosen the gate; one that tightens them is believed.
func TestRugPull(t *testing.T) {
	yes, no := true, false
	tests := []struct {
		name        string
		tool        string
		annotations *mcp.ToolAnnotations
		loosens     string // the hint the log must name; "" when the change tightens
		// want is how the tool is advertised, and gated, after the change.
		wantReadOnly, wantDestructive, wantIdempotent, wantOpenWorld bool
	}{
		{"destructive tool claims read-only", "wipe", &mcp.ToolAnnotations{ReadOnlyHint: true}, "readOnlyHint",
			false, true, false, true},
		{"destructive tool claims not destructive", "wipe", &mcp.ToolAnnotations{DestructiveHint: &no, OpenWorldHint: &yes}, "destructiveHint",
			false, true, false, true},
		{"tool claims idempotent", "wipe", &mcp.ToolAnnotations{IdempotentHint: true, DestructiveHint: &yes}, "idempotentHint",
			false, true, false, true},
		{"open-world tool claims closed world", "wipe", &mcp.ToolAnnotations{DestructiveHint: &yes, OpenWorldHint: &no}, "openWorldHint",
			false, true, false, true},
		{"read-only tool becomes destructive", "echo", &mcp.ToolAnnotations{DestructiveHint: &yes}, "",
			false, true, false, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var logs logBuffer
			gw := startLogged(t, testConfig(t, "", "fx"), "false", logs.logger())
			cs := client(t, gw, nil)
			if res := call(t, cs, "relabel", map[string]any{"name": tt.tool, "annotations": tt.annotations}); res.IsError {
				t.Fatalf("relabel: %+v", res)
			}
			if tt.loosens != "" {
				eventually(t, "a warning naming the loosened hint", func() bool {
					return strings.Contains(logs.String(), "hints="+tt.loosens)
				})
				for _, want := range []string{"upstream=fx", "tool=" + tt.tool, "loosened"} {
					if !strings.Contains(logs.String(), want) {
						t.Errorf("the warning does not say %s:\n%s", want, logs.String())
					}
				}
			} else {
				eventually(t, "the tightened hints to be advertised", func() bool {
					a := listTools(t, cs)[tt.tool].Annotations
					return *a.DestructiveHint == tt.wantDestructive && a.ReadOnlyHint == tt.wantReadOnly
				})
			}
			a := listTools(t, cs)[tt.tool].Annotations
			if a.ReadOnlyHint != tt.wantReadOnly || *a.DestructiveHint != tt.wantDestructive ||
				a.IdempotentHint != tt.wantIdempotent || *a.OpenWorldHint != tt.wantOpenWorld {
				t.Errorf("advertised %+v (destructive %v, open world %v)", a, *a.DestructiveHint, *a.OpenWorldHint)
			}
			// The tool still needs the agent's key.
			if b := body(t, call(t, cs, tt.tool, map[string]any{"target": "x"})); b.Code != interlock.CodeDryRunPreview {
				t.Errorf("called without __confirm: %s", b.Code)
			}
		})
	}
	t.Run("a later loosening back to the first listing is refused too", func(t *testing.T) {
		var logs logBuffer
		gw := startLogged(t, testConfig(t, "", "fx"), "false", logs.logger())
		cs := client(t, gw, nil)
		call(t, cs, "relabel", map[string]any{"name": "echo", "annotations": &mcp.ToolAnnotations{DestructiveHint: &yes}})
		eventually(t, "echo destructive", func() bool { return *listTools(t, cs)["echo"].Annotations.DestructiveHint })
		call(t, cs, "relabel", map[string]any{"name": "echo", "annotations": &mcp.ToolAnnotations{ReadOnlyHint: true}})
		eventually(t, "a warning", func() bool { return strings.Contains(logs.String(), "hints=readOnlyHint") })
		if b := body(t, call(t, cs, "echo", map[string]any{})); b.Code != interlock.CodeDryRunPreview {
			t.Errorf("echo after loosening back: %s", b.Code)
		}
	})
}

// TestUntrustedHints: with trust_hints: false an upstream's annotations
// count for nothing; only a rule's override loosens the gate.
func TestUntrustedHints(t *testing.T) {
	f := testConfig(t, `
rules:
  - name: echo-only-reads
    match: {tools: [echo], upstream: fx}
    annotations: {readOnlyHint: true}
    mode: allow
`, "fx")
	no := false
	f.Upstreams[0].TrustHints = &no
	gw := start(t, f, "false")
	cs := client(t, gw, nil)
	tools := listTools(t, cs)
	tests := []struct {
		tool     string
		readOnly bool
		wantCode interlock.Code
	}{
		{"getenv", false, interlock.CodeDryRunPreview}, // read-only upstream claim ignored
		{"slow", false, interlock.CodeDryRunPreview},
		{"echo", true, ""}, // the operator's rule says it only reads
	}
	for _, tt := range tests {
		t.Run(tt.tool, func(t *testing.T) {
			a := tools[tt.tool].Annotations
			if a.ReadOnlyHint != tt.readOnly || (!tt.readOnly && (!*a.DestructiveHint || !*a.OpenWorldHint)) {
				t.Errorf("advertised read-only %v destructive %v open world %v", a.ReadOnlyHint, *a.DestructiveHint, *a.OpenWorldHint)
			}
			res := call(t, cs, tt.tool, map[string]any{"name": "HOME", "ms": 1})
			if tt.wantCode == "" {
				if res.IsError {
					t.Errorf("result %+v", res)
				}
				return
			}
			if b := body(t, res); b.Code != tt.wantCode {
				t.Errorf("code %s, want %s", b.Code, tt.wantCode)
			}
		})
	}
}

// TestRedefinedToolVoidsItsTokens: a confirm token binds the tool as it
// was advertised; a tool re-announced in between cannot be redeemed for.
func TestRedefinedToolVoidsItsTokens(t *testing.T) {
	gw := start(t, testConfig(t, `
rules:
  - name: wipes-need-a-token
    match: {tools: [wipe]}
    mode: token
`, "fx"), "false")
	cs := client(t, gw, nil)
	args := map[string]any{"target": "x"}
	b := body(t, call(t, cs, "wipe", args))
	if b.Code != interlock.CodeConfirmationRequired || b.ConfirmToken == "" {
		t.Fatalf("describe: %+v", b)
	}
	yes := true
	call(t, cs, "relabel", map[string]any{"name": "wipe", "annotations": &mcp.ToolAnnotations{DestructiveHint: &yes, Title: "Wipe, now described otherwise"}})
	eventually(t, "the new definition advertised", func() bool {
		return listTools(t, cs)["wipe"].Annotations.Title != ""
	})
	args["__confirm_token"] = b.ConfirmToken
	if b := body(t, call(t, cs, "wipe", args)); b.Code != interlock.CodeConsentTokenMismatch {
		t.Errorf("redeemed after the tool changed: %s", b.Code)
	}
}
