package seal

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"
)

// FuzzCanonical: the canonical form of any decoded object is JSON that
// reads back as the same value less its meta-arguments, and is its own
// canonical form.
func FuzzCanonical(f *testing.F) {
	for _, s := range []string{`{"b":[1,0.5,"x"],"a":{"d":null,"c":true}}`, `{"__confirm":true,"n":1e21}`, `{"s":"\u2028<>&"}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		var v map[string]any
		if json.Unmarshal(raw, &v) != nil || v == nil {
			return
		}
		c, err := Canonical(v)
		if err != nil {
			t.Fatalf("Canonical: %v", err)
		}
		var back map[string]any
		if err := json.Unmarshal(c, &back); err != nil {
			t.Fatalf("canonical form %q is not JSON: %v", c, err)
		}
		for k := range v {
			if strings.HasPrefix(k, MetaPrefix) {
				delete(v, k)
			}
		}
		if !reflect.DeepEqual(back, v) {
			t.Fatalf("canonical form %q reads as %#v, want %#v", c, back, v)
		}
		again, _ := Canonical(back)
		if string(again) != string(c) {
			t.Fatalf("canonical form is not stable: %q then %q", c, again)
		}
	})
}

// FuzzOpen: no text opens unless it is exactly the token the key sealed.
func FuzzOpen(f *testing.F) {
	s, _ := New(keyA)
	now := time.UnixMilli(1_790_000_000_000)
	f.Add(s.Seal(Claims{Kind: KindConfirm, Tenant: "acme", Principal: "alice", Tool: "t", IssuedAt: now, Expires: now, Payload: []byte("p")}))
	f.Add(Prefix + "AAAA")
	f.Add("")
	f.Fuzz(func(t *testing.T, token string) {
		c, err := s.Open(token)
		if err != nil {
			return
		}
		if again := s.Seal(c); again != token {
			t.Fatalf("%q opened, but its claims seal as %q", token, again)
		}
	})
}

// FuzzWriteString: every string is written exactly as encoding/json writes
// it, so canonical forms (and the audit chain's hashes) stay what they were
// before plain strings took a shorter path.
func FuzzWriteString(f *testing.F) {
	for _, s := range []string{"", "refund_invoice", "a\"b", `c:\dir`, "<script>&", "\u2028", "\x7f", "\xff", "naïve"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got := AppendString([]byte("x"), s)
		want, _ := json.Marshal(s)
		if string(got) != "x"+string(want) {
			t.Fatalf("AppendString(%q) = %s, encoding/json writes %s", s, got[1:], want)
		}
	})
}
