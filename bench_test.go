package interlock

import (
	"context"
	"encoding/json"
	"log/slog"
	"os"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/interlock-mcp/interlock/exchange"
)

// The gate's own cost per call, without transport: the decision for a
// read-only call that runs, and for flag calls that preview or run.
func BenchmarkGate(b *testing.B) {
	tool, err := NewTool("get_customer", "", Hints{ReadOnly: true}, map[string]any{
		"type":                 "object",
		"properties":           map[string]any{"id": map[string]any{"type": "string"}},
		"required":             []any{"id"},
		"additionalProperties": false,
	})
	if err != nil {
		b.Fatal(err)
	}
	destructive := *tool
	destructive.Name, destructive.Hints = "delete_customer", HintsOf(nil)
	result := &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "ok"}}}
	run := func(context.Context, json.RawMessage) (*mcp.CallToolResult, error) { return result, nil }
	id := Identity{Principal: "alice", Tenant: "acme"}
	benches := []struct {
		name   string
		tool   *Tool
		dryRun string
		raw    string
	}{
		{"allow", tool, "", `{"id":"acct_9931"}`},
		{"flag/preview", &destructive, "", `{"id":"acct_9931"}`},
		{"flag/confirmed", &destructive, "false", `{"id":"acct_9931","__confirm":true}`},
	}
	// The same read-only call as an MCP handler sees it from a 2026-07-28
	// client, whose capabilities travel in every request's _meta.
	b.Run("allow/request", func(b *testing.B) {
		g := newGate(b, ByAnnotations{}, &GateOptions{Getenv: env(""), Logger: quiet,
			Identify: func(context.Context, *mcp.CallToolRequest) Identity { return id }})
		req := &mcp.CallToolRequest{Params: &mcp.CallToolParamsRaw{
			Name:      "get_customer",
			Arguments: json.RawMessage(`{"id":"acct_9931"}`),
			Meta: mcp.Meta{
				mcp.MetaKeyProtocolVersion:    "2026-07-28",
				mcp.MetaKeyClientCapabilities: map[string]any{"elicitation": map[string]any{"form": map[string]any{}}},
			},
		}}
		ctx := context.Background()
		b.ReportAllocs()
		for b.Loop() {
			g.CallRequestWith(ctx, tool, req, exchange.Via(req, nil), run)
		}
	})
	// The same read-only call with the gateway's logger at info, writing
	// to a file as interlock serve writes to standard error.
	b.Run("allow/logged", func(b *testing.B) {
		devNull, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
		if err != nil {
			b.Fatal(err)
		}
		defer devNull.Close()
		logger := slog.New(slog.NewTextHandler(devNull, &slog.HandlerOptions{Level: slog.LevelInfo}))
		g := newGate(b, ByAnnotations{}, &GateOptions{Getenv: env(""), Logger: logger})
		raw := json.RawMessage(`{"id":"acct_9931"}`)
		ctx := context.Background()
		b.ReportAllocs()
		for b.Loop() {
			g.Call(ctx, tool, id, raw, run)
		}
	})
	for _, bb := range benches {
		b.Run(bb.name, func(b *testing.B) {
			g := newGate(b, ByAnnotations{}, &GateOptions{Getenv: env(bb.dryRun), Logger: quiet})
			raw := json.RawMessage(bb.raw)
			ctx := context.Background()
			b.ReportAllocs()
			for b.Loop() {
				g.Call(ctx, bb.tool, id, raw, run)
			}
		})
	}
}

// BenchmarkTokenHandshake measures one describe and one redemption.
func BenchmarkTokenHandshake(b *testing.B) {
	r := newTokenRig(b, Decision{Mode: ModeToken}, nil)
	const args = `{"customer_id":"acct_9931","to":"scale"}`
	b.ReportAllocs()
	for b.Loop() {
		res := r.call(alice, args)
		tok := BodyOfResult(res).ConfirmToken
		if res := r.call(alice, withToken(args, tok)); res.IsError {
			b.Fatal("redeem failed")
		}
	}
}
