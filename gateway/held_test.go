package gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/interlock-mcp/interlock"
	"github.com/interlock-mcp/interlock/audit"
)

// newClient connects a client of protocol to the gateway's server in
// memory.
func newClient(t *testing.T, gw *Gateway, protocol string, opts *mcp.ClientOptions) *mcp.ClientSession {
	t.Helper()
	st, ct := mcp.NewInMemoryTransports()
	if _, err := gw.Server().Connect(context.Background(), st, nil); err != nil {
		t.Fatal(err)
	}
	c := mcp.NewClient(&mcp.Implementation{Name: "test"}, opts)
	c.AddRoots(&mcp.Root{URI: "file:///held-root", Name: "held"})
	cs, err := c.Connect(context.Background(), ct, &mcp.ClientSessionOptions{ProtocolVersion: protocol})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cs.Close() })
	return cs
}

// answering is a client that answers every question: blue for a form,
// "sampled" for a model's completion.
func answering(asked *[]string) *mcp.ClientOptions {
	return &mcp.ClientOptions{
		ElicitationHandler: func(_ context.Context, req *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
			*asked = append(*asked, "elicit")
			return &mcp.ElicitResult{Action: "accept", Content: map[string]any{"color": "blue"}}, nil
		},
		CreateMessageHandler: func(context.Context, *mcp.CreateMessageRequest) (*mcp.CreateMessageResult, error) {
			*asked = append(*asked, "sample")
			return &mcp.CreateMessageResult{Model: "m", Role: "assistant", Content: &mcp.TextContent{Text: "sampled"}}, nil
		},
	}
}

// TestHeldCallCarriesPushedQuestions: an upstream of 2025-11-25 that asks
// its questions in the middle of a call (a form, a model's completion, the
// client's roots) is answered by a client of 2026-07-28, which takes each
// as an input request and calls again; the one run of the tool gets every
// answer, and the gate decided the call once.
func TestHeldCallCarriesPushedQuestions(t *testing.T) {
	f := testConfig(t, "", "fx")
	f.Upstreams[0].Env["INTERLOCK_FIXTURE"] = "legacy"
	gw, log := startAudited(t, f, Options{})

	tests := []struct {
		name    string
		ask     []string
		sampler bool // the client declares sampling
		want    string
	}{
		{"a form", []string{"elicit"}, true, "pushed=elicit:accept:blue"},
		{"every kind, in turn", []string{"elicit", "sample", "roots", "elicit"}, true,
			"pushed=elicit:accept:blue;sample:sampled;roots:file:///held-root;elicit:accept:blue"},
		{"sampling the client does not offer", []string{"sample"}, false, "push failed: "},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var asked []string
			opts := answering(&asked)
			if !tt.sampler {
				opts.CreateMessageHandler = nil
			}
			cs := newClient(t, gw, "2026-07-28", opts)
			res := call(t, cs, "ask_push", map[string]any{"ask": tt.ask})
			if res.IsError {
				t.Fatalf("result = %+v", body(t, res))
			}
			if got := res.Content[0].(*mcp.TextContent).Text; !strings.HasPrefix(got, tt.want) {
				t.Errorf("upstream answered %q, want %q", got, tt.want)
			}
			if tt.sampler && strings.Join(asked, ",") != strings.Join(without(tt.ask, "roots"), ",") {
				t.Errorf("the client was asked %q, want %q", asked, tt.ask)
			}
		})
	}

	// The gate's records of the call that asked four questions: one
	// decision, then one record of each continuation of the call it let
	// through, with its outcome.
	var recs []*audit.Record
	for rec, err := range log.Records(context.Background(), 1) {
		if err != nil {
			t.Fatal(err)
		}
		if rec.Event == "call" && rec.Tool == "ask_push" && strings.Contains(fmt.Sprint(rec.Args["ask"]), "roots") {
			recs = append(recs, rec)
		}
	}
	decided, continued, ok := 0, 0, 0
	for _, rec := range recs {
		switch {
		case rec.ConfirmedBy == "" && rec.Decision == audit.DecisionAllowed:
			decided++
		case rec.ConfirmedBy == interlock.ConfirmedByRelay && rec.Outcome != "":
			continued++
		default:
			t.Errorf("unexpected record %+v", rec)
		}
		t.Logf("record: decision %s, confirmed by %q, outcome %s", rec.Decision, rec.ConfirmedBy, rec.Outcome)
		if rec.Outcome == audit.OutcomeOK {
			ok++
		}
	}
	if decided != 1 || continued == 0 || ok != 1 {
		t.Errorf("records: %d decided, %d continued, %d ok; want 1, some, 1", decided, continued, ok)
	}
}

