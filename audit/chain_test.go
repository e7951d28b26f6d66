package audit

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/interlock-mcp/interlock/seal"
)

func TestVerifyChainNamesTheFirstBadRecord(t *testing.T) {
	log := &Memory{}
	for i := range 5 {
		rec := &Record{Event: "call", Tool: "t", LatencyMS: float64(i), Hints: &Hints{Destructive: true}}
		if i == 4 {
			rec = &Record{Event: "shadow_differs", Tool: "t", Rule: "r", Mode: "token", ShadowMode: "deny"}
		}
		if err := log.Append(context.Background(), false, rec); err != nil {
			t.Fatal(err)
		}
	}
	edit := func(i int, from, to string) *Memory {
		c := &Memory{stored: append([][]byte(nil), log.stored...)}
		c.stored[i] = []byte(strings.Replace(string(c.stored[i]), from, to, 1))
		return c
	}
	drop := &Memory{stored: append(append([][]byte(nil), log.stored[:2]...), log.stored[3:]...)}
	swap := &Memory{stored: append([][]byte(nil), log.stored...)}
	swap.stored[1], swap.stored[2] = swap.stored[2], swap.stored[1]
	tests := []struct {
		name string
		log  *Memory
		seq  int64
	}{
		{"edited", edit(3, `"tool":"t"`, `"tool":"u"`), 4},
		{"member added", edit(1, `"tool":"t"`, `"tool":"t","x":1`), 2},
		{"deleted", drop, 3},
		{"reordered", swap, 2},
		{"not JSON", edit(0, `{`, `[`), 1},
		{"hints edited", edit(2, `"readOnly":false`, `"readOnly":true`), 3},
		{"hints removed", edit(1, `"hints":{"destructive":true,"idempotent":false,"openWorld":false,"readOnly":false},`, ``), 2},
		{"shadow decision edited", edit(4, `"shadow_mode":"deny"`, `"shadow_mode":"allow"`), 5},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Verify(tt.log.Records(context.Background(), 1))
			var ce *ChainError
			if !errors.As(err, &ce) || ce.Seq != tt.seq {
				t.Errorf("err = %v, want a break at %d", err, tt.seq)
			}
		})
	}
	if n, err := Verify(log.Records(context.Background(), 1)); n != 5 || err != nil {
		t.Errorf("intact log: %d, %v", n, err)
	}
	// A record written before records kept hints (its hash computed then)
	// verifies still, and a chain goes on from it.
	old := &Memory{stored: [][]byte{[]byte(`{"args":{"amount":20,"invoice_id":"inv_1"},"event":"call",` +
		`"hash":"8b51dcaccfad1bc839c0210558e2e7ea326671ddc3da0e2d4124e6cd8af9a105","mode":"token","prev":"","rule":"refunds",` +
		`"seq":1,"time":"2026-11-23T03:04:05Z","tool":"refund_invoice"}`)}, prev: "8b51dcaccfad1bc839c0210558e2e7ea326671ddc3da0e2d4124e6cd8af9a105"}
	if err := old.Append(context.Background(), false, &Record{Event: "call", Tool: "t", Hints: &Hints{ReadOnly: true}}); err != nil {
		t.Fatal(err)
	}
	if n, err := Verify(old.Records(context.Background(), 1)); n != 2 || err != nil {
		t.Errorf("a log begun before hints were kept: %d, %v", n, err)
	}
}

