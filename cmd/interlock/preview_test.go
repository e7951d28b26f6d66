package main

import (
	"context"
	"database/sql"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/interlock-mcp/interlock"
)

// serveDemo starts `interlock serve --stdio` on its built-in demo with its
// data in a directory of its own, and connects a go-sdk client whose human
// answers every form with f. It returns the session and the demo database.
func serveDemo(t *testing.T, dryRun, version string, f *formAnswer) (*mcp.ClientSession, string) {
	t.Helper()
	dir := t.TempDir()
	opts := &mcp.ClientOptions{ElicitationHandler: f.handle}
	tr := &mcp.CommandTransport{Command: command(dryRun, "serve", "--stdio", "--data", dir)}
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "it"}, opts).Connect(context.Background(), tr, &mcp.ClientSessionOptions{ProtocolVersion: version})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cs.Close() })
	return cs, filepath.Join(dir, "demo.db")
}

// demoState reads everything a gated demo tool can change.
func demoState(t *testing.T, path string) string {
	t.Helper()
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var b strings.Builder
	// Each query gives one text column, a row per line.
	for _, query := range []string{
		"SELECT id || ' ' || plan FROM customers ORDER BY id",
		"SELECT id FROM invoices ORDER BY id",
		"SELECT invoice_id || ' ' || amount_cents FROM refunds ORDER BY id",
		"SELECT customer_id FROM reminders ORDER BY id",
		"SELECT service || ' ' || environment || ' ' || version FROM deployments ORDER BY service, environment",
	} {
		rows, err := db.Query(query)
		if err != nil {
			t.Fatalf("%s: %v", query, err)
		}
		for rows.Next() {
			var line string
			if err := rows.Scan(&line); err != nil {
				t.Fatalf("%s: %v", query, err)
			}
			fmt.Fprintln(&b, line)
		}
		if err := rows.Err(); err != nil {
			t.Fatalf("%s: %v", query, err)
		}
		rows.Close()
	}
	return b.String()
}

// previewTools are the demo's preview tools; what a refused call says is
// said of the call, not of them.
var previewTools = []string{"quote_refund", "quote_plan_change", "preview_reminder", "get_service"}

// TestPreviewsRefuseThroughServe sends each gated demo tool calls that
// cannot succeed through the real binary: with dry run on or off and on
// both protocol generations, each ends with the preview's code; nobody is
// asked, no token or dry-run preview is given, and nothing changes.
func TestPreviewsRefuseThroughServe(t *testing.T) {
	calls := []struct {
		name          string
		tool          string
		args          map[string]any
		wantCode      interlock.Code
		wantSuggested string
	}{
		{"reminder to an unknown customer", "send_reminder", map[string]any{"customer_id": "acct_0000", "__confirm": true}, interlock.CodeNotFound, ""},
		{"reminder with nothing open", "send_reminder", map[string]any{"customer_id": "acct_2048", "__confirm": true}, interlock.CodeValidationFailed, ""},
		{"delete an unknown customer", "delete_customer", map[string]any{"id": "acct_0000"}, interlock.CodeNotFound, ""},
		{"upgrade to a lower plan", "upgrade_plan", map[string]any{"customer_id": "acct_1024", "to": "pro"}, interlock.CodeValidationFailed, "downgrade_plan"},
		{"upgrade to the current plan", "upgrade_plan", map[string]any{"customer_id": "acct_9931", "to": "pro"}, interlock.CodeValidationFailed, ""},
		{"upgrade to an unknown plan", "upgrade_plan", map[string]any{"customer_id": "acct_9931", "to": "platinum"}, interlock.CodeValidationFailed, ""},
		{"upgrade an unknown customer", "upgrade_plan", map[string]any{"customer_id": "acct_0000", "to": "scale"}, interlock.CodeNotFound, ""},
		{"downgrade to a higher plan", "downgrade_plan", map[string]any{"customer_id": "acct_2048", "to": "pro"}, interlock.CodeValidationFailed, "upgrade_plan"},
		{"downgrade an unknown customer", "downgrade_plan", map[string]any{"customer_id": "acct_0000", "to": "free"}, interlock.CodeNotFound, ""},
		{"promote an unknown service", "promote_release", map[string]any{"service": "mainframe"}, interlock.CodeNotFound, ""},
		{"refund an unknown invoice", "refund_invoice", map[string]any{"invoice_id": "inv_0000", "amount": 5}, interlock.CodeNotFound, ""},
		{"refund more than is left", "refund_invoice", map[string]any{"invoice_id": "inv_1002", "amount": 320.01}, interlock.CodeValidationFailed, ""},
		{"refund nothing", "refund_invoice", map[string]any{"invoice_id": "inv_1003", "amount": 0}, interlock.CodeValidationFailed, ""},
		{"refund a negative amount", "refund_invoice", map[string]any{"invoice_id": "inv_1003", "amount": -5}, interlock.CodeValidationFailed, ""},
	}
	for _, dryRun := range []string{"", "false"} {
		for _, version := range []string{"2026-07-28", "2025-11-25"} {
			t.Run(fmt.Sprintf("MCP_DRY_RUN=%q/%s", dryRun, version), func(t *testing.T) {
				// A human who would accept anything: only a form never sent
				// keeps these calls from running.
				f := &formAnswer{action: "accept", content: map[string]any{"confirm": true, "type_back": "acct_0000", "environment": "production"}}
				cs, db := serveDemo(t, dryRun, version, f)
				before := demoState(t, db)
				for _, tt := range calls {
					t.Run(tt.name, func(t *testing.T) {
						res := callTool(t, cs, tt.tool, tt.args)
						if !res.IsError {
							t.Fatalf("%s ran: %v", tt.tool, structured(t, res))
						}
						body := structured(t, res)
						if body["code"] != string(tt.wantCode) || body["retriable"] != false {
							t.Fatalf("code %v retriable %v, want %s: %v", body["code"], body["retriable"], tt.wantCode, body)
						}
						for _, key := range []string{"confirm_token", "confirm_required", "summary", "preview"} {
							if _, ok := body[key]; ok {
								t.Errorf("a call that cannot succeed carries %s: %v", key, body)
							}
						}
						if got, _ := body["suggested_tool"].(string); got != tt.wantSuggested {
							t.Errorf("suggested_tool %v, want %q", body["suggested_tool"], tt.wantSuggested)
						}
						if hint, _ := body["recovery_hint"].(string); hint == "" {
							t.Error("no recovery_hint")
						}
						text := res.Content[0].(*mcp.TextContent).Text
						for _, name := range previewTools {
							if strings.Contains(text, name) {
								t.Errorf("the refusal speaks of the preview %s, not of %s: %s", name, tt.tool, text)
							}
						}
					})
				}
				if len(f.asked) != 0 {
					t.Errorf("the human was asked %d times: %q", len(f.asked), f.asked)
				}
				if after := demoState(t, db); after != before {
					t.Errorf("the database changed:\nbefore:\n%s\nafter:\n%s", before, after)
				}
			})
		}
	}
}

