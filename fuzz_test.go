package interlock

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"github.com/interlock-mcp/interlock/internal/strictjson"
	"github.com/interlock-mcp/interlock/seal"
)

// FuzzSplitArgs checks the property the gate rests on: for any raw
// arguments it accepts, what the tool receives decodes, in the gate's
// reader and in encoding/json alike, to exactly the value that was decided
// and digested, with no meta-argument in it.
func FuzzSplitArgs(f *testing.F) {
	for _, s := range []string{
		`{"id":"acct_9931"}`, `{"id":"a","__confirm":true}`, `{"\u005f_confirm":true,"n":1.50}`,
		`{"a":{"b":[1,2,{"__c":null}]},"__confirm_token":"ilt1_x"}`, `{"s":"\ud83d\ude00\u00e9\n"}`,
		`{"a":1,"a":2}`, `{"s":"\ud800"}`, `{"n":1e400}`, `{"n":-0.0e-0}`, `null`, ``, `[]`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		p, err := splitArgs(raw)
		if err != nil {
			if ErrorCode(err) != CodeValidationFailed {
				t.Fatalf("refusal %v is not VALIDATION_FAILED", err)
			}
			return
		}
		for k := range p.args {
			if strings.HasPrefix(k, metaPrefix) {
				t.Fatalf("meta-argument %q left in the arguments", k)
			}
		}
		ours, err := strictjson.Decode(p.raw)
		if err != nil {
			t.Fatalf("forwarded %q does not decode: %v", p.raw, err)
		}
		var theirs any
		if err := json.Unmarshal(p.raw, &theirs); err != nil {
			t.Fatalf("encoding/json cannot read forwarded %q: %v", p.raw, err)
		}
		if !reflect.DeepEqual(ours, p.args) || !reflect.DeepEqual(theirs, p.args) {
			t.Fatalf("forwarded %q reads as %#v / %#v, decided %#v", p.raw, ours, theirs, p.args)
		}
		d1, err1 := seal.Digest(p.args)
		d2, err2 := seal.Digest(ours.(map[string]any))
		if err1 != nil || err2 != nil || d1 != d2 {
			t.Fatalf("digests differ: %v %v", err1, err2)
		}
	})
}
