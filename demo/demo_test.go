package demo

import (
	"context"
	"encoding/json"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/interlock-mcp/interlock"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

func openTemp(t *testing.T) (*DB, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "demo.db")
	db, err := Open(path, false)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { db.Close() })
	return db, path
}

func connect(t *testing.T, db *DB) *mcp.ClientSession {
	t.Helper()
	ctx := context.Background()
	serverTransport, clientTransport := mcp.NewInMemoryTransports()
	ss, err := NewServer(db).Connect(ctx, serverTransport, nil)
	if err != nil {
		t.Fatalf("server connect: %v", err)
	}
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "demo-test", Version: "0"}, nil).Connect(ctx, clientTransport, nil)
	if err != nil {
		t.Fatalf("client connect: %v", err)
	}
	t.Cleanup(func() {
		cs.Close()
		ss.Wait()
	})
	return cs
}

// call runs a tool and returns isError and the structuredContent as a map.
func call(t *testing.T, cs *mcp.ClientSession, tool string, args map[string]any) (bool, map[string]any) {
	t.Helper()
	res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: tool, Arguments: args})
	if err != nil {
		t.Fatalf("%s: protocol error: %v", tool, err)
	}
	body := map[string]any{}
	if res.StructuredContent != nil {
		raw, err := json.Marshal(res.StructuredContent)
		if err != nil {
			t.Fatalf("%s: re-marshal structuredContent: %v", tool, err)
		}
		if err := json.Unmarshal(raw, &body); err != nil {
			t.Fatalf("%s: structuredContent is not an object: %s", tool, raw)
		}
	}
	return res.IsError, body
}

// mustCall runs a tool that must succeed.
func mustCall(t *testing.T, cs *mcp.ClientSession, tool string, args map[string]any) map[string]any {
	t.Helper()
	isErr, body := call(t, cs, tool, args)
	if isErr {
		t.Fatalf("%s(%v) failed: %v", tool, args, body)
	}
	return body
}

// mustFail runs a tool that must fail with code and returns the error body.
func mustFail(t *testing.T, cs *mcp.ClientSession, tool string, args map[string]any, code interlock.Code) map[string]any {
	t.Helper()
	isErr, body := call(t, cs, tool, args)
	if !isErr {
		t.Fatalf("%s(%v) succeeded, want %s: %v", tool, args, code, body)
	}
	if body["code"] != string(code) {
		t.Fatalf("%s(%v) code = %v, want %s: %v", tool, args, body["code"], code, body)
	}
	if hint, _ := body["recovery_hint"].(string); hint == "" {
		t.Errorf("%s(%v): empty recovery_hint", tool, args)
	}
	return body
}

