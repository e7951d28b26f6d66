package interlock

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

var update = flag.Bool("update", false, "rewrite the golden conversations in testdata")

// section is one "-- name --" part of a txtar archive.
type section struct {
	name string
	data []byte
}

// parseTxtar reads the txtar format: a comment, then sections that each
// start with a line "-- name --".
func parseTxtar(data []byte) (comment []byte, sections []section) {
	lines := bytes.SplitAfter(data, []byte("\n"))
	cur := &comment
	for _, line := range lines {
		trimmed := strings.TrimSpace(string(line))
		if strings.HasPrefix(trimmed, "-- ") && strings.HasSuffix(trimmed, " --") && len(trimmed) > 6 {
			sections = append(sections, section{name: strings.TrimSpace(trimmed[3 : len(trimmed)-3])})
			cur = &sections[len(sections)-1].data
			continue
		}
		*cur = append(*cur, line...)
	}
	return comment, sections
}

func formatTxtar(comment []byte, sections []section) []byte {
	var b bytes.Buffer
	b.Write(comment)
	for _, s := range sections {
		fmt.Fprintf(&b, "-- %s --\n", s.name)
		b.Write(s.data)
	}
	return b.Bytes()
}

// TestFlagConversations replays the golden conversations of the two-key
// contract in testdata/flag against a guarded send_reminder.
func TestFlagConversations(t *testing.T) {
	replayConversations(t, "testdata/flag/*.txtar", ModeFlag, "send_reminder")
}

// TestTokenConversations replays the golden conversations of the
// confirm-token handshake in testdata/token against a guarded upgrade_plan.
func TestTokenConversations(t *testing.T) {
	replayConversations(t, "testdata/token/*.txtar", ModeToken, "upgrade_plan")
}

// replayConversations replays golden conversations: each file sets the
// environment (section env), makes calls (sections call) and records the
// results the client saw (sections result) and how often the tool really
// ran (section executed). Confirm tokens and expiry times vary from run to
// run: results show them as <TOKEN n> and <EXPIRES>, and a call may pass
// <TOKEN n> to present the n-th token it was given. Run with -update to
// rewrite the results.
func replayConversations(t *testing.T, pattern string, mode Mode, toolName string) {
	files, err := filepath.Glob(pattern)
	if err != nil || len(files) == 0 {
		t.Fatalf("no conversations match %s (%v)", pattern, err)
	}
	for _, file := range files {
		t.Run(filepath.Base(file), func(t *testing.T) {
			data, err := os.ReadFile(file)
			if err != nil {
				t.Fatal(err)
			}
			comment, sections := parseTxtar(data)
			if len(sections) == 0 || sections[0].name != "env" {
				t.Fatal("a conversation starts with an env section")
			}
			vars := map[string]string{}
			for _, line := range strings.Split(strings.TrimSpace(string(sections[0].data)), "\n") {
				if k, v, ok := strings.Cut(line, "="); ok {
					vars[k] = v
				}
			}
			getenv := func(k string) string { return vars[k] }

			executed := 0
			s := mcp.NewServer(&mcp.Implementation{Name: "golden", Version: "1"}, nil)
			g := newGate(t, ByAnnotations{Mode: mode}, &GateOptions{Getenv: getenv, Logger: quiet})
			no, yes := false, true
			AddTool(s, g, &mcp.Tool{
				Name:        toolName,
				Annotations: &mcp.ToolAnnotations{DestructiveHint: &no, OpenWorldHint: &yes},
			}, func(_ context.Context, _ *mcp.CallToolRequest, in map[string]any) (*mcp.CallToolResult, map[string]any, error) {
				executed++
				return nil, map[string]any{"done": in}, nil
			})
			cs := connect(t, s)

			var tokens []string
			normalize := func(b []byte) []byte {
				for i, tok := range tokens {
					b = bytes.ReplaceAll(b, []byte(tok), []byte(fmt.Sprintf("<TOKEN %d>", i+1)))
				}
				return expiresRE.ReplaceAll(b, []byte(`${1}<EXPIRES>${2}`))
			}
			var out []section
			out = append(out, sections[0])
			for i := 1; i < len(sections); i++ {
				sec := sections[i]
				switch sec.name {
				case "call":
					raw := sec.data
					for n, tok := range tokens {
						raw = bytes.ReplaceAll(raw, []byte(fmt.Sprintf("<TOKEN %d>", n+1)), []byte(tok))
					}
					var params mcp.CallToolParams
					if err := json.Unmarshal(raw, &params); err != nil {
						t.Fatalf("call: %v", err)
					}
					res, err := cs.CallTool(context.Background(), &params)
					if err != nil {
						t.Fatalf("call: %v", err)
					}
					if tok := BodyOfResult(res).ConfirmToken; tok != "" {
						tokens = append(tokens, tok)
					}
					got := normalize(canonicalResult(t, res))
					out = append(out, sec, section{name: "result", data: got})
					if i+1 < len(sections) && sections[i+1].name == "result" {
						if want := sections[i+1].data; !*update && !bytes.Equal(got, want) {
							t.Errorf("call %s\ngot result:\n%s\nwant:\n%s", bytes.TrimSpace(sec.data), got, want)
						}
						i++
					} else if !*update {
						t.Errorf("call %s has no result section", bytes.TrimSpace(sec.data))
					}
				case "executed":
					got := []byte(strconv.Itoa(executed) + "\n")
					if !*update && !bytes.Equal(got, sec.data) {
						t.Errorf("the tool ran %s times, want %s", bytes.TrimSpace(got), bytes.TrimSpace(sec.data))
					}
					out = append(out, section{name: "executed", data: got})
				default:
					t.Fatalf("unknown section %q", sec.name)
				}
			}
			if *update {
				if err := os.WriteFile(file, formatTxtar(comment, out), 0o644); err != nil {
					t.Fatal(err)
				}
			}
		})
	}
}