// TestRecordFieldsMatchTheirJSON: the canonical form a record is hashed
// over, written member by member, is the canonical form of the object its
// JSON decodes to, for records of every shape and for one with every field
// set (a field added to Record and not written fails it); so the hash
// of a record as written equals the hash recomputed from its stored bytes.
func TestRecordFieldsMatchTheirJSON(t *testing.T) {
	at := time.Date(2026, 11, 23, 3, 4, 5, 123456000, time.FixedZone("CET", 3600))
	tests := []struct {
		name string
		rec  *Record
	}{
		{"bare", &Record{Event: "call", Time: at}},
		{"call", &Record{Seq: 12345678, Time: at, Event: "call", Tenant: "acme", Principal: "alice", Client: "c/1", Session: "s", Tool: "t",
			Upstream: "u", Rule: "r", Mode: "token", Args: map[string]any{"a": 1.5, "b": []any{"x", nil, true, map[string]any{"c": -0.0}}},
			ArgsDigest: "d", Summary: "Refund <b>&</b> \\u2028", Decision: DecisionConfirmed, ConfirmedBy: "approval",
			Approvers: []string{"bob", "group:finance"}, Grant: "grt_1", Replaced: map[string]any{"env": "production"},
			Outcome: OutcomeOK, LatencyMS: 0.001, Detail: "x", Prev: "abc", Hints: &Hints{ReadOnly: true, OpenWorld: true}}},
		{"shadow", &Record{Seq: 2, Event: "shadow_differs", Time: at, Tool: "t", Rule: "r", Mode: "token", ShadowRule: "s", ShadowMode: "deny", Hints: &Hints{}}},
		{"event", &Record{Seq: 1, Event: "auth_refused", Time: at, LatencyMS: 1e21, Detail: "GET /metrics from 127.0.0.1:1 with no API key"}},
		{"every field", everyField(t, at)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			direct, _, err := tt.rec.appendCanonical(nil)
			if err != nil {
				t.Fatal(err)
			}
			b, err := tt.rec.Encode()
			if err != nil {
				t.Fatal(err)
			}
			var viaJSON map[string]any
			if err := json.Unmarshal(b, &viaJSON); err != nil {
				t.Fatal(err)
			}
			delete(viaJSON, "hash")
			if c, err := seal.Canonical(viaJSON); err != nil || string(direct) != string(c) {
				t.Errorf("\ndirect %s\n  json %s %v", direct, c, err)
			}
		})
	}
	// A value encoding/json would not decode to is hashed as it reads back.
	asInt, _, err1 := (&Record{Args: map[string]any{"n": 1}}).appendCanonical(nil)
	asFloat, _, err2 := (&Record{Args: map[string]any{"n": 1.0}}).appendCanonical(nil)
	if err1 != nil || err2 != nil || string(asInt) != string(asFloat) {
		t.Errorf("an int argument: %s %v; as decoded JSON: %s %v", asInt, err1, asFloat, err2)
	}
}

// everyField returns a record with every field that encodes set to a
// value that is not empty.
func everyField(t *testing.T, at time.Time) *Record {
	r := &Record{}
	v := reflect.ValueOf(r).Elem()
	for i := range v.NumField() {
		f, sf := v.Field(i), v.Type().Field(i)
		if sf.Tag.Get("json") == "-" {
			continue
		}
		switch {
		case f.Type() == reflect.TypeFor[time.Time]():
			f.Set(reflect.ValueOf(at))
		case f.Kind() == reflect.String:
			f.SetString(sf.Name)
		case f.Kind() == reflect.Int64:
			f.SetInt(7)
		case f.Kind() == reflect.Float64:
			f.SetFloat(0.5)
		case f.Kind() == reflect.Slice:
			f.Set(reflect.MakeSlice(f.Type(), 1, 1))
		case f.Kind() == reflect.Map:
			m := reflect.MakeMap(f.Type())
			m.SetMapIndex(reflect.ValueOf("k"), reflect.Zero(f.Type().Elem()))
			f.Set(m)
		case f.Kind() == reflect.Pointer:
			f.Set(reflect.New(f.Type().Elem()))
		default:
			t.Fatalf("Record.%s: give everyField a value of %s", sf.Name, f.Type())
		}
	}
	return r
}

// linkCase is a record linked after prev as record seq, and the bytes
// stored for it.
type linkCase struct {
	name string
	rec  *Record
	seq  int64
	prev string
	want string
}