func TestToolList(t *testing.T) {
	db, _ := openTemp(t)
	cs := connect(t, db)
	res, err := cs.ListTools(context.Background(), nil)
	if err != nil {
		t.Fatalf("ListTools: %v", err)
	}
	type hints struct {
		readOnly, idempotent   bool
		destructive, openWorld *bool
		enums                  map[string][]string
	}
	plansEnum := map[string][]string{"to": {"free", "pro", "scale"}}
	want := map[string]hints{
		"list_customers":    {readOnly: true, openWorld: new(false)},
		"get_customer":      {readOnly: true, openWorld: new(false)},
		"list_invoices":     {readOnly: true, openWorld: new(false)},
		"get_service":       {readOnly: true, openWorld: new(false)},
		"preview_reminder":  {readOnly: true, openWorld: new(false)},
		"quote_plan_change": {readOnly: true, openWorld: new(false), enums: map[string][]string{"to": {"free", "pro", "scale"}, "direction": {"upgrade", "downgrade"}}},
		"quote_refund":      {readOnly: true, openWorld: new(false)},
		"send_reminder":     {destructive: new(false), openWorld: new(true)},
		"delete_customer":   {destructive: new(true), openWorld: new(false)},
		"upgrade_plan":      {destructive: new(true), openWorld: new(false), enums: plansEnum},
		"downgrade_plan":    {destructive: new(true), openWorld: new(false), enums: plansEnum},
		"promote_release":   {destructive: new(true), openWorld: new(true), enums: map[string][]string{"environment": {"staging", "production"}}},
		"refund_invoice":    {destructive: new(true), openWorld: new(true)},
	}
	if len(res.Tools) != len(want) {
		var names []string
		for _, tool := range res.Tools {
			names = append(names, tool.Name)
		}
		t.Fatalf("got %d tools %v, want %d", len(res.Tools), names, len(want))
	}
	sameBool := func(a, b *bool) bool { return (a == nil) == (b == nil) && (a == nil || *a == *b) }
	for _, tool := range res.Tools {
		t.Run(tool.Name, func(t *testing.T) {
			w, ok := want[tool.Name]
			if !ok {
				t.Fatalf("unexpected tool %q", tool.Name)
			}
			if tool.Title == "" || tool.Description == "" {
				t.Errorf("title %q, description %q: both must be set", tool.Title, tool.Description)
			}
			a := tool.Annotations
			if a == nil {
				t.Fatal("no annotations")
			}
			if a.ReadOnlyHint != w.readOnly || a.IdempotentHint != w.idempotent ||
				!sameBool(a.DestructiveHint, w.destructive) || !sameBool(a.OpenWorldHint, w.openWorld) {
				got, _ := json.Marshal(a)
				t.Errorf("annotations %s, want %+v", got, w)
			}
			var schema struct {
				Required   []string `json:"required"`
				Properties map[string]struct {
					Enum []string `json:"enum"`
				} `json:"properties"`
			}
			raw, _ := json.Marshal(tool.InputSchema)
			if err := json.Unmarshal(raw, &schema); err != nil {
				t.Fatalf("input schema %s: %v", raw, err)
			}
			for property, values := range w.enums {
				if got := schema.Properties[property].Enum; !slices.Equal(got, values) {
					t.Errorf("%s enum = %v, want %v", property, got, values)
				}
				if !slices.Contains(schema.Required, property) {
					t.Errorf("%s is not required: %s", property, raw)
				}
			}
			for property, p := range schema.Properties {
				if _, ok := w.enums[property]; !ok && p.Enum != nil {
					t.Errorf("%s has an unexpected enum %v", property, p.Enum)
				}
			}
		})
	}
}

