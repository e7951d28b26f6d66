package demo

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/google/jsonschema-go/jsonschema"
	"github.com/interlock-mcp/interlock"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

type noArguments struct{}

type customerIDArguments struct {
	ID string `json:"id" jsonschema:"The customer's id, such as acct_9931."`
}

type customerArguments struct {
	CustomerID string `json:"customer_id" jsonschema:"The customer's id, such as acct_9931."`
}

type planChangeArguments struct {
	CustomerID string `json:"customer_id" jsonschema:"The customer's id, such as acct_9931."`
	To         string `json:"to" jsonschema:"The plan to move the customer to."`
}

type planQuoteArguments struct {
	CustomerID string `json:"customer_id" jsonschema:"The customer's id, such as acct_9931."`
	To         string `json:"to" jsonschema:"The plan to move the customer to."`
	Direction  string `json:"direction" jsonschema:"upgrade to check a change through upgrade_plan, downgrade for downgrade_plan."`
}

type serviceArguments struct {
	Service string `json:"service" jsonschema:"The service, such as billing-api or web."`
}

type promotionArguments struct {
	Service     string `json:"service" jsonschema:"The service to release, such as billing-api or web."`
	Environment string `json:"environment" jsonschema:"The environment to promote the latest release to."`
}

type refundArguments struct {
	InvoiceID string  `json:"invoice_id" jsonschema:"The invoice's id, such as inv_1001."`
	Amount    float64 `json:"amount" jsonschema:"Dollars to refund, greater than 0 and at most the invoice amount minus earlier refunds."`
}

const instructions = `Demo billing and operations back office. Customers (acct_…) are on plans free < pro < scale; invoices (inv_…) belong to customers; services have releases deployed to staging and production. Read with list_customers, get_customer, list_invoices and get_service before changing anything; quote_refund, quote_plan_change and preview_reminder check a change and show what it would do without doing it. Amounts are dollars.`

// NewServer returns an MCP server exposing the demo back office's tools:
// first those that read, then those that show what a change would do
// without doing it, then those that change something.
func NewServer(db *DB) *mcp.Server {
	s := mcp.NewServer(&mcp.Implementation{Name: "interlock-demo", Title: "Interlock demo back office", Version: "1.0.0"},
		&mcp.ServerOptions{Instructions: instructions})
	addReadingTools(s, db)
	addPreviewTools(s, db)
	addWritingTools(s, db)
	return s
}

// addReadingTools adds the tools that read the back office: customers,
// their invoices, and services.
func addReadingTools(s *mcp.Server, db *DB) {
	addTool(s, &mcp.Tool{
		Name:        "list_customers",
		Title:       "List customers",
		Description: "List every customer with their plan, invoice counts and outstanding balance.",
		Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true, OpenWorldHint: new(false)},
	}, func(ctx context.Context, _ noArguments) (any, error) {
		return db.listCustomers(ctx)
	})
	addTool(s, &mcp.Tool{
		Name:        "get_customer",
		Title:       "Get customer",
		Description: "Show one customer: contact email, plan and its monthly price, invoice counts and outstanding balance.",
		Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true, OpenWorldHint: new(false)},
	}, func(ctx context.Context, in customerIDArguments) (any, error) {
		return db.customer(ctx, in.ID)
	})
	addTool(s, &mcp.Tool{
		Name:        "list_invoices",
		Title:       "List invoices",
		Description: "List a customer's invoices with amount, status (paid or open), issue date and how much is still refundable.",
		Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true, OpenWorldHint: new(false)},
	}, func(ctx context.Context, in customerArguments) (any, error) {
		return db.listInvoices(ctx, in.CustomerID)
	})
	addTool(s, &mcp.Tool{
		Name:        "get_service",
		Title:       "Get service",
		Description: "Show a service's latest release (what promote_release ships) and the version each environment runs; \"\" for an environment that runs nothing yet.",
		Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true, OpenWorldHint: new(false)},
	}, func(ctx context.Context, in serviceArguments) (any, error) {
		return db.service(ctx, in.Service)
	})
}

// addPreviewTools adds the read-only tools that check a change and show
// what it would do, failing as the change would: the previews that
// interlock's rules call before a human confirms the change.
func addPreviewTools(s *mcp.Server, db *DB) {
	addTool(s, &mcp.Tool{
		Name:        "preview_reminder",
		Title:       "Preview payment reminder",
		Description: "Show the payment reminder send_reminder would email the customer now, without sending it. Fails as send_reminder would: an unknown customer, or one with no open invoices.",
		Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true, OpenWorldHint: new(false)},
	}, func(ctx context.Context, in customerArguments) (any, error) {
		return db.previewReminder(ctx, in.CustomerID)
	})
	addTool(s, &mcp.Tool{
		Name:        "quote_plan_change",
		Title:       "Quote plan change",
		Description: "Check a plan change and show both plans, their monthly prices and the difference, changing nothing. Fails as upgrade_plan or downgrade_plan would: an unknown customer, a plan that is not higher (upgrade) or not lower (downgrade).",
		InputSchema: schemaWithEnums[planQuoteArguments](map[string][]string{"to": planNames(), "direction": directions}),
		Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true, OpenWorldHint: new(false)},
	}, func(ctx context.Context, in planQuoteArguments) (any, error) {
		return db.quotePlanChange(ctx, in.CustomerID, in.To, in.Direction)
	})
	addTool(s, &mcp.Tool{
		Name:        "quote_refund",
		Title:       "Quote refund",
		Description: "Check a refund and show the invoice, its customer and what stays refundable after it, refunding nothing. Fails as refund_invoice would: an unknown invoice, an amount of 0 or less, or more than is still refundable.",
		Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true, OpenWorldHint: new(false)},
	}, func(ctx context.Context, in refundArguments) (any, error) {
		return db.quoteRefund(ctx, in.InvoiceID, in.Amount)
	})
}

