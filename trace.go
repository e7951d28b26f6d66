package interlock

import (
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
)

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
