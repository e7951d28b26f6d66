package interlock

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// tokenRig is a gate in token mode in front of a counting upgrade_plan.
type tokenRig struct {
	gate *Gate
	tool *Tool
	runs atomic.Int64
}

func newTokenRig(t testing.TB, d Decision, opts *GateOptions) *tokenRig {
	t.Helper()
	if opts == nil {
		opts = &GateOptions{Getenv: env("false")}
	}
	opts.Logger = quiet
	tool, err := NewTool("upgrade_plan", "", HintsOf(nil), map[string]any{
		"type": "object",
		"properties": map[string]any{
			"customer_id": map[string]any{"type": "string"},
			"to":          map[string]any{"type": "string"},
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	return &tokenRig{gate: newGate(t, fixedPolicy{d: d}, opts), tool: tool}
}

func (r *tokenRig) call(id Identity, args string) *mcp.CallToolResult {
	return r.gate.Call(context.Background(), r.tool, id, json.RawMessage(args), func(context.Context, json.RawMessage) (*mcp.CallToolResult, error) {
		r.runs.Add(1)
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "upgraded"}}}, nil
	})
}

var alice = Identity{Principal: "alice", Tenant: "acme"}

// withToken adds __confirm_token to a JSON object.
func withToken(args, token string) string {
	return strings.TrimSuffix(args, "}") + fmt.Sprintf(`,"__confirm_token":%q}`, token)
}

func describeCall(t *testing.T, r *tokenRig, id Identity, args string) Body {
	t.Helper()
	body := decodeBody(t, r.call(id, args))
	if body.Code != CodeConfirmationRequired || !body.ConfirmRequired || body.ConfirmToken == "" {
		t.Fatalf("describe: %+v", body)
	}
	return body
}

func TestTokenHandshake(t *testing.T) {
	const args = `{"customer_id":"acct_9931","to":"scale"}`
	d := Decision{Mode: ModeToken, Summarize: func(any) string { return "Upgrade Northwind Traders to Scale." }}

	t.Run("describe", func(t *testing.T) {
		r := newTokenRig(t, d, nil)
		body := describeCall(t, r, alice, args)
		if body.Summary != "Upgrade Northwind Traders to Scale." || body.TTLSeconds != 60 || body.Retriable {
			t.Errorf("body = %+v", body)
		}
		expires, err := time.Parse(time.RFC3339, body.ExpiresAt)
		if err != nil || time.Until(expires) > time.Minute || time.Until(expires) < 50*time.Second {
			t.Errorf("expires_at = %q", body.ExpiresAt)
		}
		if !strings.Contains(body.RecoveryHint, "verbatim") || !strings.Contains(body.RecoveryHint, "__confirm_token") {
			t.Errorf("hint = %q", body.RecoveryHint)
		}
		if r.runs.Load() != 0 {
			t.Error("describing ran the tool")
		}
	})

	tests := []struct {
		name string
		// redeem presents the token; it returns the result of the
		// redemption under test.
		redeem   func(r *tokenRig, token string) *mcp.CallToolResult
		wantCode Code
		wantRuns int64
	}{
		{"same call runs once", func(r *tokenRig, tok string) *mcp.CallToolResult {
			return r.call(alice, withToken(args, tok))
		}, "", 1},
		{"keys reordered and numbers rewritten still match", func(r *tokenRig, tok string) *mcp.CallToolResult {
			return r.call(alice, withToken(`{"to":"scale","customer_id":"acct_9931"}`, tok))
		}, "", 1},
		{"second use", func(r *tokenRig, tok string) *mcp.CallToolResult {
			r.call(alice, withToken(args, tok))
			return r.call(alice, withToken(args, tok))
		}, CodeConsentTokenInvalid, 1},
		{"other arguments", func(r *tokenRig, tok string) *mcp.CallToolResult {
			return r.call(alice, withToken(`{"customer_id":"acct_1024","to":"scale"}`, tok))
		}, CodeConsentTokenMismatch, 0},
		{"a mismatch uses the token up", func(r *tokenRig, tok string) *mcp.CallToolResult {
			r.call(alice, withToken(`{"customer_id":"acct_1024","to":"scale"}`, tok))
			return r.call(alice, withToken(args, tok))
		}, CodeConsentTokenInvalid, 0},
		{"other principal", func(r *tokenRig, tok string) *mcp.CallToolResult {
			return r.call(Identity{Principal: "mallory", Tenant: "acme"}, withToken(args, tok))
		}, CodeConsentTokenMismatch, 0},
		{"other tenant", func(r *tokenRig, tok string) *mcp.CallToolResult {
			return r.call(Identity{Principal: "alice", Tenant: "globex"}, withToken(args, tok))
		}, CodeConsentTokenMismatch, 0},
		{"other tool", func(r *tokenRig, tok string) *mcp.CallToolResult {
			other := *r.tool
			other.Name = "downgrade_plan"
			return r.gate.Call(context.Background(), &other, alice, json.RawMessage(withToken(args, tok)),
				func(context.Context, json.RawMessage) (*mcp.CallToolResult, error) { r.runs.Add(1); return nil, nil })
		}, CodeConsentTokenMismatch, 0},
		{"tampered", func(r *tokenRig, tok string) *mcp.CallToolResult {
			b := []byte(tok)
			b[len(b)/2] ^= 0x02
			return r.call(alice, withToken(args, string(b)))
		}, CodeConsentTokenInvalid, 0},
		{"superseded by a newer describe", func(r *tokenRig, tok string) *mcp.CallToolResult {
			r.call(alice, args)
			return r.call(alice, withToken(args, tok))
		}, CodeConsentTokenInvalid, 0},
		{"not a string", func(r *tokenRig, tok string) *mcp.CallToolResult {
			return r.call(alice, `{"customer_id":"acct_9931","to":"scale","__confirm_token":7}`)
		}, CodeValidationFailed, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := newTokenRig(t, d, nil)
			tok := describeCall(t, r, alice, args).ConfirmToken
			res := tt.redeem(r, tok)
			if tt.wantCode == "" {
				if res.IsError {
					t.Fatalf("want the call to run: %+v", decodeBody(t, res))
				}
			} else if got := decodeBody(t, res).Code; got != tt.wantCode {
				t.Fatalf("code = %s, want %s", got, tt.wantCode)
			}
			if got := r.runs.Load(); got != tt.wantRuns {
				t.Errorf("the tool ran %d times, want %d", got, tt.wantRuns)
			}
		})
	}

	t.Run("a newer describe's token works", func(t *testing.T) {
		r := newTokenRig(t, d, nil)
		describeCall(t, r, alice, args)
		tok := describeCall(t, r, alice, args).ConfirmToken
		if res := r.call(alice, withToken(args, tok)); res.IsError || r.runs.Load() != 1 {
			t.Errorf("result %+v, runs %d", res, r.runs.Load())
		}
	})
}

