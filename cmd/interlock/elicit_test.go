package main

import (
	"context"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/interlock-mcp/interlock"
)

// formAnswer is the human at the go-sdk client: it answers every form with
// content, or with action alone.
type formAnswer struct {
	action  string
	content map[string]any
	asked   []string
}

func (f *formAnswer) handle(_ context.Context, req *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
	f.asked = append(f.asked, req.Params.Message)
	return &mcp.ElicitResult{Action: f.action, Content: f.content}, nil
}

// connectServe connects a go-sdk client to `interlock serve` with dry run
// off, over stdio or HTTP, at the given protocol version.
func connectServe(t *testing.T, transport, version string, f *formAnswer) *mcp.ClientSession {
	t.Helper()
	opts := &mcp.ClientOptions{}
	if f != nil {
		opts.ElicitationHandler = f.handle
	}
	var tr mcp.Transport
	switch transport {
	case "stdio":
		tr = &mcp.CommandTransport{Command: command("false", "serve", "--stdio", "--data", t.TempDir())}
	case "http":
		tr = &mcp.StreamableClientTransport{Endpoint: servedHTTPWith(t, []string{"MCP_DRY_RUN=false"})}
	case "stateless":
		tr = &mcp.StreamableClientTransport{Endpoint: servedHTTPWith(t, []string{"MCP_DRY_RUN=false"}, "--stateless")}
	}
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "it"}, opts).Connect(context.Background(), tr, &mcp.ClientSessionOptions{ProtocolVersion: version})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cs.Close() })
	return cs
}

// TestElicitThroughServe drives the demo's elicit tools through the real
// binary with the go-sdk client, over each transport and both protocol
// generations the transport carries.
func TestElicitThroughServe(t *testing.T) {
	connections := []struct{ transport, version string }{
		{"stdio", "2026-07-28"},
		{"stdio", "2025-11-25"},
		{"http", "2025-11-25"},
		{"http", "2026-07-28"},
		{"stateless", "2026-07-28"},
	}
	for _, conn := range connections {
		t.Run(conn.transport+"/"+conn.version, func(t *testing.T) {
			t.Run("delete: accept with the id typed back", func(t *testing.T) {
				f := &formAnswer{action: "accept", content: map[string]any{"confirm": true, "type_back": "acct_9931"}}
				cs := connectServe(t, conn.transport, conn.version, f)
				res := callTool(t, cs, "delete_customer", map[string]any{"id": "acct_9931"})
				if res.IsError {
					t.Fatalf("delete: %v", structured(t, res))
				}
				if len(f.asked) != 1 || !strings.Contains(f.asked[0], "Northwind Traders") || !strings.Contains(f.asked[0], "cannot be undone") {
					t.Errorf("form message = %q", f.asked)
				}
				if got := code(t, callTool(t, cs, "get_customer", map[string]any{"id": "acct_9931"})); got != interlock.CodeNotFound {
					t.Errorf("after delete, get_customer: %s", got)
				}
			})
			t.Run("delete: decline leaves the customer", func(t *testing.T) {
				f := &formAnswer{action: "decline"}
				cs := connectServe(t, conn.transport, conn.version, f)
				if got := code(t, callTool(t, cs, "delete_customer", map[string]any{"id": "acct_9931"})); got != interlock.CodeDeclined {
					t.Errorf("code %s", got)
				}
				if res := callTool(t, cs, "get_customer", map[string]any{"id": "acct_9931"}); res.IsError {
					t.Error("the customer is gone")
				}
			})
			t.Run("promote: the human picks the environment", func(t *testing.T) {
				f := &formAnswer{action: "accept", content: map[string]any{"confirm": true, "environment": "staging"}}
				cs := connectServe(t, conn.transport, conn.version, f)
				res := callTool(t, cs, "promote_release", map[string]any{"service": "web", "environment": "production"})
				if res.IsError || structured(t, res)["environment"] != "staging" {
					t.Errorf("promote_release: %v", structured(t, res))
				}
			})
		})
	}
	t.Run("an earlier client over stateless HTTP falls back to a token", func(t *testing.T) {
		f := &formAnswer{action: "accept", content: map[string]any{"confirm": true, "type_back": "acct_9931"}}
		cs := connectServe(t, "stateless", "2025-11-25", f)
		res := callTool(t, cs, "delete_customer", map[string]any{"id": "acct_9931"})
		body := structured(t, res)
		if body["code"] != string(interlock.CodeConfirmationRequired) || len(f.asked) != 0 {
			t.Fatalf("body %v, asked %d times", body, len(f.asked))
		}
		res = callTool(t, cs, "delete_customer", map[string]any{"id": "acct_9931", "__confirm_token": body["confirm_token"]})
		if res.IsError {
			t.Errorf("redeem: %v", structured(t, res))
		}
	})
}

// TestBothGenerationsOnOneEndpoint connects a client of each protocol
// generation to the same default HTTP endpoint, at once: the earlier one
// holds a session and is asked with elicitation/create, the later one is
// served without a session and asked with input requests.
func TestBothGenerationsOnOneEndpoint(t *testing.T) {
	endpoint := servedHTTPWith(t, []string{"MCP_DRY_RUN=false"})
	clients := []struct {
		version, customer, name string
		session                 bool
	}{
		{"2025-11-25", "acct_9931", "Northwind Traders", true},
		{"2026-07-28", "acct_1024", "Globex", false},
	}
	sessions := make([]*mcp.ClientSession, len(clients))
	forms := make([]*formAnswer, len(clients))
	for i, c := range clients {
		forms[i] = &formAnswer{action: "accept", content: map[string]any{"confirm": true, "type_back": c.customer}}
		cs, err := mcp.NewClient(&mcp.Implementation{Name: "it"}, &mcp.ClientOptions{ElicitationHandler: forms[i].handle}).
			Connect(context.Background(), &mcp.StreamableClientTransport{Endpoint: endpoint}, &mcp.ClientSessionOptions{ProtocolVersion: c.version})
		if err != nil {
			t.Fatalf("connect at %s: %v", c.version, err)
		}
		t.Cleanup(func() { cs.Close() })
		sessions[i] = cs
	}
	for i, c := range clients {
		cs := sessions[i]
		t.Run(c.version, func(t *testing.T) {
			if got := cs.InitializeResult().ProtocolVersion; got != c.version {
				t.Errorf("negotiated %s", got)
			}
			if hasSession := cs.ID() != ""; hasSession != c.session {
				t.Errorf("session id %q", cs.ID())
			}
			if res := callTool(t, cs, "get_customer", map[string]any{"id": c.customer}); res.IsError {
				t.Fatalf("get_customer: %v", structured(t, res))
			}
			if res := callTool(t, cs, "delete_customer", map[string]any{"id": c.customer}); res.IsError {
				t.Fatalf("delete_customer: %v", structured(t, res))
			}
			if len(forms[i].asked) != 1 || !strings.Contains(forms[i].asked[0], c.name) {
				t.Errorf("form message = %q", forms[i].asked)
			}
			if got := code(t, callTool(t, cs, "get_customer", map[string]any{"id": c.customer})); got != interlock.CodeNotFound {
				t.Errorf("after delete, get_customer: %s", got)
			}
		})
	}
}
