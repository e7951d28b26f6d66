package interlock

import (
	"context"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// TracerName names the gate's spans' instrumentation scope.
const TracerName = "github.com/interlock-mcp/interlock"

// GlobalTracer returns OpenTelemetry's global tracer for the gate, for
// [GateOptions.Tracer] once a program has installed a tracer provider.
func GlobalTracer() trace.Tracer { return otel.Tracer(TracerName) }

// traceContext is the W3C Trace Context propagator: traceparent and
// tracestate, in HTTP headers and in an MCP request's _meta alike.
var traceContext = propagation.TraceContext{}

// metaCarrier adapts a request's _meta to the propagator.
type metaCarrier map[string]any

func (m metaCarrier) Get(key string) string {
	s, _ := m[key].(string)
	return s
}

func (m metaCarrier) Set(key, value string) { m[key] = value }

func (m metaCarrier) Keys() []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	return keys
}

// TraceFromMeta returns ctx continuing the trace whose context an MCP
// request carries in _meta (traceparent, tracestate), unless ctx is in a
// trace already (one taken from the HTTP headers).
func TraceFromMeta(ctx context.Context, meta map[string]any) context.Context {
	if _, ok := meta["traceparent"]; !ok || trace.SpanContextFromContext(ctx).IsValid() {
		return ctx
	}
	return traceContext.Extract(ctx, metaCarrier(meta))
}

// TraceToMeta writes the trace context of ctx into meta, for a request
// the gateway sends on to an upstream.
func TraceToMeta(ctx context.Context, meta map[string]any) {
	traceContext.Inject(ctx, metaCarrier(meta))
}

// TraceToHeaders writes the trace context of ctx into HTTP headers.
func TraceToHeaders(ctx context.Context, h propagation.HeaderCarrier) {
	traceContext.Inject(ctx, h)
}

// TraceFromHeaders returns ctx continuing the trace of HTTP headers.
func TraceFromHeaders(ctx context.Context, h propagation.HeaderCarrier) context.Context {
	return traceContext.Extract(ctx, h)
}

// endSpan closes a call's span with what the audit record says of it.
func endSpan(span trace.Span, decision, outcome, confirmedBy string) {
	span.SetAttributes(
		attribute.String("interlock.decision", decision),
		attribute.String("interlock.outcome", outcome),
	)
	if confirmedBy != "" {
		span.SetAttributes(attribute.String("interlock.confirmed_by", confirmedBy))
	}
	// Refusals are the gate working; only failures are span errors.
	if Code(outcome).ServerSide() {
		span.SetStatus(codes.Error, outcome)
	}
	span.End()
}
