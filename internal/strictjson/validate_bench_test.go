package strictjson

import (
	"testing"
)

// BenchmarkCheck compares the two ways a call's arguments are checked
// against a typical tool schema: the compiled fast path, and jsonschema-go,
// which checks every schema the fast path does not cover. The fast path
// stays only while it pays (BENCHMARKS.md has the figures).
func BenchmarkCheck(b *testing.B) {
	schema := map[string]any{
		"type":     "object",
		"required": []any{"invoice_id", "amount"},
		"properties": map[string]any{
			"invoice_id": map[string]any{"type": "string", "minLength": 1, "maxLength": 64},
			"amount":     map[string]any{"type": "number", "minimum": 0},
			"currency":   map[string]any{"type": "string", "enum": []any{"usd", "eur"}},
			"tags":       map[string]any{"type": "array", "items": map[string]any{"type": "string"}},
		},
		"additionalProperties": false,
	}
	args := map[string]any{"invoice_id": "inv_1001", "amount": 5000.0, "currency": "usd", "tags": []any{"q3", "refund"}}
	fast := compileArgSchema(schema)
	if fast == nil {
		b.Fatal("the fast path does not cover the schema")
	}
	resolved, err := ResolveSchema(schema)
	if err != nil {
		b.Fatal(err)
	}
	// compiled is what a tool gets: the fast path, and the check for
	// arguments that differ from declared ones only in case.
	compiled, err := Compile(schema)
	if err != nil || compiled.twins == nil {
		b.Fatal("the schema does not compile with its declared names", err)
	}
	for _, v := range []struct {
		name string
		v    Validator
	}{{"fast", Validator{fast: fast}}, {"compiled", compiled}, {"jsonschema-go", Validator{schema: resolved}}} {
		b.Run(v.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if issue := v.v.Check(args); issue != nil {
					b.Fatal(issue.Message)
				}
			}
		})
	}
}