func TestTokenUnderDryRun(t *testing.T) {
	const args = `{"customer_id":"acct_9931","to":"scale"}`
	d := Decision{Mode: ModeToken}
	live := newTokenRig(t, d, nil)
	tokens := live.gate.tokens
	dry := newTokenRig(t, d, &GateOptions{Getenv: env(""), Tokens: tokens})

	if b := decodeBody(t, dry.call(alice, args)); b.Code != CodeDryRunPreview || b.ConfirmToken != "" || b.RecoveryHint != TokenDryRunHint {
		t.Errorf("describe under dry run: %+v", b)
	}
	tok := describeCall(t, live, alice, args).ConfirmToken
	if b := decodeBody(t, dry.call(alice, withToken(args, tok))); b.Code != CodeDryRunPreview {
		t.Errorf("redeem under dry run: %+v", b)
	}
	// Dry run did not consume the token.
	if res := live.call(alice, withToken(args, tok)); res.IsError {
		t.Errorf("after dry run: %+v", decodeBody(t, res))
	}
	if dry.runs.Load() != 0 || live.runs.Load() != 1 {
		t.Errorf("runs: dry %d, live %d", dry.runs.Load(), live.runs.Load())
	}
}

func TestTokenExpiry(t *testing.T) {
	const args = `{"customer_id":"acct_9931","to":"scale"}`
	tests := []struct {
		ttl      time.Duration
		wait     time.Duration
		wantCode Code
	}{
		{0, 59 * time.Second, ""},
		{0, 60 * time.Second, CodeConsentTokenExpired},
		{10 * time.Second, 9 * time.Second, ""},
		{10 * time.Second, 11 * time.Second, CodeConsentTokenExpired},
		{5 * time.Minute, 4 * time.Minute, ""},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("ttl %v after %v", tt.ttl, tt.wait), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				r := newTokenRig(t, Decision{Mode: ModeToken, TTL: tt.ttl}, nil)
				tok := describeCall(t, r, alice, args).ConfirmToken
				time.Sleep(tt.wait)
				res := r.call(alice, withToken(args, tok))
				if tt.wantCode == "" {
					if res.IsError {
						t.Fatalf("want the call to run: %+v", decodeBody(t, res))
					}
					return
				}
				if got := decodeBody(t, res).Code; got != tt.wantCode {
					t.Errorf("code = %s, want %s", got, tt.wantCode)
				}
			})
		})
	}
}

