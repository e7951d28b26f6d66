package audit

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"math"
	"slices"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/interlock-mcp/interlock/seal"
)

// FuzzLink: Link stores every record, once bounded, exactly as the
// two-pass Link did (linkTwoPass), so logs written before it verify and go
// on, and the hash it sets is the one ComputeHash finds, in the record and
// in the bytes stored.
func FuzzLink(f *testing.F) {
	f.Add(int64(1), "", "call", "refund_invoice", []byte(`{"invoice_id":"inv_1","amount":12.5}`), 0.42, int64(1_790_000_000_123_456_789), uint8(1))
	f.Add(int64(1_000_000), "3f1c", "naïve <&> \u2028", "a\"b\\c\n", []byte(`{"a":{"z":[1e21,null,{"__m":true}],"B":-0.0}}`), 1e-7, int64(-1), uint8(0xff))
	f.Add(int64(-3), "\xff", "\xc3", "x,y", []byte(`{"\u00e9":"\ud83d\ude00"}`), 0.0, int64(0), uint8(0x2a))
	f.Fuzz(func(t *testing.T, seq int64, prev, s1, s2 string, args []byte, latency float64, nanos int64, flags uint8) {
		r := &Record{Time: time.Unix(0, nanos), Event: s1, Client: s1, Detail: s2, Tool: s2, Summary: s1, LatencyMS: latency}
		if flags&1 != 0 {
			r.Hints = &Hints{ReadOnly: flags&2 != 0, Destructive: flags&4 != 0}
		}
		if flags&8 != 0 {
			r.Approvers = strings.Split(s2, ",")
		}
		if flags&16 != 0 {
			r.Time = r.Time.In(time.FixedZone("", (int(flags)-128)*900))
		}
		var a map[string]any
		if json.Unmarshal(args, &a) == nil {
			r.Args = a
			if flags&32 != 0 {
				r.Replaced = map[string]any{"v": a}
			}
			if flags&64 != 0 { // a value encoding/json must decode first
				r.Args = map[string]any{"n": len(s2), "a": a}
			}
		}
		bounded := *r
		boundErr := bounded.bound()
		want, hash, wantErr := linkTwoPass(&bounded, seq, prev)
		if boundErr != nil {
			wantErr = boundErr
		}
		got, err := r.Link(seq, prev)
		if (err != nil) != (wantErr != nil) {
			t.Fatalf("Link: %v; two passes: %v", err, wantErr)
		}
		if err != nil {
			return
		}
		if string(got) != string(want) || r.Hash != hash {
			t.Fatalf("Link stores\n%s\nhash %s; two passes\n%s\nhash %s", got, r.Hash, want, hash)
		}
		if h, err := r.ComputeHash(); err != nil || h != r.Hash {
			t.Fatalf("ComputeHash = %s, %v; Link set %s", h, err, r.Hash)
		}
		// A store gives seq, counting from 1, and prev, a hash: never text
		// from outside.
		if seq < 0 || seq > 1<<53 || !utf8.ValidString(prev) {
			return
		}
		back, err := Decode(got)
		if err != nil {
			t.Fatalf("stored %s does not read back: %v", got, err)
		}
		if h, err := back.ComputeHash(); err != nil || h != r.Hash {
			t.Fatalf("stored %s hashes as %s, %v; Link set %s", got, h, err, r.Hash)
		}
	})
}

// linkTwoPass is Link as it was first written, the reference Link must
// match byte for byte: it builds the JSON object of the record linked
// after prev, encodes it canonically without "hash", hashes that, and
// encodes it again with the hash.
func linkTwoPass(r *Record, seq int64, prev string) (stored []byte, hash string, err error) {
	c := *r
	c.Seq, c.Prev, c.Hash, c.Raw = seq, prev, "", nil
	v, ok := twoPassFields(&c)
	if !ok {
		b, err := c.Encode()
		if err != nil {
			return nil, "", err
		}
		if err := json.Unmarshal(b, &v); err != nil {
			return nil, "", err
		}
	}
	delete(v, "hash")
	canon, err := seal.Canonical(v)
	if err != nil {
		return nil, "", err
	}
	sum := sha256.Sum256(append([]byte("interlock audit v1\n"), canon...))
	v["hash"] = hex.EncodeToString(sum[:])
	stored, err = seal.Canonical(v)
	return stored, v["hash"].(string), err
}

// twoPassFields is the object the two-pass Link built for r without
// encoding it; ok is false when a value of Args or Replaced is not a
// decoded JSON value, and the record's JSON was decoded instead.
func twoPassFields(r *Record) (v map[string]any, ok bool) {
	v = map[string]any{
		"seq": float64(r.Seq), "time": r.Time.UTC().Format(time.RFC3339Nano), "event": r.Event,
		"prev": r.Prev, "hash": r.Hash,
	}
	for _, f := range [...]struct{ k, s string }{{"tenant", r.Tenant}, {"principal", r.Principal}, {"client", r.Client},
		{"session", r.Session}, {"tool", r.Tool}, {"upstream", r.Upstream}, {"rule", r.Rule}, {"mode", r.Mode},
		{"args_digest", r.ArgsDigest}, {"summary", r.Summary}, {"decision", r.Decision}, {"confirmed_by", r.ConfirmedBy},
		{"grant", r.Grant}, {"outcome", r.Outcome}, {"detail", r.Detail}, {"shadow_rule", r.ShadowRule}, {"shadow_mode", r.ShadowMode}} {
		if f.s != "" {
			v[f.k] = f.s
		}
	}
	if len(r.Args) > 0 {
		if !decodedJSON(r.Args) {
			return nil, false
		}
		v["args"] = r.Args
	}
	if len(r.Replaced) > 0 {
		if !decodedJSON(r.Replaced) {
			return nil, false
		}
		v["replaced"] = r.Replaced
	}
	if len(r.Approvers) > 0 {
		list := make([]any, len(r.Approvers))
		for i, a := range r.Approvers {
			list[i] = a
		}
		v["approvers"] = list
	}
	if r.LatencyMS != 0 {
		v["latency_ms"] = r.LatencyMS
	}
	if h := r.Hints; h != nil {
		v["hints"] = map[string]any{"readOnly": h.ReadOnly, "destructive": h.Destructive, "idempotent": h.Idempotent, "openWorld": h.OpenWorld}
	}
	return v, true
}

