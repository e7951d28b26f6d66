package interlock

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
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
// contract in testdata/flag: each file sets MCP_DRY_RUN (section env), makes
// calls to a guarded send_reminder (sections call) and records the results
// the client saw (sections result) and how often the tool really ran
// (section executed). Run with -update to rewrite the results.
func TestFlagConversations(t *testing.T) {
	files, err := filepath.Glob("testdata/flag/*.txtar")
	if err != nil || len(files) == 0 {
		t.Fatalf("no conversations in testdata/flag (%v)", err)
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
			g := newGate(t, ByAnnotations{Mode: ModeFlag}, &GateOptions{Getenv: getenv, Logger: quiet})
			no, yes := false, true
			AddTool(s, g, &mcp.Tool{
				Name:        "send_reminder",
				Annotations: &mcp.ToolAnnotations{DestructiveHint: &no, OpenWorldHint: &yes},
			}, func(_ context.Context, _ *mcp.CallToolRequest, in struct {
				CustomerID string `json:"customer_id"`
			}) (*mcp.CallToolResult, map[string]any, error) {
				executed++
				return nil, map[string]any{"sent_to": in.CustomerID}, nil
			})
			cs := connect(t, s)

			var out []section
			out = append(out, sections[0])
			for i := 1; i < len(sections); i++ {
				sec := sections[i]
				switch sec.name {
				case "call":
					var params mcp.CallToolParams
					if err := json.Unmarshal(sec.data, &params); err != nil {
						t.Fatalf("call: %v", err)
					}
					res, err := cs.CallTool(context.Background(), &params)
					if err != nil {
						t.Fatalf("call: %v", err)
					}
					got := canonicalResult(t, res)
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
