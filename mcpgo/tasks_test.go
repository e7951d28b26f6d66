package mcpgo_test

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"testing"

	"github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"

	"github.com/interlock-mcp/interlock"
	"github.com/interlock-mcp/interlock/mcpgo"
)

// mcp-go runs task tools outside its middleware: AddTaskTool refuses one
// the policy may gate, and Middleware hides and refuses one registered
// directly.
func TestTaskTools(t *testing.T) {
	g, err := interlock.NewGate(billing{}, &interlock.GateOptions{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	noop := func(context.Context, mcp.CallToolRequest) (*mcp.CreateTaskResult, error) {
		return &mcp.CreateTaskResult{}, nil
	}
	tests := []struct {
		tool    string
		refused bool
	}{
		{"get_customer", false},
		{"refund_invoice", true},
		{"drop_table", true},
	}
	for _, tt := range tests {
		t.Run(tt.tool, func(t *testing.T) {
			s := server.NewMCPServer("billing", "1.0.0", server.WithTaskCapabilities(true, true, true))
			err := mcpgo.AddTaskTool(s, g, mcp.NewTool(tt.tool), noop)
			if got := errors.Is(err, mcpgo.ErrTaskToolGated); got != tt.refused {
				t.Fatalf("AddTaskTool: %v, want refused %v", err, tt.refused)
			}

			direct := server.NewMCPServer("billing", "1.0.0", server.WithTaskCapabilities(true, true, true))
			direct.AddTaskTool(mcp.NewTool(tt.tool), noop)
			direct.Use(mcpgo.Middleware(g, direct))
			c, err := client.NewInProcessClient(direct)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { c.Close() })
			ctx := context.Background()
			if err := c.Start(ctx); err != nil {
				t.Fatal(err)
			}
			if _, err := c.Initialize(ctx, mcp.InitializeRequest{}); err != nil {
				t.Fatal(err)
			}
			list, err := c.ListTools(ctx, mcp.ListToolsRequest{})
			if err != nil {
				t.Fatal(err)
			}
			listed := slices.ContainsFunc(list.Tools, func(x mcp.Tool) bool { return x.Name == tt.tool })
			if listed == tt.refused {
				t.Errorf("listed %v, want %v", listed, !tt.refused)
			}
			if tt.refused {
				req := mcp.CallToolRequest{}
				req.Params.Name = tt.tool
				req.Params.Task = &mcp.TaskParams{}
				if _, err := c.CallTool(ctx, req); err == nil {
					t.Error("a gated task tool was called past the middleware")
				}
			}
		})
	}
}