// linkCases are records of every shape, with the bytes Link stores for
// each, as it wrote them when it canonicalized a record twice: existing
// logs hold these bytes, so they must never change.
func linkCases() []linkCase {
	at := time.Date(2026, 11, 23, 3, 4, 5, 123456000, time.FixedZone("CET", 3600))
	type custom struct {
		A int    `json:"a"`
		B string `json:"b,omitempty"`
	}
	return []linkCase{
		{"only what every record has", &Record{Event: "call"}, 1, "", `{"event":"call","hash":"347ad44fb1cc9ea2268778a87d2297b4ab539f2aab2d691ae49caf5b3a84ab9e","prev":"","seq":1,"time":"0001-01-01T00:00:00Z"}`},
		{"an empty event", &Record{}, 2, "00", `{"event":"","hash":"15b0fde96afe3443330338f20d4180e22c633a8b7756e031e14f163dedc66a11","prev":"00","seq":2,"time":"0001-01-01T00:00:00Z"}`},
		{"every field", &Record{Time: at, Event: "call", Tenant: "acme", Principal: "alice", Client: "c/1", Session: "s", Tool: "t",
			Upstream: "u", Rule: "r", Mode: "token", Args: map[string]any{"a": 1.5, "b": []any{"x", nil, true, map[string]any{"c": -0.0}}},
			ArgsDigest: "d", Summary: "Refund <b>&</b> \\u2028", Decision: DecisionConfirmed, ConfirmedBy: "approval",
			Approvers: []string{"bob", "group:finance"}, Grant: "grt_1", Replaced: map[string]any{"env": "production"},
			Outcome: OutcomeOK, LatencyMS: 0.001, Detail: "x", Hints: &Hints{ReadOnly: true, OpenWorld: true},
			ShadowRule: "sr", ShadowMode: "deny"}, 12345678, "abc", `{"approvers":["bob","group:finance"],"args":{"a":1.5,"b":["x",null,true,{"c":0}]},"args_digest":"d","client":"c/1","confirmed_by":"approval","decision":"confirmed","detail":"x","event":"call","grant":"grt_1","hash":"90638a0cbead44952d46ce1496e7402eccb1bcd7ab88854c7b58b377c8e2c12c","hints":{"destructive":false,"idempotent":false,"openWorld":true,"readOnly":true},"latency_ms":0.001,"mode":"token","outcome":"ok","prev":"abc","principal":"alice","replaced":{"env":"production"},"rule":"r","seq":1.2345678e+07,"session":"s","shadow_mode":"deny","shadow_rule":"sr","summary":"Refund \u003cb\u003e\u0026\u003c/b\u003e \\u2028","tenant":"acme","time":"2026-11-23T02:04:05.123456Z","tool":"t","upstream":"u"}`},
		{"only fields before hash", &Record{Event: "e", Approvers: []string{"a"}, Args: map[string]any{"k": "v"}, ArgsDigest: "d",
			Client: "c", ConfirmedBy: "token", Decision: "asked", Detail: "x", Grant: "g"}, 3, "p", `{"approvers":["a"],"args":{"k":"v"},"args_digest":"d","client":"c","confirmed_by":"token","decision":"asked","detail":"x","event":"e","grant":"g","hash":"f2a6c95dc95eac5f73d0c049d00f9fd58c877d8ad0d5a5f0061d55c298c6c7e4","prev":"p","seq":3,"time":"0001-01-01T00:00:00Z"}`},
		{"only fields after hash", &Record{Time: at, Event: "call", Hints: &Hints{Destructive: true}, LatencyMS: 3, Mode: "m", Outcome: "o",
			Principal: "p", Replaced: map[string]any{"r": 1.0}, Rule: "r", Session: "s", ShadowMode: "deny", ShadowRule: "x",
			Summary: "s", Tenant: "t", Tool: "t", Upstream: "u"}, 4, "p", `{"event":"call","hash":"7965b89eb3cb7092e38d00a3afdbc1ceda7862333ff98e1707422842797a14c5","hints":{"destructive":true,"idempotent":false,"openWorld":false,"readOnly":false},"latency_ms":3,"mode":"m","outcome":"o","prev":"p","principal":"p","replaced":{"r":1},"rule":"r","seq":4,"session":"s","shadow_mode":"deny","shadow_rule":"x","summary":"s","tenant":"t","time":"2026-11-23T02:04:05.123456Z","tool":"t","upstream":"u"}`},
		{"empty optional fields", &Record{Event: "call", Args: map[string]any{}, Approvers: []string{}, Replaced: map[string]any{},
			Hints: &Hints{}, LatencyMS: math.Copysign(0, -1)}, 5, "", `{"event":"call","hash":"b14b1e37231b44e16284d1ed5392594a13b5ef6bbda175848ca2cdcd76f4499c","hints":{"destructive":false,"idempotent":false,"openWorld":false,"readOnly":false},"prev":"","seq":5,"time":"0001-01-01T00:00:00Z"}`},
		{"unicode and escapes", &Record{Event: "call", Tool: "naïve_€", Summary: "line\nbreak\t\"quoted\" \\ \u2028\u2029 <a&b> \x01 😀",
			Detail: "Ünïcödé", Args: map[string]any{"é": "ü", "z": "\u2028", "A": "<&>", "\u00e9t\u00e9": "\u00e8", "😀": "a\"b"}}, 6, "", `{"args":{"A":"\u003c\u0026\u003e","z":"\u2028","é":"ü","été":"è","😀":"a\"b"},"detail":"Ünïcödé","event":"call","hash":"dcc16f54a7695939937939783889b524adbe7fdabc1dd5ad30942b1fe8cb85ce","prev":"","seq":6,"summary":"line\nbreak\t\"quoted\" \\ \u2028\u2029 \u003ca\u0026b\u003e \u0001 😀","time":"0001-01-01T00:00:00Z","tool":"naïve_€"}`},
		// Bytes that are not UTF-8 are stored as the text \xNN, which
		// reads back as written (encoding/json would write \ufffd, which
		// reads back as the character itself and failed verification).
		{"invalid UTF-8, escaped", &Record{Event: "auth_refused", Detail: "GET /\xff\xfe", Args: map[string]any{"\xff": "\xc3"}}, 7, "", `{"args":{"\\xff":"\\xc3"},"detail":"GET /\\xff\\xfe","event":"auth_refused","hash":"b856caf6edc3f7f1b3239cc3b03c049c337c8a10027ce4b26d5a25fe997722f2","prev":"","seq":7,"time":"0001-01-01T00:00:00Z"}`},
		{"nested args", &Record{Event: "call", Args: map[string]any{
			"list":  []any{1.0, -2.5, 1e21, 1e-7, 0.1, 123456789.0, []any{}, map[string]any{}, nil, false},
			"obj":   map[string]any{"z": map[string]any{"y": []any{map[string]any{"b": 1.0, "a": 2.0}}}, "B": true, "a": nil},
			"__raw": "nested meta-like keys are kept", "empty": "", "big": 9007199254740993.0},
			Replaced: map[string]any{"to": map[string]any{"env": []any{"prod", "staging"}}}}, 8, "", `{"args":{"__raw":"nested meta-like keys are kept","big":9.007199254740992e+15,"empty":"","list":[1,-2.5,1e+21,1e-07,0.1,1.23456789e+08,[],{},null,false],"obj":{"B":true,"a":null,"z":{"y":[{"a":2,"b":1}]}}},"event":"call","hash":"8c3973197c12a80cd227bafb7e38b8b6d0eca9be7fdc54f2385e6f480fe264d3","prev":"","replaced":{"to":{"env":["prod","staging"]}},"seq":8,"time":"0001-01-01T00:00:00Z"}`},
		{"values encoding/json must decode first", &Record{Time: at, Event: "call", Args: map[string]any{"n": 1, "list": []string{"a", "b"},
			"s": custom{A: 2}, "m": map[string]int{"x": 3}, "f": float32(0.1), "raw": json.RawMessage(`{"b":1,"a":[1e2]}`)},
			Replaced: map[string]any{"n": int64(7)}, Detail: "slow path"}, 9, "", `{"args":{"f":0.1,"list":["a","b"],"m":{"x":3},"n":1,"raw":{"a":[100],"b":1},"s":{"a":2}},"detail":"slow path","event":"call","hash":"3fc0fb4b44f06d791164a03a413092bdcfb4be1baa7e7cfc1d15ae918227e51d","prev":"","replaced":{"n":7},"seq":9,"time":"2026-11-23T02:04:05.123456Z"}`},
		{"a stale hash and raw bytes are ignored", &Record{Event: "call", Tool: "t", Hash: "stale", Prev: "old", Seq: 99,
			Raw: json.RawMessage(`{"event":"other"}`)}, 10, "new", `{"event":"call","hash":"5abdaceeb36cbaf96029efed4d124f241a65db107bbd14b71a647e3908d0a045","prev":"new","seq":10,"time":"0001-01-01T00:00:00Z","tool":"t"}`},
		{"numbers: seq and latency", &Record{Event: "call", LatencyMS: 123456.789}, 1000000, "", `{"event":"call","hash":"634c8b0c71b8caba8cb4deed20d17efa94e5d466cd257e4e3dfcc9b6667505b7","latency_ms":123456.789,"prev":"","seq":1e+06,"time":"0001-01-01T00:00:00Z"}`},
		{"a seq past 2^53", &Record{Event: "call", LatencyMS: 1e21}, 1<<53 + 1, "", `{"event":"call","hash":"bd46928d93d82c8261c5d1ef57b4fe1856decb816ab49fdde1b8357c33c83313","latency_ms":1e+21,"prev":"","seq":9.007199254740992e+15,"time":"0001-01-01T00:00:00Z"}`},
		{"a year past 9999", &Record{Event: "call", Time: time.Date(10000, 1, 1, 0, 0, 0, 1, time.UTC)}, 11, "", `{"event":"call","hash":"bbaa70ba7bf5152bbfb1bf5b056fdff9dc0796bb9b22f8ef52eadc392e8fbcad","prev":"","seq":11,"time":"10000-01-01T00:00:00.000000001Z"}`},
		{"a DEL, which encoding/json writes as it is", &Record{Event: "call", Tool: "del\x7f"}, 13, "", "{\"event\":\"call\",\"hash\":\"bd87a4d598e11d75bcd9e1b713a8d56cbe1ef395af70d674e3b67ae0130b8d8f\",\"prev\":\"\",\"seq\":13,\"time\":\"0001-01-01T00:00:00Z\",\"tool\":\"del\x7f\"}"},
		{"a time before 1970 with an offset", &Record{Event: "call", Time: time.Date(1969, 7, 20, 20, 17, 40, 0, time.FixedZone("", -5*3600))}, 12, "", `{"event":"call","hash":"57be631871eef738d389a0f29c786f59eb8768e7d9065689a764eab0b11cccf4","prev":"","seq":12,"time":"1969-07-21T01:17:40Z"}`},
	}
}

