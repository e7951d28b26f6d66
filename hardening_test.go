package interlock

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"reflect"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/interlock-mcp/interlock/approval"
	"github.com/interlock-mcp/interlock/internal/strictjson"
	"github.com/interlock-mcp/interlock/seal"
)

// recorder is a tool that keeps the bytes it was run with.
type recorder struct {
	runs atomic.Int64
	got  []json.RawMessage
}

func (r *recorder) run(_ context.Context, args json.RawMessage) (*mcp.CallToolResult, error) {
	r.runs.Add(1)
	r.got = append(r.got, bytes.Clone(args))
	return &mcp.CallToolResult{Content: []mcp.Content{}}, nil
}

// seenPolicy decides with d and keeps the arguments it was shown.
type seenPolicy struct {
	fixedPolicy
	seen *[]map[string]any
}

func (p seenPolicy) Decide(ctx context.Context, c *Call) (Decision, error) {
	*p.seen = append(*p.seen, c.Args)
	return p.fixedPolicy.Decide(ctx, c)
}

// TestForwardedBytesAreWhatWasDecided: for every accepted input, in every
// mode that lets a call run, the tool receives bytes that decode to
// exactly the arguments the policy saw, and never a meta-argument.
func TestForwardedBytesAreWhatWasDecided(t *testing.T) {
	inputs := []string{
		`{"id":"acct_9931"}`,
		`{"id":"acct_9931","__confirm":true}`,
		`{"id":"acct_9931","\u005f_confirm":true}`,
		`{"\u005f\u005fconfirm":true,"id":"a\u00e9\ud83d\ude00"}`,
		`{"n":1.50,"m":1e2,"z":-0,"__confirm":true}`,
		`{"nested":{"__confirm":"data, not meta"},"__confirm":true}`,
		`{"list":[{"a":"\"quoted\" \\ \/"}],"__confirm":true}`,
		` {"id" : "x" , "__confirm" : true} `,
	}
	for _, mode := range []Mode{ModeAllow, ModeFlag} {
		for _, in := range inputs {
			if mode == ModeFlag && !strings.Contains(in, `confirm":true`) && !strings.Contains(in, `confirm" : true`) {
				continue // the per-call key is missing: it would not run
			}
			t.Run(string(mode)+" "+in, func(t *testing.T) {
				var seen []map[string]any
				g := newGate(t, seenPolicy{fixedPolicy{d: Decision{Mode: mode}}, &seen}, &GateOptions{Getenv: env("false"), Logger: quiet})
				tool, _ := NewTool("t", "", HintsOf(nil), nil)
				var rec recorder
				res := g.Call(context.Background(), tool, alice, json.RawMessage(in), rec.run)
				if res.IsError {
					t.Fatalf("refused: %+v", decodeBody(t, res))
				}
				if len(rec.got) != 1 || len(seen) != 1 {
					t.Fatalf("runs %d, decisions %d", len(rec.got), len(seen))
				}
				got, err := strictjson.Decode(rec.got[0])
				if err != nil {
					t.Fatalf("the tool got %s, which does not decode: %v", rec.got[0], err)
				}
				if !reflect.DeepEqual(got, seen[0]) {
					t.Errorf("the tool got %#v, the policy saw %#v", got, seen[0])
				}
				for k := range got.(map[string]any) {
					if strings.HasPrefix(k, "__") {
						t.Errorf("meta-argument %s was forwarded", k)
					}
				}
			})
		}
	}
}

