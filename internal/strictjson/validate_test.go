package strictjson

import (
	"testing"
)

func TestValidateArgs(t *testing.T) {
	raw := map[string]any{
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
	}
	fast, err := Compile(raw)
	if err != nil || fast.fast == nil {
		t.Fatalf("the schema should compile to the fast validator (%v)", err)
	}
	resolved, err := ResolveSchema(raw)
	if err != nil {
		t.Fatal(err)
	}
	// Both validators must tell the same story.
	validators := map[string]Validator{"fast": fast, "jsonschema": {schema: resolved}}
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
	for vname, v := range validators {
		for _, tt := range tests {
			t.Run(vname+"/"+tt.name, func(t *testing.T) {
				issue := v.Check(tt.args)
				if tt.wantPath == "" {
					if issue != nil {
						t.Fatalf("unexpected issue: %+v", issue)
					}
					return
				}
				if issue == nil {
					t.Fatal("no issue")
				}
				if issue.Path != tt.wantPath || issue.Code != tt.wantCode {
					t.Errorf("issue = %+v, want path %q code %q", issue, tt.wantPath, tt.wantCode)
				}
				if issue.Message == "" {
					t.Errorf("issue %+v must say what to fix", issue)
				}
				if (issue.Err != nil) != (vname == "jsonschema") {
					t.Errorf("issue %+v: the cause is jsonschema-go's report, and only its", issue)
				}
			})
		}
	}
}

func TestCompileArgSchemaFallsBack(t *testing.T) {
	tests := []struct {
		name   string
		schema map[string]any
		fast   bool
	}{
		{"simple", map[string]any{"type": "object", "properties": map[string]any{"id": map[string]any{"type": "string", "description": "d"}}}, true},
		{"pattern", map[string]any{"type": "object", "properties": map[string]any{"id": map[string]any{"type": "string", "pattern": "^a"}}}, false},
		{"ref", map[string]any{"type": "object", "properties": map[string]any{"id": map[string]any{"$ref": "#/$defs/x"}}, "$defs": map[string]any{"x": map[string]any{}}}, false},
		{"oneOf", map[string]any{"type": "object", "oneOf": []any{}}, false},
		{"additionalProperties schema", map[string]any{"type": "object", "additionalProperties": map[string]any{"type": "string"}}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := compileArgSchema(tt.schema) != nil; got != tt.fast {
				t.Errorf("fast = %v, want %v", got, tt.fast)
			}
			v, err := Compile(tt.schema)
			if err != nil {
				t.Fatal(err)
			}
			if v.fast == nil && v.schema == nil {
				t.Error("no validator at all")
			}
		})
	}
}

// TestCaseTwins: an argument that is not declared but differs from a
// declared one only in case (by Unicode simple folding, as Go's
// encoding/json matches struct fields) is refused, at the top, in a
// declared object and in the objects of an array, by the fast validator
// and by jsonschema-go's alike; the keys of an object that declares no
// properties are not compared.
func TestCaseTwins(t *testing.T) {
	schema := map[string]any{
		"type": "object",
		"properties": map[string]any{
			"amount": map[string]any{"type": "number"},
			"kind":   map[string]any{"type": "string"},
			"refund": map[string]any{"type": "object", "properties": map[string]any{"amount": map[string]any{"type": "number"}}},
			"env":    map[string]any{"type": "object"},
			"lines": map[string]any{"type": "array", "items": map[string]any{"type": "object",
				"properties": map[string]any{"sku": map[string]any{"type": "string"}}}},
		},
	}
	fast, err := Compile(schema)
	if err != nil || fast.fast == nil {
		t.Fatalf("the schema should compile to the fast validator (%v)", err)
	}
	// A keyword the fast path does not cover sends the schema to jsonschema-go.
	slowSchema := map[string]any{"type": "object", "properties": schema["properties"], "not": map[string]any{"required": []any{"never"}}}
	slow, err := Compile(slowSchema)
	if err != nil || slow.schema == nil {
		t.Fatalf("the schema should compile to jsonschema-go (%v)", err)
	}
	tests := []struct {
		name     string
		args     map[string]any
		wantPath string // "" means valid
	}{
		{"declared names", map[string]any{"amount": 5.0, "kind": "x", "refund": map[string]any{"amount": 1.0}}, ""},
		{"an undeclared name of its own", map[string]any{"amount": 5.0, "note": "x"}, ""},
		{"a twin at the top", map[string]any{"amount": 5.0, "Amount": 5000.0}, "Amount"},
		{"a twin alone", map[string]any{"AMOUNT": 5000.0}, "AMOUNT"},
		{"a twin by the Kelvin sign", map[string]any{"\u212aind": "x"}, "\u212aind"},
		{"a twin in a declared object", map[string]any{"refund": map[string]any{"amount": 1.0, "aMount": 9.0}}, "refund.aMount"},
		{"a map's keys", map[string]any{"env": map[string]any{"HTTP_PROXY": "a", "http_proxy": "b"}}, ""},
		{"declared names in array items", map[string]any{"lines": []any{map[string]any{"sku": "a"}, map[string]any{"sku": "b"}}}, ""},
		{"a twin in an array item", map[string]any{"lines": []any{map[string]any{"sku": "a"}, map[string]any{"SKU": "b"}}}, "lines[].SKU"},
	}
	for vname, v := range map[string]Validator{"fast": fast, "jsonschema": slow} {
		for _, tt := range tests {
			t.Run(vname+"/"+tt.name, func(t *testing.T) {
				issue := v.Check(tt.args)
				switch {
				case tt.wantPath == "" && issue != nil:
					t.Fatalf("unexpected issue: %+v", issue)
				case tt.wantPath != "" && (issue == nil || issue.Path != tt.wantPath || issue.Code != "case_twin"):
					t.Fatalf("issue %+v, want a case_twin at %s", issue, tt.wantPath)
				}
			})
		}
	}
}
