package redact_test

import (
	"fmt"
	"reflect"
	"testing"

	. "github.com/interlock-mcp/interlock/redact"
)

func TestArgs(t *testing.T) {
	args := map[string]any{
		"id":            "acct_1",
		"password":      "hunter2",
		"githubToken":   "ghp_x",
		"X-Api-Key":     "k",
		"nested":        map[string]any{"client_secret": "s", "ok": 1.0},
		"list":          []any{map[string]any{"authorization": "Bearer x"}},
		"card_number":   "4242",
		"max_tokens":    10.0,
		"tokenizer":     "bpe",
		"session_token": "t",
	}
	got := Args(args, func(n string) bool { return IsSecret(n, []string{"card_number"}) })
	want := map[string]any{
		"id":            "acct_1",
		"password":      Value,
		"githubToken":   Value,
		"X-Api-Key":     Value,
		"nested":        map[string]any{"client_secret": Value, "ok": 1.0},
		"list":          []any{map[string]any{"authorization": Value}},
		"card_number":   Value,
		"max_tokens":    10.0,
		"tokenizer":     "bpe",
		"session_token": Value,
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Args =\n%v\nwant\n%v", got, want)
	}
	if args["password"] != "hunter2" {
		t.Error("Args changed its input")
	}
}

func ExampleArgs() {
	args := map[string]any{"user": "bob", "githubToken": "ghp_x", "opts": map[string]any{"X-Api-Key": "k"}}
	fmt.Println(Args(args, func(name string) bool { return IsSecret(name, nil) }))
	// Output: map[githubToken:[REDACTED] opts:map[X-Api-Key:[REDACTED]] user:bob]
}
