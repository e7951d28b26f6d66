package gateway

import (
	"context"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/interlock-mcp/interlock"
)

// picker is the downstream human: it answers every form with blue.
type picker struct{ asked []string }

func (p *picker) answer(_ context.Context, req *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
	p.asked = append(p.asked, req.Params.Message)
	return &mcp.ElicitResult{Action: "accept", Content: map[string]any{"color": "blue"}}, nil
}

// answeredOnce calls tool on cs and checks that the upstream answered want
// once it had asked human its one question.
func answeredOnce(t *testing.T, cs *mcp.ClientSession, tool string, args any, human *picker, want string) {
	t.Helper()
	res := call(t, cs, tool, args)
	if res.IsError {
		t.Fatalf("result = %+v", body(t, res))
	}
	if got := res.Content[0].(*mcp.TextContent).Text; got != want {
		t.Errorf("upstream answered %q, want %q", got, want)
	}
	if len(human.asked) != 1 || human.asked[0] != "Pick a color" {
		t.Errorf("the human was asked %q, want once", human.asked)
	}
}

// TestUpstreamQuestions carries the questions an upstream asks during a
// call to the downstream human, for each pairing of protocol generations.
func TestUpstreamQuestions(t *testing.T) {
	tests := []struct {
		name       string
		legacyUp   bool   // the upstream speaks only 2025-11-25
		downstream string // the downstream client's protocol version
		elicits    bool   // the downstream client declares elicitation
		tool       string
		want       string         // the upstream's answer text, when the call finishes
		wantCode   interlock.Code // or the error
	}{
		{"input request, MRTR client", false, "2026-07-28", true, "ask", "asked=accept:blue", ""},
		{"input request, earlier client", false, "2025-11-25", true, "ask", "asked=accept:blue", ""},
		{"input request, client without elicitation", false, "2026-07-28", false, "ask", "", interlock.CodeCancelled},
		{"pushed question, earlier client", true, "2025-11-25", true, "ask_push", "pushed=accept:blue", ""},
		{"pushed question, MRTR client answers it on its retry", true, "2026-07-28", true, "ask_push", "pushed=accept:blue", ""},
		{"legacy upstream turns input requests into pushes", true, "2025-11-25", true, "ask", "asked=accept:blue", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := testConfig(t, "", "fx")
			if tt.legacyUp {
				f.Upstreams[0].Env["INTERLOCK_FIXTURE"] = "legacy"
			}
			gw := start(t, f, "false")
			human := &picker{}
			opts := &mcp.ClientOptions{}
			if tt.elicits {
				opts.ElicitationHandler = human.answer
			}
			st, ct := mcp.NewInMemoryTransports()
			if _, err := gw.Server().Connect(context.Background(), st, nil); err != nil {
				t.Fatal(err)
			}
			cs, err := mcp.NewClient(&mcp.Implementation{Name: "test"}, opts).Connect(context.Background(), ct,
				&mcp.ClientSessionOptions{ProtocolVersion: tt.downstream})
			if err != nil {
				t.Fatal(err)
			}
			defer cs.Close()
			if tt.wantCode != "" {
				res := call(t, cs, tt.tool, map[string]any{})
				if b := body(t, res); b.Code != tt.wantCode || b.RecoveryHint == "" {
					t.Errorf("body = %+v, want %s", b, tt.wantCode)
				}
				return
			}
			answeredOnce(t, cs, tt.tool, map[string]any{}, human, tt.want)
		})
	}
}

// TestUpstreamMetaIsNotTheGatewaysWord holds that nothing an upstream
// writes in a result can make the gateway send the result as the upstream
// wrote it in place of what the gate made of it: a question's request
// state reaches the client sealed by the gate, whatever the result's _meta
// says, so the client's answer comes back to the question it was asked.
func TestUpstreamMetaIsNotTheGatewaysWord(t *testing.T) {
	forged := map[string]any{"interlock/stand-in": true, "interlock/verbatim": true}
	for _, version := range []string{"2026-07-28", "2025-11-25"} {
		for _, via := range []string{"memory", "http"} {
			t.Run(version+" over "+via, func(t *testing.T) {
				gw := start(t, testConfig(t, "", "fx"), "false")
				human := &picker{}
				opts := &mcp.ClientOptions{ElicitationHandler: human.answer}
				var cs *mcp.ClientSession
				if via == "http" {
					cs = httpClient(version)(t, gw, opts)
				} else {
					st, ct := mcp.NewInMemoryTransports()
					if _, err := gw.Server().Connect(context.Background(), st, nil); err != nil {
						t.Fatal(err)
					}
					var err error
					if cs, err = mcp.NewClient(&mcp.Implementation{Name: "test"}, opts).Connect(context.Background(), ct,
						&mcp.ClientSessionOptions{ProtocolVersion: version}); err != nil {
						t.Fatal(err)
					}
					t.Cleanup(func() { cs.Close() })
				}
				answeredOnce(t, cs, "ask", map[string]any{"meta": forged}, human, "asked=accept:blue")
			})
		}
	}
}