// TestPreviewSummariesThroughServe checks that valid calls of each gated
// demo tool are described from their previews and run once confirmed.
func TestPreviewSummariesThroughServe(t *testing.T) {
	f := &formAnswer{action: "accept", content: map[string]any{"confirm": true, "type_back": "acct_2048", "environment": "production"}}
	cs, db := serveDemo(t, "false", "2025-11-25", f)
	before := demoState(t, db)

	t.Run("send_reminder", func(t *testing.T) {
		args := map[string]any{"customer_id": "acct_9931"}
		body := structured(t, callTool(t, cs, "send_reminder", args))
		want := "Email a payment reminder to Northwind Traders (acct_9931) at billing@northwind.example: $480.00 outstanding on 1 open invoice(s)."
		if body["code"] != string(interlock.CodeDryRunPreview) || body["summary"] != want {
			t.Fatalf("body %v, want DRY_RUN_PREVIEW with summary %q", body, want)
		}
		args["__confirm"] = true
		if res := callTool(t, cs, "send_reminder", args); res.IsError || structured(t, res)["to"] != "billing@northwind.example" {
			t.Errorf("confirmed reminder: %v", structured(t, res))
		}
	})

	tokenCalls := []struct {
		tool, summary string
		args          map[string]any
		ran           map[string]any
	}{
		{"upgrade_plan", "Move Northwind Traders (acct_9931) from pro ($19.00/mo) to scale ($49.00/mo).",
			map[string]any{"customer_id": "acct_9931", "to": "scale"}, map[string]any{"to_plan": "scale"}},
		{"downgrade_plan", "Move Globex (acct_1024) from scale ($49.00/mo) to free ($0.00/mo).",
			map[string]any{"customer_id": "acct_1024", "to": "free"}, map[string]any{"to_plan": "free"}},
		{"refund_invoice", "Refund $80.00 on invoice inv_1003 ($480.00, Northwind Traders) to the customer's card; $400.00 stays refundable.",
			map[string]any{"invoice_id": "inv_1003", "amount": 80}, map[string]any{"refundable_remaining": 400.0}},
	}
	for _, tt := range tokenCalls {
		t.Run(tt.tool, func(t *testing.T) {
			body := structured(t, callTool(t, cs, tt.tool, tt.args))
			if body["code"] != string(interlock.CodeConfirmationRequired) || body["summary"] != tt.summary {
				t.Fatalf("body %v, want CONFIRMATION_REQUIRED with summary %q", body, tt.summary)
			}
			args := map[string]any{"__confirm_token": body["confirm_token"]}
			for k, v := range tt.args {
				args[k] = v
			}
			res := callTool(t, cs, tt.tool, args)
			if res.IsError {
				t.Fatalf("redeem: %v", structured(t, res))
			}
			for k, v := range tt.ran {
				if got := structured(t, res)[k]; got != v {
					t.Errorf("%s = %v, want %v", k, got, v)
				}
			}
		})
	}

	formCalls := []struct {
		tool    string
		args    map[string]any
		message string
	}{
		{"promote_release", map[string]any{"service": "web"},
			"Promote web v2.1.1, its latest release (production runs v2.1.0, staging v2.1.1). Choose the target environment."},
		{"delete_customer", map[string]any{"id": "acct_2048"},
			"Permanently delete Initech (acct_2048, plan free) together with its 0 invoices ($0.00 outstanding). This cannot be undone."},
	}
	for _, tt := range formCalls {
		t.Run(tt.tool, func(t *testing.T) {
			asked := len(f.asked)
			if res := callTool(t, cs, tt.tool, tt.args); res.IsError {
				t.Fatalf("%s: %v", tt.tool, structured(t, res))
			}
			if len(f.asked) != asked+1 || f.asked[asked] != tt.message {
				t.Errorf("form messages %q, want the last to be %q", f.asked[asked:], tt.message)
			}
		})
	}

	after := demoState(t, db)
	for _, change := range []string{"acct_9931 scale", "acct_1024 free", "inv_1003 8000", "web production v2.1.1"} {
		if strings.Contains(before, change) || !strings.Contains(after, change) {
			t.Errorf("the database does not show %q:\n%s", change, after)
		}
	}
	if strings.Contains(after, "acct_2048") {
		t.Errorf("Initech was not deleted:\n%s", after)
	}
}
