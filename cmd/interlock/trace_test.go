package main

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	coltrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/protobuf/proto"
)

// TestTracesReachOTLP runs serve with an OTLP endpoint (a test collector)
// and a call whose _meta carries a traceparent: the gate's spans arrive, in
// the caller's trace.
func TestTracesReachOTLP(t *testing.T) {
	var mu sync.Mutex
	spans := map[string]string{} // name → trace id
	collector := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		var req coltrace.ExportTraceServiceRequest
		if err := proto.Unmarshal(body, &req); err != nil {
			t.Errorf("collector: %v", err)
		}
		mu.Lock()
		for _, rs := range req.ResourceSpans {
			for _, ss := range rs.ScopeSpans {
				for _, s := range ss.Spans {
					spans[s.Name] = strings.ToLower(hexOf(s.TraceId))
				}
			}
		}
		mu.Unlock()
		w.Header().Set("Content-Type", "application/x-protobuf")
		b, _ := proto.Marshal(&coltrace.ExportTraceServiceResponse{})
		w.Write(b)
	}))
	defer collector.Close()

	cmd := command("false", "serve", "--stdio", "--data", t.TempDir())
	cmd.Env = append(cmd.Env, "OTEL_EXPORTER_OTLP_ENDPOINT="+collector.URL)
	cs := connectClient(t, "traces", &mcp.CommandTransport{Command: cmd})
	const traceID = "4bf92f3577b34da6a3ce929d0e0e4736"
	res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "get_customer", Arguments: map[string]any{"id": "acct_9931"},
		Meta: mcp.Meta{"traceparent": "00-" + traceID + "-00f067aa0ba902b7-01"}})
	if err != nil || res.IsError {
		t.Fatalf("get_customer: %v %+v", err, res)
	}
	cs.Close() // serve exits and flushes its spans
	mu.Lock()
	defer mu.Unlock()
	for _, name := range []string{"interlock.gate get_customer", "interlock.run"} {
		if spans[name] != traceID {
			t.Errorf("span %q: trace %q, want %s (got %v)", name, spans[name], traceID, spans)
		}
	}
}

func hexOf(b []byte) string {
	const digits = "0123456789abcdef"
	out := make([]byte, 0, 2*len(b))
	for _, c := range b {
		out = append(out, digits[c>>4], digits[c&15])
	}
	return string(out)
}