// TestLinkKeepsItsBytes: Link stores each record as it always has, and
// its hash is the one in those bytes.
func TestLinkKeepsItsBytes(t *testing.T) {
	for _, tt := range linkCases() {
		t.Run(tt.name, func(t *testing.T) {
			got, err := tt.rec.Link(tt.seq, tt.prev)
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != tt.want {
				t.Errorf("stored\n got %s\nwant %s", got, tt.want)
			}
			if ref, _, err := linkTwoPass(tt.rec, tt.seq, tt.prev); err != nil || string(ref) != tt.want {
				t.Errorf("the reference for FuzzLink stores\n%s %v", ref, err)
			}
			var want struct {
				Hash string `json:"hash"`
			}
			if err := json.Unmarshal([]byte(tt.want), &want); err != nil {
				t.Fatal(err)
			}
			if r := tt.rec; r.Hash != want.Hash || r.Seq != tt.seq || r.Prev != tt.prev || r.Raw != nil {
				t.Errorf("linked as %d %q after %q, raw %q; want %d %q after %q", r.Seq, r.Hash, r.Prev, r.Raw, tt.seq, want.Hash, tt.prev)
			}
		})
	}
}

// TestLargeSequenceNumbersReadBack: the canonical form spells record
// 1,000,000 "1e+06"; such a record reads back with its number and its
// hash, and a seq that is no sequence number is refused as edited.
func TestLargeSequenceNumbersReadBack(t *testing.T) {
	for _, seq := range []int64{999_999, 1_000_000, 1_000_001, 123_456_789, 1 << 40} {
		t.Run(strconv.FormatInt(seq, 10), func(t *testing.T) {
			stored, err := (&Record{Event: "call", Tool: "t"}).Link(seq, "prev")
			if err != nil {
				t.Fatal(err)
			}
			r, err := Decode(stored)
			if err != nil {
				t.Fatalf("%s: %v", stored, err)
			}
			h, err := r.ComputeHash()
			if r.Seq != seq || err != nil || h != r.Hash {
				t.Errorf("read back seq %d, hash %s (%v), want %d, %s", r.Seq, h, err, seq, r.Hash)
			}
		})
	}
	for _, bad := range []string{`1.5`, `-1`, `1e300`, `"7"`} {
		t.Run("seq "+bad, func(t *testing.T) {
			if _, err := Decode([]byte(`{"event":"call","seq":` + bad + `}`)); !errors.Is(err, ErrUnreadable) {
				t.Errorf("err = %v, want ErrUnreadable", err)
			}
		})
	}
}