// TestHeldCallCarriesProgressOfEveryRound: the progress an upstream of
// 2025-11-25 reports during a held call reaches the client of 2026-07-28
// in whichever round of the call it comes, under the client's token:
// each retry is a request of its own, and the progress goes to the one
// that waits for the call now.
func TestHeldCallCarriesProgressOfEveryRound(t *testing.T) {
	f := testConfig(t, "", "fx")
	f.Upstreams[0].Env["INTERLOCK_FIXTURE"] = "legacy"
	gw := start(t, f, "false")
	srv := httptest.NewServer(gw.Handler(false))
	t.Cleanup(srv.Close)
	for _, transport := range []string{"in memory", "HTTP"} {
		t.Run(transport, func(t *testing.T) {
			var asked []string
			opts := answering(&asked)
			var mu sync.Mutex
			var heard []string
			opts.ProgressNotificationHandler = func(_ context.Context, req *mcp.ProgressNotificationClientRequest) {
				mu.Lock()
				heard = append(heard, fmt.Sprintf("%v:%v:%s", req.Params.ProgressToken, req.Params.Progress, req.Params.Message))
				mu.Unlock()
			}
			var cs *mcp.ClientSession
			if transport == "HTTP" {
				cs = dial(t, mcp.NewClient(&mcp.Implementation{Name: "test"}, opts), srv.URL+MCPPath, "", &mcp.ClientSessionOptions{ProtocolVersion: "2026-07-28"})
			} else {
				cs = newClient(t, gw, "2026-07-28", opts)
			}
			params := &mcp.CallToolParams{Name: "ask_push", Arguments: map[string]any{"ask": []string{"elicit", "sample", "elicit"}}}
			params.SetProgressToken("mine")
			res, err := cs.CallTool(context.Background(), params)
			if err != nil {
				t.Fatal(err)
			}
			if res.IsError {
				t.Fatalf("result = %+v", body(t, res))
			}
			want := []string{"mine:0:asking elicit", "mine:1:asking sample", "mine:2:asking elicit"}
			deadline := time.Now().Add(5 * time.Second)
			for {
				mu.Lock()
				got := slices.Clone(heard)
				mu.Unlock()
				if slices.Equal(got, want) {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("progress heard %q, want %q", got, want)
				}
				time.Sleep(20 * time.Millisecond)
			}
		})
	}
}

func without(list []string, drop string) []string {
	var out []string
	for _, s := range list {
		if s != drop {
			out = append(out, s)
		}
	}
	return out
}

