package interlock_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log"
	"log/slog"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/interlock-mcp/interlock"
)

// A server author protects delete_customer. Read-only tools keep running
// unconfirmed; the destructive one needs the operator's MCP_DRY_RUN=false and
// the agent's __confirm: true.
func Example() {
	server := mcp.NewServer(&mcp.Implementation{Name: "billing"}, nil)
	gate, err := interlock.NewGate(interlock.ByAnnotations{Mode: interlock.ModeFlag}, &interlock.GateOptions{
		// In production the gate reads MCP_DRY_RUN from the environment;
		// here the operator has turned dry run off.
		Getenv: func(name string) string {
			if name == "MCP_DRY_RUN" {
				return "false"
			}
			return ""
		},
		Logger: slog.New(slog.DiscardHandler),
	})
	if err != nil {
		log.Fatal(err)
	}

	type deleteArgs struct {
		ID string `json:"id" jsonschema:"the customer to delete"`
	}
	type deleted struct {
		Deleted string `json:"deleted"`
	}
	destructive := true
	interlock.AddTool(server, gate, &mcp.Tool{
		Name:        "delete_customer",
		Description: "Permanently delete a customer and their invoices.",
		Annotations: &mcp.ToolAnnotations{DestructiveHint: &destructive},
	}, func(ctx context.Context, req *mcp.CallToolRequest, in deleteArgs) (*mcp.CallToolResult, deleted, error) {
		return nil, deleted{Deleted: in.ID}, nil
	})

	ctx := context.Background()
	st, ct := mcp.NewInMemoryTransports()
	if _, err := server.Connect(ctx, st, nil); err != nil {
		log.Fatal(err)
	}
	client := mcp.NewClient(&mcp.Implementation{Name: "agent"}, nil)
	session, err := client.Connect(ctx, ct, nil)
	if err != nil {
		log.Fatal(err)
	}
	defer session.Close()

	for _, args := range []map[string]any{
		{"id": "acct_9931"},
		{"id": "acct_9931", "__confirm": true},
	} {
		res, err := session.CallTool(ctx, &mcp.CallToolParams{Name: "delete_customer", Arguments: args})
		if err != nil {
			log.Fatal(err)
		}
		if res.IsError {
			var body interlock.Body
			b, _ := json.Marshal(res.StructuredContent)
			_ = json.Unmarshal(b, &body)
			fmt.Printf("%s: %s\n", body.Code, body.RecoveryHint)
			continue
		}
		b, _ := json.Marshal(res.StructuredContent)
		fmt.Println(string(b))
	}
	// Output:
	// DRY_RUN_PREVIEW: Pass __confirm:true to actually execute. Ask the user first: show them the summary and preview, and only after they explicitly agree to this exact call, call again with the same arguments and __confirm: true.
	// {"deleted":"acct_9931"}
}

// A runner that keeps something apart per tenant (a connection, a cache;
// here a count of calls) learns from its context whom the gate let the
// call through for.
func ExampleCallerOf() {
	gate, err := interlock.NewGate(interlock.ByAnnotations{Mode: interlock.ModeFlag},
		&interlock.GateOptions{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		log.Fatal(err)
	}
	tool, err := interlock.NewTool("list_invoices", "", interlock.Hints{ReadOnly: true}, nil)
	if err != nil {
		log.Fatal(err)
	}
	calls := map[string]int{}
	run := func(ctx context.Context, _ json.RawMessage) (*mcp.CallToolResult, error) {
		who, _ := interlock.CallerOf(ctx)
		calls[who.Tenant]++
		text := fmt.Sprintf("%s of %s, call %d", who.Principal, who.Tenant, calls[who.Tenant])
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: text}}}, nil
	}
	ctx := context.Background()
	for _, who := range []interlock.Identity{
		{Tenant: "acme", Principal: "alice"},
		{Tenant: "globex", Principal: "alice"},
		{Tenant: "acme", Principal: "bob"},
	} {
		res := gate.Call(ctx, tool, who, json.RawMessage(`{}`), run)
		fmt.Println(res.Content[0].(*mcp.TextContent).Text)
	}
	// Output:
	// alice of acme, call 1
	// alice of globex, call 1
	// bob of acme, call 2
}