// decodedJSON reports whether v holds only the types encoding/json decodes
// into an any, with finite numbers.
func decodedJSON(v any) bool {
	switch v := v.(type) {
	case nil, bool, string:
		return true
	case float64:
		return !math.IsNaN(v) && !math.IsInf(v, 0)
	case []any:
		return !slices.ContainsFunc(v, func(e any) bool { return !decodedJSON(e) })
	case map[string]any:
		for _, e := range v {
			if !decodedJSON(e) {
				return false
			}
		}
		return true
	}
	return false
}

// FuzzAuditChain: records whose every field that text from outside
// reaches holds any bytes (tenant, principal, client, session, tool,
// upstream, the keys and values of args and replaced at any depth,
// detail, summary, reason, caller and the rest) link into a chain that
// verifies after each, from the bytes a store keeps; each is stored as
// valid UTF-8 in bounded size, reads back as Link left it, keeps text
// that needed no change as it was, and hashes the same from its JSON as
// `audit export` prints it.
func FuzzAuditChain(f *testing.F) {
	f.Add("acme", "alice", "claude-code/2.1", "/v1/tools/\xff", []byte(`{"id":"acct_9931","n":[1,2.5,null,true]}`), "k\xc0\xaf", uint16(1), uint8(0))
	f.Add("\xed\xa0\x80", "a\x00b", "\x1b[2J\u2028<&>", `\xff`, []byte(`{"\ud800":["\udfff",{"a":null}],"`+"\xff"+`":"`+"\xfe"+`"}`), "\xff", uint16(3000), uint8(0xff))
	f.Add("", "", "", "é", []byte(`[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[1]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]`), "", uint16(40_000), uint8(63))
	f.Fuzz(func(t *testing.T, a, b, c, d string, raw []byte, key string, repeat uint16, flags uint8) {
		ctx := context.Background()
		long := strings.Repeat(d, min(int(repeat), 70_000/max(len(d), 1)))
		var decoded any
		_ = json.Unmarshal(raw, &decoded)
		var deep any = key
		for range flags % 64 {
			deep = []any{map[string]any{key: deep}}
		}
		args := map[string]any{key: decoded, a: b, c: []any{d, map[string]any{b: a}, long}, d: deep}
		recs := []*Record{
			{Event: "auth_refused", Detail: "from " + a + " with " + b + ": " + c + " " + long},
			{Event: "call", Tenant: a, Principal: b, Client: c + "/" + d, Session: d, Tool: a, Upstream: b, Rule: c, Mode: d,
				Args: args, ArgsDigest: key, Summary: long, Decision: b, ConfirmedBy: c, Approvers: []string{a, b, long}, Approval: d,
				Caller: a, RuleApprovers: []string{c, d}, Reason: long + a, Grant: b, Replaced: map[string]any{key: decoded, long: a},
				Outcome: c, Detail: d, ShadowRule: a, ShadowMode: b, Hints: &Hints{Destructive: flags&64 != 0}, LatencyMS: float64(repeat)},
			{Event: a + b, Tool: key, Detail: key + long},
		}
		log := &Memory{}
		for i, r := range recs {
			if err := log.Append(ctx, flags&128 != 0, r); err != nil {
				t.Fatalf("record %d: %v", i+1, err)
			}
			stored := log.stored[i]
			if !utf8.Valid(stored) || len(stored) > 256<<10 {
				t.Fatalf("record %d is stored in %d bytes, UTF-8 %v", i+1, len(stored), utf8.Valid(stored))
			}
			if n, err := Verify(log.Records(ctx, 1)); err != nil || n != int64(i+1) {
				t.Fatalf("after record %d: %d verify, %v\n%s", i+1, n, err, stored)
			}
			back, err := Decode(stored)
			if err != nil {
				t.Fatal(err)
			}
			want, err1 := r.Encode()
			got, err2 := back.Encode()
			if err1 != nil || err2 != nil || string(got) != string(want) {
				t.Fatalf("record %d reads back as\n%s\nLink left\n%s", i+1, got, want)
			}
			exported, err := Decode(want)
			if err != nil {
				t.Fatal(err)
			}
			if h, err := exported.ComputeHash(); err != nil || h != r.Hash {
				t.Fatalf("record %d as exported hashes as %s, %v; Link set %s", i+1, h, err, r.Hash)
			}
			if h, err := r.ComputeHash(); err != nil || h != r.Hash {
				t.Fatalf("record %d, bounded again, hashes as %s, %v; Link set %s", i+1, h, err, r.Hash)
			}
		}
		for _, s := range []struct{ sent, kept string }{{a, recs[1].Tenant}, {b, recs[1].Principal}, {d, recs[1].Session}, {key, recs[2].Tool}} {
			if utf8.ValidString(s.sent) && len(s.sent) <= maxFieldBytes && s.kept != s.sent {
				t.Fatalf("%q, which needed no change, is stored as %q", s.sent, s.kept)
			}
		}
	})
}