// TestAddedMembersBreakTheHash: a member added to a stored record, whatever
// its name, makes the record read as edited.
func TestAddedMembersBreakTheHash(t *testing.T) {
	stored, err := (&Record{Event: "call", Tool: "t", Args: map[string]any{"__nested": 1.0}}).Link(1, "")
	if err != nil {
		t.Fatal(err)
	}
	for _, member := range []string{`"__confirm":true`, `"x":1`, `"_meta":{}`} {
		t.Run(member, func(t *testing.T) {
			r, err := Decode([]byte(`{` + member + `,` + string(stored[1:])))
			if err != nil {
				t.Fatal(err)
			}
			if h, err := r.ComputeHash(); err != nil || h == r.Hash {
				t.Errorf("a record with %s added still hashes as written (%v)", member, err)
			}
		})
	}
	r, err := Decode(stored)
	if err != nil {
		t.Fatal(err)
	}
	if h, err := r.ComputeHash(); err != nil || h != r.Hash {
		t.Errorf("the record as written does not hash as written: %s %v", h, err)
	}
}

// TestOutsideTextKeepsTheChainWhole: whatever bytes reach a string field
// of a record, it is stored as valid UTF-8, a bad byte as the text \xNN,
// cut to its bound with a note of how much was cut; it reads back as Link
// left it in the record, and the chain verifies.
func TestOutsideTextKeepsTheChainWhole(t *testing.T) {
	variants := []struct{ name, s string }{
		{"plain", "refund_invoice"},
		{"a byte that is not UTF-8", "a\xffb"},
		{"an overlong slash", "/\xc0\xaf/"},
		{"a surrogate in UTF-8", "\xed\xa0\x80"},
		{"a character cut short", "caf\xc3"},
		{"the replacement character", "\ufffd"},
		{"NUL", "a\x00b"},
		{"controls, separators and JSON's specials", "\x1b[2J\x7f\u2028\u2029<&>\"\\\b\f\n\r\t"},
		{"text that looks escaped", `\xff`},
		{"60 KB", strings.Repeat("a", 60_000)},
		{"60 KB of bad bytes", strings.Repeat("\xff", 60_000)},
		{"bad bytes around the cut", strings.Repeat("a", 1000) + strings.Repeat("\xfe", 100)},
		{"a long run of characters of three bytes", strings.Repeat("€", 2000)},
		{"4 KiB and one", strings.Repeat("x", 4<<10+1)},
	}
	limits := map[string]int{"Summary": maxTextBytes, "Reason": maxTextBytes}
	log := &Memory{}
	rt := reflect.TypeFor[Record]()
	for i := range rt.NumField() {
		sf := rt.Field(i)
		if sf.Type.Kind() != reflect.String || sf.Name == "Prev" || sf.Name == "Hash" {
			continue
		}
		limit := cmp.Or(limits[sf.Name], maxFieldBytes)
		for _, v := range append(variants, struct{ name, s string }{"at the limit", strings.Repeat("b", limit)},
			struct{ name, s string }{"one past the limit", strings.Repeat("b", limit+1)}) {
			t.Run(sf.Name+"/"+v.name, func(t *testing.T) {
				r := &Record{Event: "call"}
				reflect.ValueOf(r).Elem().Field(i).SetString(v.s)
				if err := log.Append(context.Background(), false, r); err != nil {
					t.Fatal(err)
				}
				got := reflect.ValueOf(r).Elem().Field(i).String()
				checkBounded(t, v.s, got, limit)
				stored := log.stored[len(log.stored)-1]
				back, err := Decode(stored)
				if err != nil || !utf8.Valid(stored) {
					t.Fatalf("stored %q (UTF-8 %v) reads back: %v", stored, utf8.Valid(stored), err)
				}
				if b := reflect.ValueOf(back).Elem().Field(i).String(); b != got {
					t.Errorf("reads back as %q, Link left %q", b, got)
				}
				if h, err := back.ComputeHash(); err != nil || h != r.Hash {
					t.Errorf("stored bytes hash as %s (%v), Link set %s", h, err, r.Hash)
				}
			})
		}
	}
	if n, err := Verify(log.Records(context.Background(), 1)); err != nil || n != int64(len(log.stored)) {
		t.Errorf("verify: %d of %d, %v", n, len(log.stored), err)
	}
}

