package interlock

import (
	"testing"
)

func TestValidateArgs(t *testing.T) {
	schema, err := resolveSchema(map[string]any{
		"type": "object",
		"properties": map[string]any{
			"id":     map[string]any{"type": "string"},
			"amount": map[string]any{"type": "number", "minimum": 0},
			"to":     map[string]any{"type": "string", "enum": []any{"free", "pro"}},
			"owner": map[string]any{"type": "object", "properties": map[string]any{
				"email": map[string]any{"type": "string"},
			}},
			"tags": map[string]any{"type": "array", "items": map[string]any{"type": "string"}},
		},
		"required":             []any{"id"},
		"additionalProperties": false,
	})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name     string
		args     map[string]any
		wantPath string // "" means valid
		wantCode string
	}{
		{name: "valid", args: map[string]any{"id": "a", "amount": 3.0}},
		{name: "wrong type", args: map[string]any{"id": 5.0}, wantPath: "id", wantCode: "type"},
		{name: "missing required", args: map[string]any{}, wantPath: "id", wantCode: "required"},
		{name: "unknown argument", args: map[string]any{"id": "a", "zzz": 1.0}, wantPath: "zzz", wantCode: "additional_properties"},
		{name: "nested", args: map[string]any{"id": "a", "owner": map[string]any{"email": 7.0}}, wantPath: "owner.email", wantCode: "type"},
		{name: "array item", args: map[string]any{"id": "a", "tags": []any{"x", 1.0}}, wantPath: "tags[]", wantCode: "type"},
		{name: "enum", args: map[string]any{"id": "a", "to": "gold"}, wantPath: "to", wantCode: "enum"},
		{name: "minimum", args: map[string]any{"id": "a", "amount": -1.0}, wantPath: "amount", wantCode: "minimum"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := validateArgs("tool", schema, tt.args)
			if tt.wantPath == "" {
				if err != nil {
					t.Fatalf("unexpected error: %v", err)
				}
				return
			}
			e, ok := err.(*Error)
			if !ok || e.Code != CodeValidationFailed {
				t.Fatalf("err = %v, want VALIDATION_FAILED", err)
			}
			issue := e.ValidationIssues[0]
			if issue.Path != tt.wantPath || issue.Code != tt.wantCode {
				t.Errorf("issue = %+v, want path %q code %q", issue, tt.wantPath, tt.wantCode)
			}
			if issue.Message == "" || e.Hint == "" {
				t.Errorf("issue %+v / hint %q must say what to fix", issue, e.Hint)
			}
		})
	}
}