// TestNothingCanBeAddedAfterConfirmation adds keys, however spelled, to a
// call between its confirmation and its retry: the addition is either
// refused or stripped; it never reaches the tool.
func TestNothingCanBeAddedAfterConfirmation(t *testing.T) {
	accept := mcp.InputResponseMap{formRequestID: &mcp.ElicitResult{Action: "accept",
		Content: map[string]any{"confirm": true, "type_back": "acct_9931"}}}
	tests := []struct {
		name, retry string
		want        Code // "" runs
		forwarded   string
	}{
		{"the same call", `{"id":"acct_9931"}`, "", `{"id":"acct_9931"}`},
		{"an escaped unknown meta-argument", `{"id":"acct_9931","\u005f_cascade":true}`, CodeValidationFailed, ""},
		{"an escaped known meta-argument is stripped", `{"id":"acct_9931","\u005f_confirm":true}`, "", `{"id":"acct_9931"}`},
		{"a business key", `{"id":"acct_9931","cascade":true}`, CodeConsentTokenMismatch, ""},
		{"an escaped business key", `{"id":"acct_9931","\u0063ascade":true}`, CodeConsentTokenMismatch, ""},
		{"a duplicate key", `{"id":"acct_9931","id":"acct_1024"}`, CodeValidationFailed, ""},
		{"an escaped duplicate key", `{"id":"acct_9931","\u0069d":"acct_1024"}`, CodeValidationFailed, ""},
		{"a lone surrogate", `{"id":"acct_9931\ud800"}`, CodeValidationFailed, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := newGate(t, elicitPolicy{}, &GateOptions{Getenv: env("false"), Logger: quiet})
			preview, _ := NewTool("get_customer", "", Hints{ReadOnly: true}, nil)
			g.Register(preview, func(context.Context, json.RawMessage) (*mcp.CallToolResult, error) {
				return &mcp.CallToolResult{StructuredContent: map[string]any{"name": "Northwind Traders"}}, nil
			})
			tool, _ := NewTool("delete_customer", "", HintsOf(nil), nil)
			first := g.CallWith(context.Background(), tool, alice, json.RawMessage(`{"id":"acct_9931"}`), Exchange{Form: true}, nil)
			if first.RequestState == "" {
				t.Fatalf("no form: %+v", first)
			}
			var rec recorder
			res := g.CallWith(context.Background(), tool, alice, json.RawMessage(tt.retry),
				Exchange{Form: true, Responses: accept, State: first.RequestState}, rec.run)
			if tt.want == "" {
				if res.IsError {
					t.Fatalf("refused: %+v", decodeBody(t, res))
				}
				if len(rec.got) != 1 || string(rec.got[0]) != tt.forwarded {
					t.Errorf("forwarded %s, want %s", rec.got, tt.forwarded)
				}
				return
			}
			if got := decodeBody(t, res).Code; got != tt.want {
				t.Errorf("code = %s, want %s", got, tt.want)
			}
			if rec.runs.Load() != 0 {
				t.Errorf("the tool ran with %s", rec.got)
			}
		})
	}
}

// surrogatePolicy denies one spelling of a value; a lone surrogate must not
// let another spelling that reads the same slip past it.
func TestLoneSurrogatesAreRefused(t *testing.T) {
	for _, in := range []string{`{"s":"\ud800"}`, `{"s":"\udbff"}`, `{"s":"\udc00"}`, `{"s":"x\ud800\u0041"}`, `{"k\udfff":1}`} {
		t.Run(in, func(t *testing.T) {
			g := newGate(t, fixedPolicy{d: Decision{Mode: ModeAllow}}, &GateOptions{Getenv: env("false"), Logger: quiet})
			var rec recorder
			res := g.Call(context.Background(), testTool(t), alice, json.RawMessage(in), rec.run)
			if b := decodeBody(t, res); b.Code != CodeValidationFailed || b.ValidationIssues[0].Code != "lone_surrogate" {
				t.Errorf("body = %+v", b)
			}
			if rec.runs.Load() != 0 {
				t.Error("the tool ran")
			}
		})
	}
}

// finalPolicy lets promote_release be confirmed in a form, and denies it
// once the arguments say production: the rule a human's pick must meet.
type finalPolicy struct{ elicitPolicy }

func (p finalPolicy) Decide(ctx context.Context, c *Call) (Decision, error) {
	if c.Args["environment"] == "production" {
		return Decision{Mode: ModeDeny, Rule: "no-production"}, nil
	}
	return p.elicitPolicy.Decide(ctx, c)
}