// cutNoteRE finds the note that ends a string that was cut.
var cutNoteRE = regexp.MustCompile(`…\[cut (\d+) bytes\]$`)

// checkBounded checks that got is what a field holding sent holds once
// bounded to limit bytes: sent with bad bytes escaped, whole when that
// fits, else its start and a note of how many bytes of sent were cut.
func checkBounded(t *testing.T, sent, got string, limit int) {
	t.Helper()
	var esc strings.Builder
	for i := 0; i < len(sent); {
		r, n := utf8.DecodeRuneInString(sent[i:])
		if r == utf8.RuneError && n == 1 {
			fmt.Fprintf(&esc, `\x%02x`, sent[i])
		} else {
			esc.WriteString(sent[i : i+n])
		}
		i += n
	}
	if !utf8.ValidString(got) || len(got) > limit {
		t.Fatalf("%d bytes, UTF-8 %v: %q", len(got), utf8.ValidString(got), got)
	}
	if esc.Len() <= limit {
		if got != esc.String() {
			t.Errorf("%q is stored as %q, want %q", sent, got, esc.String())
		}
		return
	}
	m := cutNoteRE.FindStringSubmatch(got)
	if m == nil {
		t.Fatalf("%d bytes are stored as %d with no note of the cut: %q", len(sent), len(got), got[max(len(got)-40, 0):])
	}
	kept := strings.TrimSuffix(got, m[0])
	if !strings.HasPrefix(esc.String(), kept) || len(kept) < limit-100 {
		t.Errorf("kept %d bytes that do not begin what was sent", len(kept))
	}
	// How many bytes of sent the kept text stands for.
	from, n := 0, 0
	for n < len(kept) {
		r, w := utf8.DecodeRuneInString(sent[from:])
		if r == utf8.RuneError && w == 1 {
			n += 4
		} else {
			n += w
		}
		from += w
	}
	if cut, _ := strconv.Atoi(m[1]); cut != len(sent)-from {
		t.Errorf("the note says %d bytes were cut, %d were", cut, len(sent)-from)
	}
}

