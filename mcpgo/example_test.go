package mcpgo_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log"
	"log/slog"

	"github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"

	"github.com/interlock-mcp/interlock"
	"github.com/interlock-mcp/interlock/mcpgo"
)

// A server written with mcp-go protects delete_customer. The destructive
// tool needs the operator's MCP_DRY_RUN=false and the agent's
// __confirm: true, exactly as behind the go-sdk face.
func Example() {
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

	s := server.NewMCPServer("billing", "1.0.0", server.WithInputSchemaValidation())
	mcpgo.AddTool(s, gate, mcp.NewTool("delete_customer",
		mcp.WithDescription("Permanently delete a customer and their invoices."),
		mcp.WithDestructiveHintAnnotation(true),
		mcp.WithString("id", mcp.Required()),
	), func(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		return mcp.NewToolResultStructuredOnly(map[string]any{"deleted": req.GetString("id", "")}), nil
	})

	ctx := context.Background()
	c, err := client.NewInProcessClient(s)
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	if err := c.Start(ctx); err != nil {
		log.Fatal(err)
	}
	if _, err := c.Initialize(ctx, mcp.InitializeRequest{}); err != nil {
		log.Fatal(err)
	}

	for _, args := range []map[string]any{
		{"id": "acct_9931"},
		{"id": "acct_9931", "__confirm": true},
	} {
		req := mcp.CallToolRequest{}
		req.Params.Name, req.Params.Arguments = "delete_customer", args
		res, err := c.CallTool(ctx, req)
		if err != nil {
			log.Fatal(err)
		}
		if res.IsError {
			var body interlock.Body
			_ = json.Unmarshal(res.RawStructuredContent, &body)
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
