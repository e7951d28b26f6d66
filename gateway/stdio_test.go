package gateway

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// stdioClient serves gw on a pair of pipes and returns the client's ends.
func stdioClient(t *testing.T, gw *Gateway) (io.WriteCloser, io.ReadCloser) {
	t.Helper()
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = gw.ServeStdio(ctx, inR, outW)
		outW.Close()
	}()
	t.Cleanup(func() {
		cancel()
		inW.Close()
		<-done
	})
	return inW, outR
}

// TestStdioLane: over stdio a tools/call takes the lane, questions the
// upstream pushes travel on the stream with the lane's ids, and a
// client's cancellation stops the call.
func TestStdioLane(t *testing.T) {
	f := testConfig(t, "", "fx")
	f.Upstreams[0].Env["INTERLOCK_FIXTURE"] = "legacy"
	gw := start(t, f, "false")
	in, out := stdioClient(t, gw)
	human := &picker{}
	var wire bytes.Buffer
	transport := &mcp.LoggingTransport{Transport: &mcp.IOTransport{Reader: out, Writer: in}, Writer: &lineWriter{w: &wire}}
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "test"}, &mcp.ClientOptions{ElicitationHandler: human.answer}).Connect(
		context.Background(), transport, onSession)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()

	if res := call(t, cs, "exact", map[string]any{}); res.IsError {
		t.Fatalf("exact: %+v", body(t, res))
	}
	res := call(t, cs, "ask_push", map[string]any{})
	if res.IsError || res.Content[0].(*mcp.TextContent).Text != "pushed=accept:blue" {
		t.Fatalf("ask_push: %+v", res)
	}
	got := wire.String()
	if !strings.Contains(got, exactStructure) {
		t.Errorf("the result was not passed verbatim:\n%s", got)
	}
	if !strings.Contains(got, `"id":"interlock-`) {
		t.Errorf("the question did not travel with the lane's id:\n%s", got)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	if _, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "slow", Arguments: map[string]any{"ms": 20000}}); err == nil {
		t.Fatal("a call cancelled by its client returned a result")
	}
	eventually(t, "the cancelled call to end in the gateway", func() bool {
		gw.inFlight.mu.Lock()
		defer gw.inFlight.mu.Unlock()
		return gw.inFlight.n == 0
	})
}

// TestStdioLinesTheLaneLeaves: what the lane does not take reaches the SDK
// as before: a batch, which protocol 2025-11-25 does not allow, and a line
// longer than the lane reads whole.
func TestStdioLinesTheLaneLeaves(t *testing.T) {
	f := testConfig(t, "", "fx")
	f.Policy.MaxArgumentBytes = 4 << 20
	gw := start(t, f, "false")
	in, out := stdioClient(t, gw)
	answers := bufio.NewReader(out)
	send := func(line string) {
		t.Helper()
		if _, err := io.WriteString(in, line+"\n"); err != nil {
			t.Fatal(err)
		}
	}
	read := func() map[string]any {
		t.Helper()
		line, err := answers.ReadBytes('\n')
		if err != nil {
			t.Fatal(err)
		}
		var m map[string]any
		if err := json.Unmarshal(line, &m); err != nil {
			t.Fatalf("%s: %v", line, err)
		}
		return m
	}
	send(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}`)
	if m := read(); m["result"] == nil {
		t.Fatalf("initialize: %v", m)
	}
	send(`{"jsonrpc":"2.0","method":"notifications/initialized","params":{}}`)

	long := strings.Repeat("x", scanBuffer+10)
	send(`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"echo","arguments":{"text":"` + long + `"}}}`)
	m := read()
	res, _ := m["result"].(map[string]any)
	if m["id"] != 2.0 || res == nil || res["isError"] == true || !strings.Contains(string(mustJSON(t, res)), long) {
		t.Errorf("a long line was not served whole")
	}

	// The SDK refuses a batch of this protocol by ending the session.
	send(`[{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"echo","arguments":{}}}]`)
	if line, err := answers.ReadBytes('\n'); err != io.EOF {
		t.Errorf("a batch was answered: %s (%v)", line, err)
	}
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestStdioLaneLatest: a client of 2026-07-28 over stdio, which names its
// protocol in every request, is served on the lane too.
func TestStdioLaneLatest(t *testing.T) {
	gw := start(t, testConfig(t, "", "fx"), "false")
	in, out := stdioClient(t, gw)
	var wire bytes.Buffer
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "test"}, nil).Connect(context.Background(),
		&mcp.LoggingTransport{Transport: &mcp.IOTransport{Reader: out, Writer: in}, Writer: &lineWriter{w: &wire}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	defer func() {
		if t.Failed() {
			t.Log(wire.String())
		}
	}()
	if v := cs.InitializeResult().ProtocolVersion; v != protocolNew {
		t.Fatalf("the client speaks %s", v)
	}
	before := laneServed.Load()
	res := call(t, cs, "echo", map[string]any{"a": 1})
	if res.IsError || res.Content[0].(*mcp.TextContent).Text != `{"a":1}` {
		t.Fatalf("echo: %+v", res)
	}
	if laneServed.Load() != before+1 {
		t.Error("the call did not take the lane")
	}
}