// TestArgumentsAreBounded: arguments of any shape, and the values a human
// replaced, are stored valid UTF-8 at every depth, keys too, with each
// string, the nesting and the whole bounded; the record reads back as Link
// left it, the caller's map is untouched, and the chain verifies.
func TestArgumentsAreBounded(t *testing.T) {
	var fromJSON map[string]any
	if err := json.Unmarshal([]byte(`{"\ud800":"\udfff lone","pair":"\ud83d\ude00","bad":"`+"\xff"+`"}`), &fromJSON); err != nil {
		t.Fatal(err)
	}
	nested := func(depth int) map[string]any {
		var v any = "bottom"
		for i := range depth {
			if i%2 == 0 {
				v = []any{v}
			} else {
				v = map[string]any{"k": v}
			}
		}
		return map[string]any{"deep": v}
	}
	many := map[string]any{}
	for i := range 2000 {
		many[fmt.Sprintf("key%04d", i)] = strings.Repeat("v", 100)
	}
	bigList := make([]any, 5000)
	for i := range bigList {
		bigList[i] = "yyyyyyyyyy"
	}
	tests := []struct {
		name string
		args map[string]any
		// want is the args stored, when the case says exactly; holds is
		// text their canonical form must hold.
		want  map[string]any
		holds string
	}{
		{"bad bytes in a key and a value", map[string]any{"\xff": "\xc0\xaf"}, map[string]any{`\xff`: `\xc0\xaf`}, ""},
		{"bad bytes nested", map[string]any{"a": []any{map[string]any{"\xfe": []any{"\xed\xa0\x80", 1.0, nil, true}}}},
			map[string]any{"a": []any{map[string]any{`\xfe`: []any{`\xed\xa0\x80`, 1.0, nil, true}}}}, ""},
		{"lone surrogates as JSON escapes", fromJSON, map[string]any{"\ufffd": "\ufffd lone", "pair": "😀", "bad": "\ufffd"}, ""},
		{"NUL and controls", map[string]any{"a\x00": "\x00\x1b\u2028"}, map[string]any{"a\x00": "\x00\x1b\u2028"}, ""},
		{"keys equal once escaped", map[string]any{"\xff": 1.0, `\xff`: 2.0, `\xff~2`: 3.0},
			map[string]any{`\xff`: 2.0, `\xff~2`: 3.0, `\xff~3`: 1.0}, ""},
		{"a 60 KB value", map[string]any{"q": strings.Repeat("s", 60_000)}, nil, `s…[cut 55938 bytes]"}`},
		{"a 60 KB key", map[string]any{strings.Repeat("k", 60_000): 1.0}, nil, `k…[cut 59778 bytes]":1}`},
		{"2000 members", many, nil, `,"…":"[cut 1711 arguments, 193343 bytes]"}`},
		{"one member too large", map[string]any{"a": "x", "big": bigList, "z": 1.0}, map[string]any{"a": "x", "big": "…[cut 65001 bytes]", "z": 1.0}, ""},
		{"nested 100 deep", nested(100), nil, `[{"k":"…[cut: nested deeper than 32]"}]`},
		{"nested 5000 deep", nested(5000), nil, `[{"k":"…[cut: nested deeper than 32]"}]`},
		{"values of Go types", map[string]any{"n": 1, "s": struct{ A string }{"\xff"}, "l": []string{"\xfe"}},
			map[string]any{"n": 1.0, "s": map[string]any{"A": "\ufffd"}, "l": []any{"\ufffd"}}, ""},
	}
	log := &Memory{}
	for _, tt := range tests {
		for _, field := range []string{"args", "replaced"} {
			t.Run(tt.name+"/"+field, func(t *testing.T) {
				before := fmt.Sprintf("%#v", tt.args)
				r := &Record{Event: "call", Tool: "t"}
				if field == "args" {
					r.Args = tt.args
				} else {
					r.Replaced = tt.args
				}
				if err := log.Append(context.Background(), false, r); err != nil {
					t.Fatal(err)
				}
				if fmt.Sprintf("%#v", tt.args) != before {
					t.Error("bounding changed the caller's map")
				}
				got := r.Args
				if field == "replaced" {
					got = r.Replaced
				}
				if tt.want != nil && !reflect.DeepEqual(got, tt.want) {
					t.Errorf("stored %#v, want %#v", got, tt.want)
				}
				canon, err := seal.AppendValue(nil, got)
				if err != nil || len(canon) > maxArgsBytes || !utf8.Valid(canon) {
					t.Errorf("%d bytes, UTF-8 %v, %v", len(canon), utf8.Valid(canon), err)
				}
				if !strings.Contains(string(canon), tt.holds) {
					t.Errorf("stored %s…, which lacks %s", canon[:min(len(canon), 200)], tt.holds)
				}
				if d := depthOf(got); d > maxArgsDepth {
					t.Errorf("nested %d deep", d)
				}
				back, err := Decode(log.stored[len(log.stored)-1])
				if err != nil {
					t.Fatal(err)
				}
				if b := back.Args; !reflect.DeepEqual(b, got) && !reflect.DeepEqual(back.Replaced, got) {
					t.Error("the stored record reads back with other arguments than Link left")
				}
				again := *r
				if err := again.bound(); err != nil || !reflect.DeepEqual(again.Args, r.Args) || !reflect.DeepEqual(again.Replaced, r.Replaced) {
					t.Errorf("bounding again changes the arguments (%v)", err)
				}
			})
		}
	}
	if n, err := Verify(log.Records(context.Background(), 1)); err != nil || n != int64(len(log.stored)) {
		t.Errorf("verify: %d of %d, %v", n, len(log.stored), err)
	}
}