// TestToolCalls runs each case against a freshly seeded database.
func TestToolCalls(t *testing.T) {
	tests := []struct {
		name     string
		tool     string
		args     map[string]any
		wantCode interlock.Code // empty for success
		want     map[string]any // fields of structuredContent
	}{
		{name: "list customers", tool: "list_customers", args: map[string]any{},
			want: map[string]any{"count": 3.0}},
		{name: "get seeded customer", tool: "get_customer", args: map[string]any{"id": "acct_9931"},
			want: map[string]any{"id": "acct_9931", "name": "Northwind Traders", "email": "billing@northwind.example",
				"plan": "pro", "plan_price": 19.0, "plan_price_formatted": "$19.00",
				"invoice_count": 3.0, "open_invoice_count": 1.0, "balance": 480.0, "balance_formatted": "$480.00",
				"plan_prices": map[string]any{"free": "$0.00", "pro": "$19.00", "scale": "$49.00"}}},
		{name: "get scale customer", tool: "get_customer", args: map[string]any{"id": "acct_1024"},
			want: map[string]any{"name": "Globex", "plan": "scale", "plan_price": 49.0, "invoice_count": 2.0, "balance_formatted": "$2,400.00"}},
		{name: "get free customer", tool: "get_customer", args: map[string]any{"id": "acct_2048"},
			want: map[string]any{"name": "Initech", "plan": "free", "plan_price": 0.0, "invoice_count": 0.0, "balance": 0.0}},
		{name: "get unknown customer", tool: "get_customer", args: map[string]any{"id": "acct_0000"},
			wantCode: interlock.CodeNotFound, want: map[string]any{"retriable": false}},
		{name: "get empty id", tool: "get_customer", args: map[string]any{"id": ""},
			wantCode: interlock.CodeValidationFailed},
		{name: "list invoices", tool: "list_invoices", args: map[string]any{"customer_id": "acct_9931"},
			want: map[string]any{"customer_id": "acct_9931", "count": 3.0}},
		{name: "list invoices of unknown customer", tool: "list_invoices", args: map[string]any{"customer_id": "acct_0000"},
			wantCode: interlock.CodeNotFound},
		{name: "send reminder", tool: "send_reminder", args: map[string]any{"customer_id": "acct_1024"},
			want: map[string]any{"customer_id": "acct_1024", "to": "accounts@globex.example", "balance": 2400.0}},
		{name: "send reminder with nothing open", tool: "send_reminder", args: map[string]any{"customer_id": "acct_2048"},
			wantCode: interlock.CodeValidationFailed},
		{name: "send reminder to unknown customer", tool: "send_reminder", args: map[string]any{"customer_id": "acct_0000"},
			wantCode: interlock.CodeNotFound},
		{name: "delete unknown customer", tool: "delete_customer", args: map[string]any{"id": "acct_0000"},
			wantCode: interlock.CodeNotFound},
		{name: "upgrade free to pro", tool: "upgrade_plan", args: map[string]any{"customer_id": "acct_2048", "to": "pro"},
			want: map[string]any{"from_plan": "free", "to_plan": "pro", "to_price": 19.0, "monthly_change": 19.0, "monthly_change_formatted": "+$19.00/mo"}},
		{name: "upgrade pro to free", tool: "upgrade_plan", args: map[string]any{"customer_id": "acct_9931", "to": "free"},
			wantCode: interlock.CodeValidationFailed, want: map[string]any{"suggested_tool": "downgrade_plan"}},
		{name: "upgrade to current plan", tool: "upgrade_plan", args: map[string]any{"customer_id": "acct_9931", "to": "pro"},
			wantCode: interlock.CodeValidationFailed},
		{name: "upgrade unknown customer", tool: "upgrade_plan", args: map[string]any{"customer_id": "acct_0000", "to": "scale"},
			wantCode: interlock.CodeNotFound},
		{name: "downgrade scale to pro", tool: "downgrade_plan", args: map[string]any{"customer_id": "acct_1024", "to": "pro"},
			want: map[string]any{"from_plan": "scale", "to_plan": "pro", "monthly_change": -30.0, "monthly_change_formatted": "-$30.00/mo"}},
		{name: "downgrade free to scale", tool: "downgrade_plan", args: map[string]any{"customer_id": "acct_2048", "to": "scale"},
			wantCode: interlock.CodeValidationFailed, want: map[string]any{"suggested_tool": "upgrade_plan"}},
		{name: "promote to production", tool: "promote_release", args: map[string]any{"service": "billing-api", "environment": "production"},
			want: map[string]any{"service": "billing-api", "version": "v1.4.2", "environment": "production", "previous_version": "v1.4.1", "changed": true}},
		{name: "promote to where it already runs", tool: "promote_release", args: map[string]any{"service": "web", "environment": "staging"},
			want: map[string]any{"version": "v2.1.1", "environment": "staging", "changed": false}},
		{name: "promote unknown service", tool: "promote_release", args: map[string]any{"service": "mainframe", "environment": "staging"},
			wantCode: interlock.CodeNotFound},
		{name: "get service", tool: "get_service", args: map[string]any{"service": "billing-api"},
			want: map[string]any{"service": "billing-api", "latest_version": "v1.4.2", "latest_released_at": "2025-03-04T10:00:00Z",
				"environments": map[string]any{"production": "v1.4.1", "staging": "v1.4.2"}}},
		{name: "get unknown service", tool: "get_service", args: map[string]any{"service": "mainframe"},
			wantCode: interlock.CodeNotFound, want: map[string]any{"recovery_hint": `Set "service" to one of: billing-api, web, then retry.`}},
		{name: "get service without a name", tool: "get_service", args: map[string]any{"service": ""},
			wantCode: interlock.CodeValidationFailed},
		{name: "preview reminder", tool: "preview_reminder", args: map[string]any{"customer_id": "acct_1024"},
			want: map[string]any{"customer_id": "acct_1024", "name": "Globex", "to": "accounts@globex.example",
				"subject": "Payment reminder: $2,400.00 outstanding", "open_invoice_count": 1.0, "balance_formatted": "$2,400.00"}},
		{name: "preview reminder with nothing open", tool: "preview_reminder", args: map[string]any{"customer_id": "acct_2048"},
			wantCode: interlock.CodeValidationFailed},
		{name: "preview reminder to unknown customer", tool: "preview_reminder", args: map[string]any{"customer_id": "acct_0000"},
			wantCode: interlock.CodeNotFound},
		{name: "quote upgrade", tool: "quote_plan_change", args: map[string]any{"customer_id": "acct_9931", "to": "scale", "direction": "upgrade"},
			want: map[string]any{"customer_id": "acct_9931", "name": "Northwind Traders", "direction": "upgrade", "from_plan": "pro", "to_plan": "scale",
				"from_price_formatted": "$19.00", "to_price_formatted": "$49.00", "monthly_change_formatted": "+$30.00/mo", "changed_at": nil}},
		{name: "quote downgrade", tool: "quote_plan_change", args: map[string]any{"customer_id": "acct_1024", "to": "free", "direction": "downgrade"},
			want: map[string]any{"direction": "downgrade", "from_plan": "scale", "to_plan": "free", "monthly_change": -49.0}},
		{name: "quote upgrade to a lower plan", tool: "quote_plan_change", args: map[string]any{"customer_id": "acct_9931", "to": "free", "direction": "upgrade"},
			wantCode: interlock.CodeValidationFailed, want: map[string]any{"suggested_tool": "downgrade_plan"}},
		{name: "quote downgrade to a higher plan", tool: "quote_plan_change", args: map[string]any{"customer_id": "acct_9931", "to": "scale", "direction": "downgrade"},
			wantCode: interlock.CodeValidationFailed, want: map[string]any{"suggested_tool": "upgrade_plan"}},
		{name: "quote a change to the current plan", tool: "quote_plan_change", args: map[string]any{"customer_id": "acct_2048", "to": "free", "direction": "downgrade"},
			wantCode: interlock.CodeValidationFailed},
		{name: "quote for an unknown customer", tool: "quote_plan_change", args: map[string]any{"customer_id": "acct_0000", "to": "pro", "direction": "upgrade"},
			wantCode: interlock.CodeNotFound},
		{name: "quote refund", tool: "quote_refund", args: map[string]any{"invoice_id": "inv_1003", "amount": 80},
			want: map[string]any{"invoice_id": "inv_1003", "customer_id": "acct_9931", "customer_name": "Northwind Traders",
				"amount_formatted": "$80.00", "invoice_amount_formatted": "$480.00", "invoice_status": "open",
				"refundable_formatted": "$480.00", "refundable_after": 400.0, "refundable_after_formatted": "$400.00"}},
		{name: "quote refund of too much", tool: "quote_refund", args: map[string]any{"invoice_id": "inv_1002", "amount": 320.01},
			wantCode: interlock.CodeValidationFailed, want: map[string]any{"recovery_hint": "Refund at most $320.00, the invoice amount minus earlier refunds."}},
		{name: "quote refund of nothing", tool: "quote_refund", args: map[string]any{"invoice_id": "inv_1002", "amount": -5},
			wantCode: interlock.CodeValidationFailed},
		{name: "quote refund of an unknown invoice", tool: "quote_refund", args: map[string]any{"invoice_id": "inv_0000", "amount": 5},
			wantCode: interlock.CodeNotFound},
		{name: "refund part", tool: "refund_invoice", args: map[string]any{"invoice_id": "inv_1001", "amount": 250.5},
			want: map[string]any{"invoice_id": "inv_1001", "customer_id": "acct_9931", "amount": 250.5, "amount_formatted": "$250.50",
				"invoice_amount": 1250.0, "refundable_remaining": 999.5}},
		{name: "refund all", tool: "refund_invoice", args: map[string]any{"invoice_id": "inv_1002", "amount": 320},
			want: map[string]any{"refundable_remaining": 0.0}},
		{name: "refund over invoice amount", tool: "refund_invoice", args: map[string]any{"invoice_id": "inv_1002", "amount": 320.01},
			wantCode: interlock.CodeValidationFailed},
		{name: "refund zero", tool: "refund_invoice", args: map[string]any{"invoice_id": "inv_1001", "amount": 0},
			wantCode: interlock.CodeValidationFailed},
		{name: "refund fractions of a cent", tool: "refund_invoice", args: map[string]any{"invoice_id": "inv_1001", "amount": 0.001},
			wantCode: interlock.CodeValidationFailed},
		{name: "refund unknown invoice", tool: "refund_invoice", args: map[string]any{"invoice_id": "inv_0000", "amount": 1},
			wantCode: interlock.CodeNotFound},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			db, _ := openTemp(t)
			cs := connect(t, db)
			var body map[string]any
			if tt.wantCode == "" {
				body = mustCall(t, cs, tt.tool, tt.args)
			} else {
				body = mustFail(t, cs, tt.tool, tt.args, tt.wantCode)
			}
			for k, v := range tt.want {
				if !reflect.DeepEqual(body[k], v) {
					t.Errorf("%s = %#v, want %#v (body %v)", k, body[k], v, body)
				}
			}
		})
	}
}