// TestHeldCallExpires: a held call whose client never calls again is
// cancelled upstream and forgotten after heldTimeout, and the late retry
// is told to call again.
func TestHeldCallExpires(t *testing.T) {
	was := heldTimeout
	heldTimeout = 200 * time.Millisecond
	t.Cleanup(func() { heldTimeout = was })
	f := testConfig(t, "", "fx")
	f.Upstreams[0].Env["INTERLOCK_FIXTURE"] = "legacy"
	gw := start(t, f, "false")
	var asked []string
	opts := answering(&asked)
	opts.MultiRoundTrip = &mcp.MultiRoundTripOptions{Disabled: true}
	cs := newClient(t, gw, "2026-07-28", opts)

	ctx := context.Background()
	first, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "ask_push", Arguments: map[string]any{}})
	if err != nil {
		t.Fatal(err)
	}
	q, ok := first.InputRequests["upstream_question_1"].(*mcp.ElicitParams)
	if !ok || q.Message != "Pick a color" || first.RequestState == "" || strings.Contains(first.RequestState, heldPrefix) {
		t.Fatalf("first answer = %+v; want the upstream's question, under a sealed state", first)
	}
	u := gw.upstreams[0]
	deadline := time.Now().Add(5 * time.Second)
	for {
		u.heldMu.Lock()
		held := len(u.held)
		u.heldMu.Unlock()
		u.flights.mu.Lock()
		calls := len(u.flights.all)
		u.flights.mu.Unlock()
		if held == 0 && calls == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after expiry %d calls held, %d in flight", held, calls)
		}
		time.Sleep(20 * time.Millisecond)
	}
	late, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "ask_push", Arguments: map[string]any{},
		InputResponses: mcp.InputResponseMap{"upstream_question_1": &mcp.ElicitResult{Action: "accept", Content: map[string]any{"color": "red"}}},
		RequestState:   first.RequestState})
	if err != nil {
		t.Fatal(err)
	}
	b := body(t, late)
	if b.Code != interlock.CodeCancelled || !strings.Contains(b.Message, "no longer waiting") || !strings.Contains(b.RecoveryHint, "again") {
		t.Errorf("late retry = %+v", b)
	}
}

