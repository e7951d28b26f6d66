package interlock

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/interlock-mcp/interlock/exchange"
	"go.opentelemetry.io/otel"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/interlock-mcp/interlock/tracing"
)

// TestTraceContinuesFromMeta: a call whose _meta carries a traceparent gets
// spans in that trace, and the tool sees the run span's context to pass on.
func TestTraceContinuesFromMeta(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	prev := otel.GetTracerProvider()
	otel.SetTracerProvider(tp)
	t.Cleanup(func() { otel.SetTracerProvider(prev) })

	const traceID = "4bf92f3577b34da6a3ce929d0e0e4736"
	g := newGate(t, fixedPolicy{d: Decision{Mode: ModeAllow}}, &GateOptions{Getenv: env("false"), Logger: quiet, Tracer: tracing.GlobalTracer()})
	tool := testTool(t)
	var passed map[string]any
	req := &mcp.CallToolRequest{Params: &mcp.CallToolParamsRaw{Name: tool.Name, Arguments: json.RawMessage(`{"customer_id":"a"}`),
		Meta: mcp.Meta{"traceparent": "00-" + traceID + "-00f067aa0ba902b7-01"}}}
	g.CallRequestWith(context.Background(), tool, req, exchange.Via(req, nil), func(ctx context.Context, _ json.RawMessage) (*mcp.CallToolResult, error) {
		passed = map[string]any{}
		tracing.ToMeta(ctx, passed)
		return &mcp.CallToolResult{Content: []mcp.Content{}}, nil
	})
	spans := rec.Ended()
	if len(spans) != 2 {
		t.Fatalf("%d spans, want the gate's and the run's", len(spans))
	}
	for _, s := range spans {
		if s.SpanContext().TraceID().String() != traceID {
			t.Errorf("span %s is in trace %s", s.Name(), s.SpanContext().TraceID())
		}
	}
	run := spans[0]
	if run.Name() != "interlock.run" || run.SpanKind() != trace.SpanKindClient {
		t.Errorf("first span ended: %s", run.Name())
	}
	want := "00-" + traceID + "-" + run.SpanContext().SpanID().String() + "-01"
	if passed["traceparent"] != want {
		t.Errorf("the tool passes on %v, want %s", passed["traceparent"], want)
	}
	attrs := map[string]string{}
	for _, a := range spans[1].Attributes() {
		attrs[string(a.Key)] = a.Value.Emit()
	}
	if attrs["interlock.decision"] != "allowed" || attrs["interlock.outcome"] != "ok" || attrs["interlock.mode"] != "allow" {
		t.Errorf("gate span attributes = %v", attrs)
	}
}
