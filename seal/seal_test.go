package seal

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"math"
	"reflect"
	"strings"
	"testing"
	"time"
)

var (
	keyA = []byte(strings.Repeat("a", MinKeyLength))
	keyB = []byte(strings.Repeat("b", MinKeyLength))
)

func claims(t *testing.T) Claims {
	t.Helper()
	d, err := Digest(decode(t, `{"customer_id":"acct_9931","to":"scale"}`))
	if err != nil {
		t.Fatal(err)
	}
	def, err := DigestValue(map[string]any{"name": "upgrade_plan"})
	if err != nil {
		t.Fatal(err)
	}
	now := time.UnixMilli(1_790_000_000_000)
	return Claims{Kind: KindConfirm, Tenant: "acme", Principal: "alice", Tool: "upgrade_plan",
		Digest: d, Definition: def, IssuedAt: now, Expires: now.Add(time.Minute), Nonce: NewNonce()}
}

// decode reads JSON as the gate's decoder returns it: the values
// encoding/json decodes into an any.
func decode(t testing.TB, s string) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal([]byte(s), &m); err != nil {
		t.Fatal(err)
	}
	if m == nil {
		m = map[string]any{}
	}
	return m
}

func TestRoundTrip(t *testing.T) {
	s, _ := New(keyA)
	c := claims(t)
	token := s.Seal(c)
	if !strings.HasPrefix(token, Prefix) || strings.ContainsAny(token, "+/=") {
		t.Errorf("token %q is not prefixed URL-safe base64", token)
	}
	got, err := s.Open(token)
	if err != nil {
		t.Fatal(err)
	}
	if !got.IssuedAt.Equal(c.IssuedAt) || !got.Expires.Equal(c.Expires) {
		t.Errorf("times: %v %v", got.IssuedAt, got.Expires)
	}
	got.IssuedAt, got.Expires, c.IssuedAt, c.Expires = time.Time{}, time.Time{}, time.Time{}, time.Time{}
	if !reflect.DeepEqual(got, c) {
		t.Errorf("Open = %+v, want %+v", got, c)
	}
	c.Payload = []byte(`{"state":"upstream"}`)
	got, err = s.Open(s.Seal(c))
	if err != nil || string(got.Payload) != string(c.Payload) {
		t.Errorf("payload = %q, %v", got.Payload, err)
	}
}

// TestTampering changes one byte in each field of a sealed token, cuts it
// short, and opens it with the wrong key: each must fail.
func TestTampering(t *testing.T) {
	s, _ := New(keyA)
	c := claims(t)
	token := s.Seal(c)
	raw, _ := base64.RawURLEncoding.DecodeString(strings.TrimPrefix(token, Prefix))
	reseal := func(b []byte) string { return Prefix + base64.RawURLEncoding.EncodeToString(b) }
	flip := func(i int) string {
		b := append([]byte(nil), raw...)
		b[i] ^= 0x01
		return reseal(b)
	}
	tenantAt := headerLen + 2
	principalAt := tenantAt + len(c.Tenant) + 2
	toolAt := principalAt + len(c.Principal) + 2
	other, _ := New(keyB)
	tests := []struct {
		name  string
		token string
		want  error
	}{
		{"version", flip(0), ErrForged},
		{"kind", flip(1), ErrForged},
		{"issued at", flip(5), ErrForged},
		{"expiry", flip(14), ErrForged},
		{"nonce", flip(20), ErrForged},
		{"digest", flip(40), ErrForged},
		{"definition", flip(70), ErrForged},
		{"tenant length", flip(headerLen + 1), ErrForged},
		{"tenant", flip(tenantAt), ErrForged},
		{"principal", flip(principalAt), ErrForged},
		{"tool", flip(toolAt), ErrForged},
		{"payload length", flip(toolAt + len(c.Tool) + 3), ErrForged},
		{"mac", flip(len(raw) - 1), ErrForged},
		{"truncated by one byte", reseal(raw[:len(raw)-1]), ErrForged},
		{"truncated to almost nothing", reseal(raw[:10]), ErrMalformed},
		{"empty", "", ErrMalformed},
		{"wrong prefix", "xyz_" + strings.TrimPrefix(token, Prefix), ErrMalformed},
		{"not base64", Prefix + "!!!", ErrMalformed},
		{"line break inside", token[:20] + "\n" + token[20:], ErrMalformed},
		{"carriage return at the end", token + "\r", ErrMalformed},
		{"padding added", token + "==", ErrMalformed},
		{"sealed under another key", other.Seal(c), ErrForged},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := s.Open(tt.token); !errors.Is(err, tt.want) {
				t.Errorf("Open = %v, want %v", err, tt.want)
			}
		})
	}
}

func TestKeyRotation(t *testing.T) {
	old, _ := New(keyA)
	rotated, _ := New(keyB, keyA)
	c := claims(t)
	if _, err := rotated.Open(old.Seal(c)); err != nil {
		t.Errorf("a token sealed with the old key must open after rotation: %v", err)
	}
	if _, err := old.Open(rotated.Seal(c)); !errors.Is(err, ErrForged) {
		t.Errorf("the new key seals: the old key alone must not open it (%v)", err)
	}
	if _, err := New([]byte("short")); err == nil {
		t.Error("a short key was accepted")
	}
	if keys := ParseKeys(" k1 ,k2,, "); len(keys) != 2 || string(keys[0]) != "k1" {
		t.Errorf("ParseKeys = %q", keys)
	}
}