// TestHumanChoicesAreDecidedOn: a value a human picks in the form is part
// of the call the policy decides on, on both protocol generations.
func TestHumanChoicesAreDecidedOn(t *testing.T) {
	tests := []struct {
		name, pick string
		native     bool
		want       Code
	}{
		{"MRTR, staging", "staging", true, ""},
		{"MRTR, production", "production", true, CodeToolNotAllowed},
		{"elicitation, staging", "staging", false, ""},
		{"elicitation, production", "production", false, CodeToolNotAllowed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := newGate(t, finalPolicy{}, &GateOptions{Getenv: env("false"), Logger: quiet})
			tool, _ := NewTool("promote_release", "", HintsOf(nil), nil)
			args := json.RawMessage(`{"service":"web"}`)
			answer := &mcp.ElicitResult{Action: "accept", Content: map[string]any{"confirm": true, "environment": tt.pick}}
			var rec recorder
			var res *mcp.CallToolResult
			if tt.native {
				first := g.CallWith(context.Background(), tool, alice, args, Exchange{Form: true, Native: true}, nil)
				res = g.CallWith(context.Background(), tool, alice, args, Exchange{Form: true, Native: true,
					Responses: mcp.InputResponseMap{formRequestID: answer}, State: first.RequestState}, rec.run)
			} else {
				ask := func(context.Context, *mcp.ElicitParams) (*mcp.ElicitResult, error) { return answer, nil }
				res = g.CallWith(context.Background(), tool, alice, args, Exchange{Form: true, Ask: ask}, rec.run)
			}
			if tt.want == "" {
				if res.IsError || len(rec.got) != 1 || !strings.Contains(string(rec.got[0]), tt.pick) {
					t.Fatalf("res %+v, forwarded %s", res, rec.got)
				}
				return
			}
			if b := decodeBody(t, res); b.Code != tt.want || !strings.Contains(b.Message, "no-production") {
				t.Errorf("body = %+v", b)
			}
			if rec.runs.Load() != 0 {
				t.Errorf("the tool ran with %s", rec.got)
			}
		})
	}
}

// TestTokensAreExact: a token re-sealed around a live nonce with other
// claims, even under the right key, does not redeem; nor does one for a
// tool whose definition changed.
func TestTokensAreExact(t *testing.T) {
	const args = `{"customer_id":"acct_9931","to":"scale"}`
	d := Decision{Mode: ModeToken}

	t.Run("re-sealed around a live nonce", func(t *testing.T) {
		r := newTokenRig(t, d, nil)
		token := describeCall(t, r, alice, args).ConfirmToken
		claims, err := testSealer.Open(token)
		if err != nil {
			t.Fatal(err)
		}
		other := `{"customer_id":"acct_1024","to":"scale"}`
		v, _ := strictjson.Decode([]byte(other))
		claims.Digest, _ = seal.Digest(v.(map[string]any))
		forged := testSealer.Seal(claims)
		if got := decodeBody(t, r.call(alice, withToken(other, forged))).Code; got != CodeConsentTokenInvalid {
			t.Errorf("forged token: %s, want CONSENT_TOKEN_INVALID", got)
		}
		if res := r.call(alice, withToken(args, token)); res.IsError || r.runs.Load() != 1 {
			t.Errorf("the genuine token must still redeem once: %+v", decodeBody(t, res))
		}
	})
	t.Run("the tool changed between ask and redeem", func(t *testing.T) {
		r := newTokenRig(t, d, nil)
		r.tool.Definition = DefinitionDigest(&mcp.Tool{Name: "upgrade_plan", Description: "v1"})
		token := describeCall(t, r, alice, args).ConfirmToken
		r.tool.Definition = DefinitionDigest(&mcp.Tool{Name: "upgrade_plan", Description: "v2: also deletes"})
		b := decodeBody(t, r.call(alice, withToken(args, token)))
		if b.Code != CodeConsentTokenMismatch || !strings.Contains(b.Message, "tool definition") {
			t.Errorf("body = %+v", b)
		}
		if r.runs.Load() != 0 {
			t.Error("the call ran")
		}
	})
	t.Run("definitions differ in any field", func(t *testing.T) {
		base := &mcp.Tool{Name: "x", InputSchema: map[string]any{"type": "object"}}
		variants := []*mcp.Tool{
			{Name: "x", InputSchema: map[string]any{"type": "object", "properties": map[string]any{"a": map[string]any{"type": "string"}}}},
			{Name: "x", InputSchema: map[string]any{"type": "object"}, Description: "d"},
			{Name: "x", InputSchema: map[string]any{"type": "object"}, Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true}},
			{Name: "x", InputSchema: map[string]any{"type": "object"}, Meta: mcp.Meta{"k": 1}},
		}
		for i, v := range variants {
			if DefinitionDigest(v) == DefinitionDigest(base) {
				t.Errorf("variant %d digests like the base", i)
			}
		}
	})
}

// failingStore cannot be reached.
type failingStore struct{}