// TestTaskCallRefusedWithoutSession: a task-augmented call that comes
// without a session, which the lane does not take, is refused as on a
// session, never run as a plain call.
func TestTaskCallRefusedWithoutSession(t *testing.T) {
	gw := start(t, testConfig(t, "", "fx"), "false")
	srv := httptest.NewServer(gw.Handler(true))
	defer srv.Close()
	body := `{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"echo","arguments":{},"task":{"ttl":60000}}}`
	req, _ := http.NewRequest("POST", srv.URL+"/mcp", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Mcp-Protocol-Version", "2025-11-25")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	var got struct {
		ID     int             `json:"id"`
		Result json.RawMessage `json:"result"`
		Error  struct {
			Code    int64  `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
	}
	if err := json.NewDecoder(res.Body).Decode(&got); err != nil {
		t.Fatal(err)
	}
	if got.ID != 7 || got.Result != nil || got.Error.Code != -32602 || !strings.Contains(got.Error.Message, `call the tool without "task"`) {
		t.Errorf("answer = %+v", got)
	}
}

// hostileUpstream is an HTTP upstream of protocol version with one
// read-only tool, answer, of schema, which answers each call with the JSON
// its argument result holds, whatever it is, and a resource file:///null,
// whose read answers null; handshakes counts its initialize requests. Of
// an earlier protocol than 2026-07-28 it opens a session at each.
func hostileUpstream(t *testing.T, version, schema string, handshakes *atomic.Int64) *httptest.Server {
	complete := ""
	if version >= protocolNew {
		complete = `,"resultType":"complete"`
	}
	return handRolledUpstream(t, func(w http.ResponseWriter, _ *http.Request, id json.RawMessage, method string, body []byte) {
		w.Header().Set("Content-Type", "application/json")
		result := func(fields string) { fmt.Fprintf(w, `{"jsonrpc":"2.0","id":%s,"result":{%s%s}}`, id, fields, complete) }
		switch method {
		case "initialize":
			if n := handshakes.Add(1); version < protocolNew {
				w.Header().Set("Mcp-Session-Id", fmt.Sprintf("hostile-%d", n))
			}
			fmt.Fprintf(w, `{"jsonrpc":"2.0","id":%s,"result":{"protocolVersion":%q,"capabilities":{"tools":{},"resources":{}},"serverInfo":{"name":"hostile","version":"1"}}}`, id, version)
		case "tools/list":
			result(`"tools":[{"name":"answer","inputSchema":` + schema + `,"annotations":{"readOnlyHint":true}}]`)
		case "resources/list":
			result(`"resources":[{"uri":"file:///null","name":"null"}]`)
		case "resources/read":
			fmt.Fprintf(w, `{"jsonrpc":"2.0","id":%s,"result":null}`, id)
		case "tools/call":
			var m struct {
				Params struct {
					Arguments struct {
						Result string
						Wait   int // milliseconds before the answer
					} `json:"arguments"`
				} `json:"params"`
			}
			json.Unmarshal(body, &m)
			time.Sleep(time.Duration(m.Params.Arguments.Wait) * time.Millisecond)
			fmt.Fprintf(w, `{"jsonrpc":"2.0","id":%s,"result":%s}`, id, m.Params.Arguments.Result)
		default:
			result(`"_meta":{}`)
		}
	})
}

// TestHostileResults: an upstream of 2025-11-25 over HTTP answers a call
// with whatever it likes. What is not a tool's result reaches the client
// as UPSTREAM_ERROR, without the upstream's bytes; the upstream answered,
// so its link is not taken for lost and made again.
// A client of 2026-07-28, whose calls are held (held.go), one of
// 2025-11-25, whose results travel verbatim (verbatim.go), and a caller
// of the REST face alike; only a content type the gateway does not know
// travels to a client of 2025-11-25 as written, as a newer one may.
func TestHostileResults(t *testing.T) {
	var sessions atomic.Int64
	up := hostileUpstream(t, "2025-11-25", `{"type":"object"}`, &sessions)
	_, url := httpGateway(t, up.URL, false, "")
	// Each generation's client is of a tenant of its own: three failures
	// tried three times each leave its circuit closed.
	for version, key := range map[string]string{"2026-07-28": "alice-key", "2025-11-25": "other-alice-key"} {
		cs := dial(t, nil, url, key, &mcp.ClientSessionOptions{ProtocolVersion: version})
		for _, tt := range []struct {
			name, result, text string // text: the client's, or "" for UPSTREAM_ERROR
			only               string // the one generation the case is for, if any
		}{
			{"a result", `{"content":[{"type":"text","text":"fine"}]}`, "fine", ""},
			{"not an object", `["secret-1"]`, "", ""},
			{"content not a list", `{"content":"secret-2"}`, "", "2025-11-25"},
			{"content of no known type", `{"content":[{"type":"secret-3"}]}`, "", "2026-07-28"},
			{"null", `null`, "", ""},
		} {
			if tt.only != "" && tt.only != version {
				continue
			}
			t.Run(version+"/"+tt.name, func(t *testing.T) {
				res := call(t, cs, "answer", map[string]any{"result": tt.result})
				wire := resultJSON(t, res)
				if n := sessions.Load(); n != 1 {
					t.Errorf("the gateway opened %d sessions with the upstream", n)
				}
				if tt.text != "" {
					if res.IsError || len(res.Content) != 1 || res.Content[0].(*mcp.TextContent).Text != tt.text {
						t.Errorf("the result reads %s", wire)
					}
					return
				}
				if b := body(t, res); b.Code != interlock.CodeUpstreamError || strings.Contains(wire, "secret") {
					t.Errorf("the client gets %s", wire)
				}
			})
		}
	}
	// A read answered with null is no resource's contents.
	reader := dial(t, nil, url, "bob-key", &mcp.ClientSessionOptions{ProtocolVersion: "2025-11-25"})
	if res, err := reader.ReadResource(t.Context(), &mcp.ReadResourceParams{URI: "file:///null"}); err == nil {
		t.Errorf("a read answered with null gives %+v", res)
	}
	// A gateway of its own, whose circuits the calls above left alone.
	_, url = httpGateway(t, up.URL, false, "")
	status, out := post(t, strings.TrimSuffix(url, MCPPath)+"/v1/tools/answer/call", "alice-key", `{"arguments":{"result":"[\"secret-4\"]"}}`)
	if out["code"] != string(interlock.CodeUpstreamError) || strings.Contains(fmt.Sprint(out), "secret") || sessions.Load() != 2 {
		t.Errorf("REST answers %d %v; %d sessions with the upstream", status, out, sessions.Load())
	}
}