// TestTokenExactlyOnce redeems one token from many goroutines at once.
func TestTokenExactlyOnce(t *testing.T) {
	const args = `{"customer_id":"acct_9931","to":"scale"}`
	r := newTokenRig(t, Decision{Mode: ModeToken}, nil)
	tok := describeCall(t, r, alice, args).ConfirmToken
	redeemConcurrently(t, 1000, func() *mcp.CallToolResult { return r.call(alice, withToken(args, tok)) })
	if got := r.runs.Load(); got != 1 {
		t.Errorf("the tool ran %d times, want exactly once", got)
	}
}

// redeemConcurrently runs redeem n times at once and checks that every
// result but one is CONSENT_TOKEN_INVALID.
func redeemConcurrently(t *testing.T, n int, redeem func() *mcp.CallToolResult) {
	t.Helper()
	var wg sync.WaitGroup
	var ran, invalid atomic.Int64
	start := make(chan struct{})
	for range n {
		wg.Go(func() {
			<-start
			res := redeem()
			switch {
			case !res.IsError:
				ran.Add(1)
			case BodyOfResult(res).Code == CodeConsentTokenInvalid:
				invalid.Add(1)
			}
		})
	}
	close(start)
	wg.Wait()
	if ran.Load() != 1 || invalid.Load() != int64(n-1) {
		t.Errorf("%d redemptions ran, %d were CONSENT_TOKEN_INVALID; want 1 and %d", ran.Load(), invalid.Load(), n-1)
	}
}

func TestPreview(t *testing.T) {
	const args = `{"customer_id":"acct_9931","to":"scale"}`
	summarize := func(p any) string {
		m, _ := p.(map[string]any)
		return fmt.Sprintf("Upgrade %v from %v.", m["name"], m["plan"])
	}
	register := func(r *tokenRig, name string, readOnly bool, res *mcp.CallToolResult) {
		tool, _ := NewTool(name, "", Hints{ReadOnly: readOnly}, nil)
		r.gate.Register(tool, func(_ context.Context, a json.RawMessage) (*mcp.CallToolResult, error) {
			if string(a) != `{"id":"acct_9931"}` {
				return nil, fmt.Errorf("preview got %s", a)
			}
			return res, nil
		})
	}
	found := &mcp.CallToolResult{StructuredContent: map[string]any{"name": "Northwind Traders", "plan": "pro"}}
	missing := Result(Errorf(CodeNotFound, "Call list_customers to find a valid id.", "No customer acct_9931."))
	tests := []struct {
		name        string
		previewTool string
		readOnly    bool
		result      *mcp.CallToolResult
		wantCode    Code
		wantSummary string
	}{
		{"found", "get_customer", true, found, CodeConfirmationRequired, "Upgrade Northwind Traders from pro."},
		{"not found ends the call", "get_customer", true, missing, CodeNotFound, ""},
		{"a preview tool that writes is refused", "get_customer", false, found, CodeInternal, ""},
		{"an unknown preview tool is refused", "nope", true, found, CodeInternal, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := Decision{Mode: ModeToken, Preview: &PreviewCall{Tool: tt.previewTool, Args: map[string]any{"id": "acct_9931"}}, Summarize: summarize}
			r := newTokenRig(t, d, nil)
			register(r, "get_customer", tt.readOnly, tt.result)
			body := decodeBody(t, r.call(alice, args))
			if body.Code != tt.wantCode || body.Summary != tt.wantSummary {
				t.Errorf("body = %+v, want code %s summary %q", body, tt.wantCode, tt.wantSummary)
			}
			if tt.wantCode == CodeNotFound && body.RecoveryHint != "Call list_customers to find a valid id." {
				t.Errorf("the preview's own hint should reach the agent: %q", body.RecoveryHint)
			}
		})
	}
}
