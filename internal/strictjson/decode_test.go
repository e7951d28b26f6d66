package strictjson

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
)

func TestDecodeRefusesAmbiguity(t *testing.T) {
	tests := []struct {
		name, in, path, code string
	}{
		{"duplicate key", `{"a":1,"a":2}`, "a", "duplicate_key"},
		{"duplicate key, escaped twin", `{"a":1,"\u0061":2}`, "a", "duplicate_key"},
		{"duplicate key, deep", `{"x":{"y":[{"z":1,"z":1}]}}`, "x.y[0].z", "duplicate_key"},
		{"duplicate key in an array of objects", `{"l":[{},{"k":"v","k":"w"}]}`, "l[1].k", "duplicate_key"},
		{"duplicate odd key is quoted in the path", `{"a b":1,"a b":2}`, `["a b"]`, "duplicate_key"},
		{"invalid UTF-8", "{\"s\":\"\xff\"}", "s", "invalid_utf8"},
		{"invalid UTF-8, truncated sequence", "{\"s\":\"caf\xc3\"}", "s", "invalid_utf8"},
		{"invalid UTF-8 in a key", "{\"\xc0\xaf\":1}", "", "invalid_utf8"},
		{"UTF-8 of a surrogate", "{\"s\":\"\xed\xa0\x80\"}", "s", "invalid_utf8"},
		{"lone high surrogate", `{"s":"\ud800"}`, "s", "lone_surrogate"},
		{"lone high surrogate, other high after", `{"s":"\udbff\udbff"}`, "s", "lone_surrogate"},
		{"lone high surrogate, letter after", `{"s":"\ud800x"}`, "s", "lone_surrogate"},
		{"lone low surrogate", `{"s":"\udc00"}`, "s", "lone_surrogate"},
		{"lone surrogate in a key", `{"\ud800":1}`, "", "lone_surrogate"},
		{"lone surrogate, deep", `{"a":[1,{"b":"\udfff"}]}`, "a[1].b", "lone_surrogate"},
		{"number too long", `{"n":` + strings.Repeat("9", 400000) + `}`, "n", "number_too_long"},
		{"number too long, zeros", `{"n":0.` + strings.Repeat("0", 100) + `1}`, "n", "number_too_long"},
		{"integer beyond float64", `{"n":9007199254740993}`, "n", "number_inexact"},
		{"decimal beyond float64", `{"n":1000.0000000000000001}`, "n", "number_inexact"},
		{"below the smallest float's precision", `{"n":4.9e-324}`, "n", "number_inexact"},
		{"overflow", `{"n":1e400}`, "n", "number_inexact"},
		{"underflow", `{"n":1e-400}`, "n", "number_inexact"},
		{"huge exponent of zero", `{"n":0e99999999999999999999}`, "n", "number_inexact"},
		{"too deep", strings.Repeat(`{"a":`, MaxDepth+1) + "1" + strings.Repeat("}", MaxDepth+1), "", "too_deep"},
		{"too deep, arrays", `{"a":` + strings.Repeat("[", MaxDepth) + strings.Repeat("]", MaxDepth) + "}", "a" + strings.Repeat("[0]", MaxDepth-1), "too_deep"},
		{"trailing data", `{"a":1} {"a":2}`, "", "syntax"},
		{"control character", "{\"s\":\"a\nb\"}", "s", "syntax"},
		{"bad escape", `{"s":"\x41"}`, "s", "syntax"},
		{"leading zero", `{"n":01}`, "", "syntax"},
		{"NaN", `{"n":NaN}`, "n", "syntax"},
		{"single quotes", `{'a':1}`, "", "syntax"},
		{"trailing comma", `{"a":1,}`, "", "syntax"},
		{"unterminated", `{"a":"x`, "a", "syntax"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Decode([]byte(tt.in))
			e, ok := err.(*Error)
			if !ok {
				t.Fatalf("err = %v, want an *Error", err)
			}
			if tt.path != "" && e.Path != tt.path {
				t.Errorf("path = %q, want %q", e.Path, tt.path)
			}
			if e.Code != tt.code {
				t.Errorf("code = %q, want %q", e.Code, tt.code)
			}
			if len(e.Message) > 400 {
				t.Errorf("message of %d bytes quotes too much of the input", len(e.Message))
			}
		})
	}
}

// TestDecodeAgreesWithEncodingJSON: what the strict reader accepts, the
// standard library reads as the same value.
func TestDecodeAgreesWithEncodingJSON(t *testing.T) {
	for _, in := range []string{
		`{}`, `[]`, `null`, `true`, `"x"`, `0`, `-0`, `0.1`, `1e308`, `-1.5e-300`, `5e-324`,
		`9007199254740992`, `1e21`, `100000000000000000000`, `1.0000000000000000000000000000`,
		`{"s":"\ud83d\ude00 \u00e9 \n \" \\ \/ \b \f \r \t \u0000"}`,
		`{"a":[1,2,{"b":[null,false]}],"c":{"d":"é😀"}}`,
		` { "a" : 1 , "b" : [ ] } `,
		`{"":1,"__confirm":true}`,
	} {
		t.Run(in, func(t *testing.T) {
			got, err := Decode([]byte(in))
			if err != nil {
				t.Fatal(err)
			}
			var want any
			if err := json.Unmarshal([]byte(in), &want); err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, want) {
				t.Errorf("Decode = %#v, encoding/json = %#v", got, want)
			}
		})
	}
}

func TestCheck(t *testing.T) {
	if err := Check([]byte(`{"jsonrpc":"2.0","id":1,"params":{"arguments":{"a":1}}}`)); err != nil {
		t.Errorf("valid envelope: %v", err)
	}
	in := `{"params":{"arguments":{"a":1},"arguments":{"a":2}}}`
	err := Check([]byte(in))
	if e, ok := err.(*Error); !ok || e.Path != "params.arguments" || e.Code != "duplicate_key" || e.Offset != strings.LastIndex(in, `"arguments"`) {
		t.Errorf("duplicate arguments: %#v", err)
	}
}