func (failingStore) Issue(context.Context, string, string, time.Duration) error {
	return errors.New("dial tcp 127.0.0.1:6379: connect: connection refused")
}
func (failingStore) Consume(context.Context, string, string) (bool, error) {
	return false, errors.New("dial tcp 127.0.0.1:6379: connect: connection refused")
}

// unreachableApprovals cannot read an approval, as a store that went
// away cannot.
type unreachableApprovals struct{ approval.Store }

func (unreachableApprovals) Get(context.Context, string) (*approval.Approval, error) {
	return nil, errors.New("dial tcp 127.0.0.1:6379: connect: connection refused")
}

func TestClearAnswers(t *testing.T) {
	t.Run("a store that cannot be reached is transient", func(t *testing.T) {
		r := newTokenRig(t, Decision{Mode: ModeToken}, &GateOptions{Getenv: env("false"), Tokens: failingStore{}})
		for _, args := range []string{`{"to":"scale"}`, withToken(`{"to":"scale"}`, testSealer.Seal(seal.Claims{Kind: seal.KindConfirm, Expires: time.Now().Add(time.Minute)}))} {
			b := decodeBody(t, r.call(alice, args))
			if b.Code != CodeUpstreamUnavailable || !b.Retriable || b.RetryAfterMS == 0 || strings.Contains(b.Message, "6379") ||
				!strings.Contains(b.Message, "interlock's confirmation store cannot be reached, so ") || !strings.HasSuffix(b.Message, " cannot be confirmed now; nothing ran.") {
				t.Errorf("body = %+v", b)
			}
		}
	})
	t.Run("a decision the approval store fails under is transient", func(t *testing.T) {
		g := newGate(t, fixedPolicy{d: Decision{Mode: ModeApproval}}, &GateOptions{Getenv: env("false"), Logger: quiet,
			Approvals: NewApprovalService(ApprovalOptions{Store: unreachableApprovals{approval.NewMemory()}})})
		_, err := g.Approvals().Decide(context.Background(), "apr_1", Identity{Principal: "bob"}, approval.Approve, "")
		b := BodyOf(err)
		if b.Code != CodeUpstreamUnavailable || !b.Retriable || b.RetryAfterMS == 0 || !strings.Contains(b.Message, "nothing was decided") ||
			strings.Contains(b.Message, "6379") {
			t.Errorf("body = %+v", b)
		}
	})
	t.Run("elicit with fallback deny says the client cannot show a form", func(t *testing.T) {
		g := newGate(t, fixedPolicy{d: Decision{Mode: ModeElicit, Fallback: ModeDeny, Rule: "forms-only"}}, &GateOptions{Getenv: env("false"), Logger: quiet})
		b := decodeBody(t, g.Call(context.Background(), testTool(t), alice, json.RawMessage(`{"customer_id":"a"}`), nil))
		if b.Code != CodeToolNotAllowed || !strings.Contains(b.Message, "cannot show") || strings.Contains(b.Message, "does not allow") {
			t.Errorf("body = %+v", b)
		}
	})
}

// TestHugeInputsCostLittle: numbers of any length and deep nesting are
// refused by their size, with short messages and log lines.
func TestHugeInputsCostLittle(t *testing.T) {
	var logged bytes.Buffer
	g := newGate(t, fixedPolicy{d: Decision{Mode: ModeToken}}, &GateOptions{Getenv: env("false"),
		Logger: slog.New(slog.NewTextHandler(&logged, nil))})
	for _, in := range []string{
		`{"customer_id":"a","amount":` + strings.Repeat("9", 400000) + `}`,
		`{"customer_id":"a","amount":0.` + strings.Repeat("0", 1<<20) + `1}`,
		`{"customer_id":"a","x":` + strings.Repeat("[", 100000) + strings.Repeat("]", 100000) + `}`,
		`{"customer_id":"a","__` + strings.Repeat("x", 100000) + `":1}`,
	} {
		logged.Reset()
		res := g.Call(context.Background(), testTool(t), alice, json.RawMessage(in), nil)
		b := decodeBody(t, res)
		if b.Code != CodeValidationFailed {
			t.Errorf("code = %s", b.Code)
		}
		if body, _ := json.Marshal(b); len(body) > 2000 {
			t.Errorf("answer of %d bytes", len(body))
		}
		if logged.Len() > 2000 {
			t.Errorf("log of %d bytes", logged.Len())
		}
	}
}
