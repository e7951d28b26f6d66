package interlock_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/interlock-mcp/interlock"
	"github.com/interlock-mcp/interlock/approval"
	"github.com/interlock-mcp/interlock/internal/testdb"
	"github.com/interlock-mcp/interlock/postgres"
	"github.com/interlock-mcp/interlock/redact"
	"github.com/interlock-mcp/interlock/redis"
	"github.com/interlock-mcp/interlock/sqlite"
)

// approvalByBob asks bob to approve every call.
type approvalByBob struct{}

func (approvalByBob) Decide(context.Context, *interlock.Call) (interlock.Decision, error) {
	return interlock.Decision{Mode: interlock.ModeApproval, Rule: "refunds", Approvers: []string{"bob"},
		Summarize: func(any) string { return "Refund." }}, nil
}
func (approvalByBob) ToolModes(string, string, interlock.Hints) []interlock.Mode {
	return []interlock.Mode{interlock.ModeApproval}
}
func (approvalByBob) IsSecret(name string) bool                          { return redact.IsSecret(name, nil) }
func (approvalByBob) HumanArgs(string, string, interlock.Hints) []string { return nil }

// BenchmarkDecision is the cost of one approval decided on each store of
// approvals, through the gate: the call that asks (a pending approval
// kept), the approver's vote that approves it, and the caller's identical
// call that consumes it and runs. No audit log, so only the store
// differs.
func BenchmarkDecision(b *testing.B) {
	ctx := context.Background()
	stores := []struct {
		name string
		open func(b *testing.B) approval.Store
	}{
		{"memory", func(*testing.B) approval.Store { return approval.NewMemory() }},
		{"sqlite", func(b *testing.B) approval.Store {
			st, err := sqlite.OpenState(ctx, filepath.Join(b.TempDir(), "state.db"))
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { st.Close() })
			return st.Approvals()
		}},
		{"redis", func(b *testing.B) approval.Store {
			s, err := redis.Open(ctx, "redis://127.0.0.1:6379/0", fmt.Sprintf("interlock-bench:%d:", time.Now().UnixNano()))
			if err != nil {
				b.Fatalf("Redis must be running at 127.0.0.1:6379: %v", err)
			}
			b.Cleanup(func() { s.Close() })
			return s.Approvals()
		}},
		{"postgres", func(b *testing.B) approval.Store {
			s, err := postgres.OpenApprovals(ctx, testdb.Schema(b, "interlock_bench_"))
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(s.Close)
			return s
		}},
	}
	tool, err := interlock.NewTool("refund_invoice", "", interlock.Hints{}, map[string]any{"type": "object"})
	if err != nil {
		b.Fatal(err)
	}
	result := &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "refunded"}}}
	alice, bob := interlock.Identity{Principal: "alice"}, interlock.Identity{Principal: "bob"}
	for _, st := range stores {
		b.Run(st.name, func(b *testing.B) {
			gate, err := interlock.NewGate(approvalByBob{}, &interlock.GateOptions{Approvals: interlock.NewApprovalService(interlock.ApprovalOptions{Store: st.open(b)}),
				Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Getenv: func(name string) string {
					if name == "MCP_DRY_RUN" {
						return "false"
					}
					return ""
				}})
			if err != nil {
				b.Fatal(err)
			}
			ran := 0
			run := func(context.Context, json.RawMessage) (*mcp.CallToolResult, error) { ran++; return result, nil }
			n := 0
			for b.Loop() {
				n++
				args := json.RawMessage(fmt.Sprintf(`{"invoice_id":"inv_%d","amount":1}`, n))
				asked := interlock.BodyOfResult(gate.Call(ctx, tool, alice, args, run))
				if asked.Code != interlock.CodeApprovalPending {
					b.Fatalf("the first call: %+v", asked)
				}
				if _, err := gate.Approvals().Decide(ctx, asked.ApprovalID, bob, approval.Approve, ""); err != nil {
					b.Fatal(err)
				}
				if res := gate.Call(ctx, tool, alice, args, run); res.IsError {
					b.Fatalf("the re-call: %+v", interlock.BodyOfResult(res))
				}
			}
			if ran != n {
				b.Fatalf("%d of %d approved calls ran", ran, n)
			}
		})
	}
}