// depthOf is how deep v nests, v itself at 1.
func depthOf(v any) int {
	d := 0
	switch v := v.(type) {
	case []any:
		for _, e := range v {
			d = max(d, depthOf(e))
		}
	case map[string]any:
		for _, e := range v {
			d = max(d, depthOf(e))
		}
	default:
		return 0
	}
	return d + 1
}

// TestRecordsHaveABoundedSize: a record with every field that takes text
// from outside at its worst is stored in a bounded size, and verifies.
func TestRecordsHaveABoundedSize(t *testing.T) {
	huge := strings.Repeat("\xff", 100_000)
	r := everyField(t, time.Now())
	v := reflect.ValueOf(r).Elem()
	for i := range v.NumField() {
		if f := v.Field(i); f.Kind() == reflect.String && v.Type().Field(i).Name != "Prev" {
			f.SetString(huge)
		}
	}
	names := make([]string, 1000)
	for i := range names {
		names[i] = huge
	}
	wide := map[string]any{}
	for i := range 300 {
		wide[strconv.Itoa(i)+huge[:300]] = huge
	}
	r.Approvers, r.RuleApprovers, r.Args, r.Replaced = names, names, wide, wide
	log := &Memory{}
	if err := log.Append(context.Background(), false, r); err != nil {
		t.Fatal(err)
	}
	if n := len(log.stored[0]); n > 256<<10 {
		t.Errorf("a record is stored in %d bytes", n)
	}
	if len(r.Approvers) != maxListLen || r.Approvers[maxListLen-1] != "…[cut 937 names]" {
		t.Errorf("%d approvers, the last %q", len(r.Approvers), r.Approvers[len(r.Approvers)-1])
	}
	if _, err := Verify(log.Records(context.Background(), 1)); err != nil {
		t.Error(err)
	}
}
