package strictjson

import (
	"encoding/json"
	"reflect"
	"testing"
)

// FuzzDecodeJSON: whatever the strict reader accepts, encoding/json reads as
// the same value.
func FuzzDecodeJSON(f *testing.F) {
	for _, s := range []string{`{"a":[1,"x",null,true,{"b":-2.5e-3}]}`, `"\u00e9"`, `1e21`, `{"a":1,"\u0061":2}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		ours, err := Decode(raw)
		if err != nil {
			if _, ok := err.(*Error); !ok {
				t.Fatalf("refusal %v is not an *Error", err)
			}
			return
		}
		var theirs any
		if err := json.Unmarshal(raw, &theirs); err != nil {
			t.Fatalf("accepted %q, which encoding/json refuses: %v", raw, err)
		}
		if !reflect.DeepEqual(ours, theirs) {
			t.Fatalf("%q reads as %#v, encoding/json %#v", raw, ours, theirs)
		}
	})
}