// addWritingTools adds the tools that change something: an email sent,
// a customer deleted, a plan changed, a release promoted, a refund paid.
func addWritingTools(s *mcp.Server, db *DB) {
	addTool(s, &mcp.Tool{
		Name:        "send_reminder",
		Title:       "Send payment reminder",
		Description: "Email the customer a reminder about their open invoices. Every call sends another email.",
		Annotations: &mcp.ToolAnnotations{DestructiveHint: new(false), OpenWorldHint: new(true)},
	}, func(ctx context.Context, in customerArguments) (any, error) {
		return db.sendReminder(ctx, in.CustomerID)
	})
	addTool(s, &mcp.Tool{
		Name:        "delete_customer",
		Title:       "Delete customer",
		Description: "Permanently delete a customer together with all of their invoices and refunds.",
		Annotations: &mcp.ToolAnnotations{DestructiveHint: new(true), OpenWorldHint: new(false)},
	}, func(ctx context.Context, in customerIDArguments) (any, error) {
		return db.deleteCustomer(ctx, in.ID)
	})
	addTool(s, &mcp.Tool{
		Name:        "upgrade_plan",
		Title:       "Upgrade plan",
		Description: "Move a customer to a more expensive plan (free < pro < scale); their monthly charge goes up.",
		InputSchema: schemaWithEnums[planChangeArguments](map[string][]string{"to": planNames()}),
		Annotations: &mcp.ToolAnnotations{DestructiveHint: new(true), OpenWorldHint: new(false)},
	}, func(ctx context.Context, in planChangeArguments) (any, error) {
		return db.changePlan(ctx, in.CustomerID, in.To, true)
	})
	addTool(s, &mcp.Tool{
		Name:        "downgrade_plan",
		Title:       "Downgrade plan",
		Description: "Move a customer to a cheaper plan (scale > pro > free); their monthly charge goes down.",
		InputSchema: schemaWithEnums[planChangeArguments](map[string][]string{"to": planNames()}),
		Annotations: &mcp.ToolAnnotations{DestructiveHint: new(true), OpenWorldHint: new(false)},
	}, func(ctx context.Context, in planChangeArguments) (any, error) {
		return db.changePlan(ctx, in.CustomerID, in.To, false)
	})
	addTool(s, &mcp.Tool{
		Name:        "promote_release",
		Title:       "Promote release",
		Description: "Deploy the latest release of a service to staging or production.",
		InputSchema: schemaWithEnums[promotionArguments](map[string][]string{"environment": environments}),
		Annotations: &mcp.ToolAnnotations{DestructiveHint: new(true), OpenWorldHint: new(true)},
	}, func(ctx context.Context, in promotionArguments) (any, error) {
		return db.promoteRelease(ctx, in.Service, in.Environment)
	})
	addTool(s, &mcp.Tool{
		Name:        "refund_invoice",
		Title:       "Refund invoice",
		Description: "Refund part or all of an invoice to the customer's card. Refunds on one invoice cannot exceed its amount.",
		Annotations: &mcp.ToolAnnotations{DestructiveHint: new(true), OpenWorldHint: new(true)},
	}, func(ctx context.Context, in refundArguments) (any, error) {
		return db.refundInvoice(ctx, in.InvoiceID, in.Amount)
	})
}

// addTool registers run as a typed tool. Out is any so that an error
// result's structuredContent, set by interlock.Result, is not overwritten by
// the SDK with a marshaled zero output.
func addTool[In any](s *mcp.Server, t *mcp.Tool, run func(context.Context, In) (any, error)) {
	t.Annotations.Title = t.Title
	mcp.AddTool(s, t, func(ctx context.Context, _ *mcp.CallToolRequest, in In) (*mcp.CallToolResult, any, error) {
		out, err := run(ctx, in)
		if err != nil {
			// The client only sees INTERNAL_ERROR; keep the cause for the
			// operator.
			if interlock.ErrorCode(err) == interlock.CodeInternal {
				slog.ErrorContext(ctx, "demo tool failed", "tool", t.Name, "err", err)
			}
			return interlock.Result(err), nil, nil
		}
		return nil, out, nil
	})
}

// schemaWithEnums infers T's input schema and restricts each named
// property to its values; jsonschema struct tags can only carry
// descriptions.
func schemaWithEnums[T any](enums map[string][]string) *jsonschema.Schema {
	s, err := jsonschema.For[T](nil)
	if err != nil {
		panic(fmt.Sprintf("demo: infer schema: %v", err))
	}
	for property, values := range enums {
		p, ok := s.Properties[property]
		if !ok {
			panic(fmt.Sprintf("demo: schema has no property %q", property))
		}
		for _, v := range values {
			p.Enum = append(p.Enum, v)
		}
	}
	return s
}