// TestSchemaRejectsBadEnum documents that the SDK validates arguments against
// the input schema before the handler runs, so its error is plain text.
func TestSchemaRejectsBadEnum(t *testing.T) {
	db, _ := openTemp(t)
	cs := connect(t, db)
	if isErr, _ := call(t, cs, "upgrade_plan", map[string]any{"customer_id": "acct_2048", "to": "platinum"}); !isErr {
		t.Fatal("upgrade to an unknown plan succeeded")
	}
}

func TestDeleteCustomer(t *testing.T) {
	db, _ := openTemp(t)
	cs := connect(t, db)
	body := mustCall(t, cs, "delete_customer", map[string]any{"id": "acct_9931"})
	if body["invoices_deleted"] != 3.0 || body["deleted"] != true || body["name"] != "Northwind Traders" {
		t.Errorf("delete result = %v", body)
	}
	mustFail(t, cs, "get_customer", map[string]any{"id": "acct_9931"}, interlock.CodeNotFound)
	mustFail(t, cs, "list_invoices", map[string]any{"customer_id": "acct_9931"}, interlock.CodeNotFound)
	mustFail(t, cs, "refund_invoice", map[string]any{"invoice_id": "inv_1001", "amount": 1}, interlock.CodeNotFound)
	mustFail(t, cs, "delete_customer", map[string]any{"id": "acct_9931"}, interlock.CodeNotFound)
	var left int
	if err := db.sql.QueryRow(`SELECT count(*) FROM invoices WHERE customer_id = 'acct_9931'`).Scan(&left); err != nil || left != 0 {
		t.Errorf("invoices left = %d, %v; want 0", left, err)
	}
	if got := mustCall(t, cs, "list_customers", nil)["count"]; got != 2.0 {
		t.Errorf("customers left = %v, want 2", got)
	}
}