// expiresRE finds expires_at values, plain or inside an escaped text block.
var expiresRE = regexp.MustCompile(`(expires_at\\?":\s*\\?")[0-9TZ:-]+(\\?")`)

// canonicalResult renders a result as indented JSON with sorted keys.
func canonicalResult(t *testing.T, res *mcp.CallToolResult) []byte {
	t.Helper()
	b, err := json.Marshal(res)
	if err != nil {
		t.Fatal(err)
	}
	var v map[string]any
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatal(err)
	}
	out, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	return append(out, '\n')
}

// TestFlagHintsSayWhatTheAgentCanDo: each combination of keys gets a hint
// that an agent can act on without looping.
func TestFlagHintsSayWhatTheAgentCanDo(t *testing.T) {
	tests := []struct {
		name, dryRun, args string
		want, notWant      []string
	}{
		{"dry run on, no confirm", "", `{"customer_id":"a"}`,
			[]string{FlagHint, "Ask the user first", "explicitly agree"}, []string{"already passed"}},
		{"dry run on, confirmed", "", `{"customer_id":"a","__confirm":true}`,
			[]string{FlagHint, "already passed __confirm: true", "will not help", "operator"}, []string{"Ask the user first"}},
		{"dry run off, no confirm", "false", `{"customer_id":"a"}`,
			[]string{"Pass __confirm:true", "Ask the user first"}, []string{"MCP_DRY_RUN"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := newGate(t, fixedPolicy{d: Decision{Mode: ModeFlag}}, &GateOptions{Getenv: env(tt.dryRun), Logger: quiet})
			hint := decodeBody(t, g.Call(context.Background(), testTool(t), alice, json.RawMessage(tt.args), nil)).RecoveryHint
			for _, w := range tt.want {
				if !strings.Contains(hint, w) {
					t.Errorf("hint %q lacks %q", hint, w)
				}
			}
			for _, w := range tt.notWant {
				if strings.Contains(hint, w) {
					t.Errorf("hint %q says %q", hint, w)
				}
			}
		})
	}
}
