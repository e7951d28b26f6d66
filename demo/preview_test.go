package demo

import (
	"fmt"
	"strings"
	"testing"

	"github.com/interlock-mcp/interlock"
)

// snapshot dumps every table, so a test can tell whether a call changed
// anything at all.
func snapshot(t *testing.T, db *DB) string {
	t.Helper()
	var b strings.Builder
	for _, table := range tablesByDependency {
		rows, err := db.sql.Query("SELECT * FROM " + table + " ORDER BY rowid")
		if err != nil {
			t.Fatalf("dump %s: %v", table, err)
		}
		cols, _ := rows.Columns()
		for rows.Next() {
			values := make([]any, len(cols))
			ptrs := make([]any, len(cols))
			for i := range values {
				ptrs[i] = &values[i]
			}
			if err := rows.Scan(ptrs...); err != nil {
				t.Fatalf("scan %s: %v", table, err)
			}
			fmt.Fprintln(&b, table, values)
		}
		if err := rows.Err(); err != nil {
			t.Fatalf("read %s: %v", table, err)
		}
		rows.Close()
	}
	return b.String()
}

// TestPreviewsAgreeWithTheirTools runs each preview tool and the tool it
// previews with the same arguments: they fail with the same code or both
// succeed, and the preview changes nothing.
func TestPreviewsAgreeWithTheirTools(t *testing.T) {
	tests := []struct {
		name           string
		preview, tool  string
		previewArgs    map[string]any
		args           map[string]any
		wantCode       interlock.Code // empty: both succeed
		previewsChange bool
	}{
		{name: "reminder", preview: "preview_reminder", tool: "send_reminder",
			args: map[string]any{"customer_id": "acct_9931"}},
		{name: "reminder with nothing open", preview: "preview_reminder", tool: "send_reminder",
			args: map[string]any{"customer_id": "acct_2048"}, wantCode: interlock.CodeValidationFailed},
		{name: "reminder to an unknown customer", preview: "preview_reminder", tool: "send_reminder",
			args: map[string]any{"customer_id": "acct_0000"}, wantCode: interlock.CodeNotFound},
		{name: "deletion", preview: "get_customer", tool: "delete_customer",
			args: map[string]any{"id": "acct_1024"}},
		{name: "deletion of an unknown customer", preview: "get_customer", tool: "delete_customer",
			args: map[string]any{"id": "acct_0000"}, wantCode: interlock.CodeNotFound},
		{name: "upgrade", preview: "quote_plan_change", tool: "upgrade_plan",
			previewArgs: map[string]any{"direction": "upgrade"}, args: map[string]any{"customer_id": "acct_2048", "to": "pro"}},
		{name: "upgrade to a lower plan", preview: "quote_plan_change", tool: "upgrade_plan",
			previewArgs: map[string]any{"direction": "upgrade"}, args: map[string]any{"customer_id": "acct_1024", "to": "pro"}, wantCode: interlock.CodeValidationFailed},
		{name: "upgrade to the current plan", preview: "quote_plan_change", tool: "upgrade_plan",
			previewArgs: map[string]any{"direction": "upgrade"}, args: map[string]any{"customer_id": "acct_1024", "to": "scale"}, wantCode: interlock.CodeValidationFailed},
		{name: "upgrade of an unknown customer", preview: "quote_plan_change", tool: "upgrade_plan",
			previewArgs: map[string]any{"direction": "upgrade"}, args: map[string]any{"customer_id": "acct_0000", "to": "pro"}, wantCode: interlock.CodeNotFound},
		{name: "downgrade", preview: "quote_plan_change", tool: "downgrade_plan",
			previewArgs: map[string]any{"direction": "downgrade"}, args: map[string]any{"customer_id": "acct_9931", "to": "free"}},
		{name: "downgrade to a higher plan", preview: "quote_plan_change", tool: "downgrade_plan",
			previewArgs: map[string]any{"direction": "downgrade"}, args: map[string]any{"customer_id": "acct_9931", "to": "scale"}, wantCode: interlock.CodeValidationFailed},
		{name: "promotion", preview: "get_service", tool: "promote_release",
			args: map[string]any{"service": "web", "environment": "production"}},
		{name: "promotion of an unknown service", preview: "get_service", tool: "promote_release",
			args: map[string]any{"service": "mainframe", "environment": "staging"}, wantCode: interlock.CodeNotFound},
		{name: "refund", preview: "quote_refund", tool: "refund_invoice",
			args: map[string]any{"invoice_id": "inv_1003", "amount": 480}},
		{name: "refund of more than is left", preview: "quote_refund", tool: "refund_invoice",
			args: map[string]any{"invoice_id": "inv_1003", "amount": 480.01}, wantCode: interlock.CodeValidationFailed},
		{name: "refund of zero", preview: "quote_refund", tool: "refund_invoice",
			args: map[string]any{"invoice_id": "inv_1003", "amount": 0}, wantCode: interlock.CodeValidationFailed},
		{name: "refund of fractions of a cent", preview: "quote_refund", tool: "refund_invoice",
			args: map[string]any{"invoice_id": "inv_1003", "amount": 1.005}, wantCode: interlock.CodeValidationFailed},
		{name: "refund of an unknown invoice", preview: "quote_refund", tool: "refund_invoice",
			args: map[string]any{"invoice_id": "inv_0000", "amount": 5}, wantCode: interlock.CodeNotFound},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			db, _ := openTemp(t)
			cs := connect(t, db)
			previewArgs := map[string]any{}
			for k, v := range tt.args {
				previewArgs[k] = v
			}
			// promote_release's environment is the human's pick, not the
			// preview's business.
			delete(previewArgs, "environment")
			for k, v := range tt.previewArgs {
				previewArgs[k] = v
			}
			before := snapshot(t, db)
			if tt.wantCode == "" {
				mustCall(t, cs, tt.preview, previewArgs)
			} else {
				mustFail(t, cs, tt.preview, previewArgs, tt.wantCode)
			}
			if after := snapshot(t, db); after != before {
				t.Fatalf("%s changed the database:\nbefore:\n%s\nafter:\n%s", tt.preview, before, after)
			}
			if tt.wantCode == "" {
				mustCall(t, cs, tt.tool, tt.args)
				if snapshot(t, db) == before {
					t.Errorf("%s changed nothing", tt.tool)
				}
				return
			}
			mustFail(t, cs, tt.tool, tt.args, tt.wantCode)
			if snapshot(t, db) != before {
				t.Errorf("the failed %s changed the database", tt.tool)
			}
		})
	}
}