func TestStateChangesAreVisible(t *testing.T) {
	db, _ := openTemp(t)
	cs := connect(t, db)

	mustCall(t, cs, "upgrade_plan", map[string]any{"customer_id": "acct_2048", "to": "scale"})
	if got := mustCall(t, cs, "get_customer", map[string]any{"id": "acct_2048"}); got["plan"] != "scale" || got["plan_price"] != 49.0 {
		t.Errorf("after upgrade: %v", got)
	}

	// Refunding an open invoice lowers what the customer owes.
	mustCall(t, cs, "refund_invoice", map[string]any{"invoice_id": "inv_1003", "amount": 80})
	if got := mustCall(t, cs, "get_customer", map[string]any{"id": "acct_9931"}); got["balance"] != 400.0 {
		t.Errorf("balance after refund = %v, want 400", got["balance"])
	}

	mustCall(t, cs, "send_reminder", map[string]any{"customer_id": "acct_9931"})
	mustCall(t, cs, "send_reminder", map[string]any{"customer_id": "acct_9931"})
	var sent int
	if err := db.sql.QueryRow(`SELECT count(*) FROM reminders WHERE customer_id = 'acct_9931'`).Scan(&sent); err != nil || sent != 2 {
		t.Errorf("reminders recorded = %d, %v; want 2", sent, err)
	}

	mustCall(t, cs, "promote_release", map[string]any{"service": "web", "environment": "production"})
	if got := mustCall(t, cs, "promote_release", map[string]any{"service": "web", "environment": "production"}); got["changed"] != false {
		t.Errorf("second promotion changed = %v, want false", got["changed"])
	}
}

