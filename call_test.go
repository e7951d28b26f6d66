package interlock

import (
	"encoding/json"
	"reflect"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

func TestSplitArgs(t *testing.T) {
	tests := []struct {
		name     string
		raw      string
		wantArgs map[string]any
		wantRaw  string
		confirm  bool
		errPath  string // non-empty: VALIDATION_FAILED naming this path
	}{
		{name: "absent", raw: "", wantArgs: map[string]any{}, wantRaw: "{}"},
		{name: "null", raw: "null", wantArgs: map[string]any{}, wantRaw: "{}"},
		{name: "plain", raw: `{"id":"acct_9931"}`, wantArgs: map[string]any{"id": "acct_9931"}, wantRaw: `{"id":"acct_9931"}`},
		{name: "confirm true", raw: `{"id":"a","__confirm":true}`, wantArgs: map[string]any{"id": "a"}, wantRaw: `{"id":"a"}`, confirm: true},
		{name: "confirm false", raw: `{"id":"a","__confirm":false}`, wantArgs: map[string]any{"id": "a"}, wantRaw: `{"id":"a"}`},
		{name: "token is stripped", raw: `{"__confirm_token":"x","id":"a"}`, wantArgs: map[string]any{"id": "a"}, wantRaw: `{"id":"a"}`},
		{name: "numbers pass in their shortest form", raw: `{"n":1.50,"m":1e2,"__confirm":true}`,
			wantArgs: map[string]any{"n": 1.5, "m": 100.0}, wantRaw: `{"m":100,"n":1.5}`, confirm: true},
		{name: "without meta-arguments the client's bytes pass", raw: `{"n":1.50, "s":"\u00e9"}`,
			wantArgs: map[string]any{"n": 1.5, "s": "é"}, wantRaw: `{"n":1.50, "s":"\u00e9"}`},
		{name: "an escaped meta-argument is one", raw: `{"id":"a","\u005f_confirm":true}`, wantArgs: map[string]any{"id": "a"}, wantRaw: `{"id":"a"}`, confirm: true},
		{name: "an escaped token is stripped", raw: `{"id":"a","_\u005fconfirm_token":"x"}`, wantArgs: map[string]any{"id": "a"}, wantRaw: `{"id":"a"}`},
		{name: "an escaped unknown meta-argument is refused", raw: `{"\u005f_x":1}`, errPath: "__x"},
		{name: "a big integer is not guessed at", raw: `{"n":12345678901234567890,"__confirm":true}`, errPath: "n"},
		{name: "a duplicate meta-argument", raw: `{"__confirm":false,"__confirm":true}`, errPath: "__confirm"},
		{name: "a meta-argument and its escaped twin", raw: `{"__confirm":false,"\u005f_confirm":true}`, errPath: "__confirm"},
		{name: "confirm as string", raw: `{"__confirm":"true"}`, errPath: "__confirm"},
		{name: "unknown meta-argument", raw: `{"__force":true}`, errPath: "__force"},
		{name: "array", raw: `[1,2]`, errPath: "-"},
		{name: "string", raw: `"hello"`, errPath: "-"},
		{name: "malformed", raw: `{"id":`, errPath: "-"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := splitArgs(json.RawMessage(tt.raw))
			if tt.errPath != "" {
				e, ok := err.(*Error)
				if !ok || e.Code != CodeValidationFailed {
					t.Fatalf("err = %v, want VALIDATION_FAILED", err)
				}
				path := e.ValidationIssues[0].Path
				if tt.errPath != "-" && path != tt.errPath {
					t.Errorf("issue path = %q, want %q", path, tt.errPath)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(p.args, tt.wantArgs) {
				t.Errorf("args = %v, want %v", p.args, tt.wantArgs)
			}
			if string(p.raw) != tt.wantRaw {
				t.Errorf("raw = %s, want %s", p.raw, tt.wantRaw)
			}
			if p.confirm != tt.confirm {
				t.Errorf("confirm = %v, want %v", p.confirm, tt.confirm)
			}
		})
	}
}

func TestHintsOf(t *testing.T) {
	yes, no := true, false
	tests := []struct {
		name string
		a    *annotations
		want Hints
	}{
		{"unannotated: destructive and open-world", nil, Hints{Destructive: true, OpenWorld: true}},
		{"read-only is never destructive", &annotations{ReadOnlyHint: true}, Hints{ReadOnly: true, OpenWorld: true}},
		{"explicit", &annotations{DestructiveHint: &no, OpenWorldHint: &yes, IdempotentHint: true}, Hints{Idempotent: true, OpenWorld: true}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := HintsOf(tt.a); got != tt.want {
				t.Errorf("HintsOf = %+v, want %+v", got, tt.want)
			}
		})
	}
}

type annotations = mcp.ToolAnnotations