func TestCanonical(t *testing.T) {
	tests := []struct {
		name string
		a, b string
		same bool
	}{
		{"keys reordered", `{"a":1,"b":{"y":2,"x":3}}`, `{"b":{"x":3,"y":2},"a":1}`, true},
		{"number forms", `{"n":1,"m":0.5,"k":100}`, `{"n":1.0,"m":5e-1,"k":1E2}`, true},
		{"white space", `{ "a" : [1, 2] }`, `{"a":[1,2]}`, true},
		{"escapes", `{"s":"\u00e9\u005f"}`, `{"s":"é_"}`, true},
		{"meta-arguments ignored", `{"a":1,"__confirm_token":"t","__confirm":true}`, `{"a":1}`, true},
		{"empty and null", `{}`, `null`, true},
		{"changed value", `{"to":"scale"}`, `{"to":"pro"}`, false},
		{"added key", `{"a":1}`, `{"a":1,"b":2}`, false},
		{"neighbouring floats", `{"n":0.1}`, `{"n":0.10000000000000002}`, false},
		{"zero and minus zero", `{"n":0}`, `{"n":-0}`, false},
		{"array order matters", `{"a":[1,2]}`, `{"a":[2,1]}`, false},
		{"string is not number", `{"a":"1"}`, `{"a":1}`, false},
		{"null is not absent", `{"a":null}`, `{}`, false},
		{"nested meta key is data", `{"a":{"__x":1}}`, `{"a":{}}`, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			va, vb := decode(t, tt.a), decode(t, tt.b)
			da, err := Digest(va)
			if err != nil {
				t.Fatal(err)
			}
			db, err := Digest(vb)
			if err != nil {
				t.Fatal(err)
			}
			if (da == db) != tt.same {
				ca, _ := Canonical(va)
				cb, _ := Canonical(vb)
				t.Errorf("same = %v, want %v (%s vs %s)", da == db, tt.same, ca, cb)
			}
		})
	}
	for _, bad := range []map[string]any{{"n": math.Inf(1)}, {"n": math.NaN()}, {"c": make(chan int)}, {"x": []any{int64(1)}}} {
		if _, err := Canonical(bad); err == nil {
			t.Errorf("Canonical(%v) succeeded", bad)
		}
	}
	got, _ := Canonical(decode(t, `{"b":0.25,"a":[true,null,"x"],"c":1e21}`))
	if string(got) != `{"a":[true,null,"x"],"b":0.25,"c":1e+21}` {
		t.Errorf("Canonical = %s", got)
	}
}

// TestEveryCharacterCounts alters each character of a token's text in turn,
// to every other base64url character: no variant opens.
func TestEveryCharacterCounts(t *testing.T) {
	s, _ := New(keyA)
	token := s.Seal(claims(t))
	const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
	opened := 0
	for i := len(Prefix); i < len(token); i++ {
		for _, r := range alphabet {
			if byte(r) == token[i] {
				continue
			}
			if _, err := s.Open(token[:i] + string(r) + token[i+1:]); err == nil {
				opened++
				if opened < 5 {
					t.Errorf("token with character %d changed to %q opened", i, r)
				}
			}
		}
	}
	if opened > 0 {
		t.Errorf("%d altered tokens opened", opened)
	}
}

func TestFingerprint(t *testing.T) {
	c := claims(t)
	other := c
	other.Principal = "mallory"
	payload := c
	payload.Payload = []byte("x")
	switch {
	case c.Fingerprint() == other.Fingerprint(), c.Fingerprint() == payload.Fingerprint():
		t.Error("other claims around the same nonce share its fingerprint")
	case !strings.HasPrefix(c.Fingerprint(), c.NonceString()+"."):
		t.Errorf("fingerprint %q does not start with the nonce", c.Fingerprint())
	}
}

func BenchmarkSeal(b *testing.B) {
	s, _ := New(keyA)
	now := time.Now()
	c := Claims{Kind: KindConfirm, Tenant: "acme", Principal: "alice", Tool: "upgrade_plan", IssuedAt: now, Expires: now.Add(time.Minute), Nonce: NewNonce()}
	b.ReportAllocs()
	for b.Loop() {
		s.Seal(c)
	}
}

func BenchmarkOpen(b *testing.B) {
	s, _ := New(keyA)
	now := time.Now()
	token := s.Seal(Claims{Kind: KindConfirm, Tenant: "acme", Principal: "alice", Tool: "upgrade_plan", IssuedAt: now, Expires: now.Add(time.Minute), Nonce: NewNonce()})
	b.ReportAllocs()
	for b.Loop() {
		if _, err := s.Open(token); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkDigest(b *testing.B) {
	args := decode(b, `{"customer_id":"acct_9931","to":"scale","amount":19.5}`)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Digest(args); err != nil {
			b.Fatal(err)
		}
	}
}