func TestRefundsAccumulate(t *testing.T) {
	db, _ := openTemp(t)
	cs := connect(t, db)
	steps := []struct {
		amount   float64
		wantCode interlock.Code
	}{
		{amount: 1000},
		{amount: 300, wantCode: interlock.CodeValidationFailed}, // only 250 left
		{amount: 250},
		{amount: 0.01, wantCode: interlock.CodeValidationFailed},
	}
	for _, step := range steps {
		args := map[string]any{"invoice_id": "inv_1001", "amount": step.amount}
		if step.wantCode == "" {
			mustCall(t, cs, "refund_invoice", args)
		} else {
			mustFail(t, cs, "refund_invoice", args, step.wantCode)
		}
	}
}

func TestOpenReset(t *testing.T) {
	path := filepath.Join(t.TempDir(), "nested", "demo.db")
	ctx := context.Background()
	reopen := func(reset bool) *DB {
		t.Helper()
		db, err := Open(path, reset)
		if err != nil {
			t.Fatalf("Open(reset=%v): %v", reset, err)
		}
		t.Cleanup(func() { db.Close() })
		return db
	}

	db := reopen(false)
	if _, err := db.deleteCustomer(ctx, "acct_9931"); err != nil {
		t.Fatalf("delete: %v", err)
	}
	db.Close()

	if _, err := reopen(false).customer(ctx, "acct_9931"); interlock.ErrorCode(err) != interlock.CodeNotFound {
		t.Fatalf("reopen without reset: err = %v, want NOT_FOUND", err)
	}
	c, err := reopen(true).customer(ctx, "acct_9931")
	if err != nil || c.InvoiceCount != 3 || c.Name != "Northwind Traders" {
		t.Fatalf("after reset: %+v, %v", c, err)
	}
}

func TestTwoHandlesShareFile(t *testing.T) {
	first, path := openTemp(t)
	second, err := Open(path, false)
	if err != nil {
		t.Fatalf("second Open: %v", err)
	}
	defer second.Close()
	a, b := connect(t, first), connect(t, second)

	mustCall(t, a, "delete_customer", map[string]any{"id": "acct_1024"})
	mustFail(t, b, "get_customer", map[string]any{"id": "acct_1024"}, interlock.CodeNotFound)

	// Concurrent refunds through both handles must neither hit a lock error
	// nor together exceed the invoice: $1,250 allows twelve $100 refunds.
	var mu sync.Mutex
	codes := map[interlock.Code]int{}
	var wg sync.WaitGroup
	for i := range 20 {
		cs := []*mcp.ClientSession{a, b}[i%2]
		wg.Go(func() {
			// Not call: t.Fatalf must not run off the test goroutine.
			res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{
				Name: "refund_invoice", Arguments: map[string]any{"invoice_id": "inv_1001", "amount": 100}})
			code := interlock.Code("")
			if err != nil {
				code = "protocol error"
			} else if res.IsError {
				code = interlock.Code(res.StructuredContent.(map[string]any)["code"].(string))
			}
			mu.Lock()
			codes[code]++
			mu.Unlock()
		})
	}
	wg.Wait()
	if codes[""] != 12 || codes[interlock.CodeValidationFailed] != 8 {
		t.Errorf("outcomes = %v, want 12 successes and 8 VALIDATION_FAILED", codes)
	}
}

func TestInternalErrorsDoNotLeak(t *testing.T) {
	db, _ := openTemp(t)
	cs := connect(t, db)
	db.Close()
	body := mustFail(t, cs, "get_customer", map[string]any{"id": "acct_9931"}, interlock.CodeInternal)
	if msg := body["message"].(string); strings.Contains(strings.ToLower(msg), "sql") {
		t.Errorf("message leaks internals: %q", msg)
	}
}

func TestFormatCents(t *testing.T) {
	tests := []struct {
		cents int64
		want  string
	}{
		{0, "$0.00"},
		{5, "$0.05"},
		{4900, "$49.00"},
		{125000, "$1,250.00"},
		{123456789, "$1,234,567.89"},
		{-3000, "-$30.00"},
	}
	for _, tt := range tests {
		t.Run(tt.want, func(t *testing.T) {
			if got := formatCents(tt.cents); got != tt.want {
				t.Errorf("formatCents(%d) = %q, want %q", tt.cents, got, tt.want)
			}
		})
	}
}
