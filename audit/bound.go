package audit

import (
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strconv"
	"unicode/utf8"

	"github.com/interlock-mcp/interlock/seal"
)

// What text from outside may contribute to one record. Anyone who reaches
// the gateway can have a record written (a refused request is one), and a
// chain is never pruned, so every string is bounded, and so are the
// arguments as a whole; what is cut says so. The chain's own fields (seq,
// time, prev, hash) are never cut.
const (
	// maxFieldBytes bounds each string field: a name, an id, a detail
	// (which holds a request's path).
	maxFieldBytes = 1 << 10
	// maxTextBytes bounds prose a human was shown or wrote: the summary,
	// an approver's reason.
	maxTextBytes = 4 << 10
	// maxListLen bounds the names of approvers and rule_approvers.
	maxListLen = 64
	// maxArgBytes bounds each string in args and replaced, and
	// maxArgKeyBytes each key of an object in them.
	maxArgBytes    = 4 << 10
	maxArgKeyBytes = 256
	// maxArgsBytes bounds the canonical form of args, and of replaced, as a
	// whole; maxArgsDepth how deep their objects and arrays nest, the
	// object itself at depth 1.
	maxArgsBytes = 32 << 10
	maxArgsDepth = 32
)

// bound makes every string of r valid UTF-8 and cuts what is too long to
// the limits above, in place. It runs before every hash: a string that is
// not UTF-8 is written by encoding/json with \ufffd for each bad byte,
// which reads back as the character U+FFFD and so hashes differently, and
// the record would fail verification. A bad byte becomes the text \xff
// instead, so what was sent can still be read. bound is idempotent, and
// changes no map or slice of the caller's: a value that must change is
// replaced by a new one.
func (r *Record) bound() error {
	for _, f := range [...]struct {
		s     *string
		limit int
	}{
		{&r.Event, maxFieldBytes}, {&r.Tenant, maxFieldBytes}, {&r.Principal, maxFieldBytes}, {&r.Client, maxFieldBytes},
		{&r.Session, maxFieldBytes}, {&r.Tool, maxFieldBytes}, {&r.Upstream, maxFieldBytes}, {&r.Rule, maxFieldBytes},
		{&r.Mode, maxFieldBytes}, {&r.ArgsDigest, maxFieldBytes}, {&r.Summary, maxTextBytes}, {&r.Decision, maxFieldBytes},
		{&r.ConfirmedBy, maxFieldBytes}, {&r.Approval, maxFieldBytes}, {&r.Caller, maxFieldBytes}, {&r.Reason, maxTextBytes},
		{&r.Grant, maxFieldBytes}, {&r.Outcome, maxFieldBytes}, {&r.Detail, maxFieldBytes}, {&r.ShadowRule, maxFieldBytes},
		{&r.ShadowMode, maxFieldBytes},
	} {
		*f.s = boundString(*f.s, f.limit)
	}
	r.Approvers, r.RuleApprovers = boundList(r.Approvers), boundList(r.RuleApprovers)
	var err error
	if r.Args, err = boundArgs(r.Args); err != nil {
		return fmt.Errorf("audit: encoding record %d: args: %w", r.Seq, err)
	}
	if r.Replaced, err = boundArgs(r.Replaced); err != nil {
		return fmt.Errorf("audit: encoding record %d: replaced: %w", r.Seq, err)
	}
	return nil
}

// cutNote ends what was cut: "…[cut 59000 bytes]".
func cutNote(n int, what string) string { return "…[cut " + strconv.Itoa(n) + " " + what + "]" }

// cutReserve is room for the longest note boundString appends.
var cutReserve = len(cutNote(math.MaxInt, "bytes"))

// boundString returns s with each byte that is not part of valid UTF-8
// written as the text \xNN, cut at a character to at most limit bytes
// with a note of how many bytes of s were cut.
func boundString(s string, limit int) string {
	if len(s) <= limit && utf8.ValidString(s) {
		return s
	}
	size := 0 // of s with its bad bytes escaped
	for i := 0; i < len(s); {
		_, w, n := nextRune(s, i)
		size, i = size+w, i+n
	}
	keep := limit
	if size > limit {
		keep = limit - cutReserve
	}
	b := make([]byte, 0, min(size, limit))
	i := 0
	for i < len(s) {
		bad, w, n := nextRune(s, i)
		if len(b)+w > keep {
			break
		}
		if bad {
			b = append(b, '\\', 'x', hexDigits[s[i]>>4], hexDigits[s[i]&0xf])
		} else {
			b = append(b, s[i:i+n]...)
		}
		i += n
	}
	if i < len(s) {
		b = append(b, cutNote(len(s)-i, "bytes")...)
	}
	return string(b)
}

const hexDigits = "0123456789abcdef"

// nextRune reads the character of s at i: whether it is a bad byte, how
// many bytes it takes once escaped, and how many it takes in s.
func nextRune(s string, i int) (bad bool, w, n int) {
	r, n := utf8.DecodeRuneInString(s[i:])
	if r == utf8.RuneError && n == 1 {
		return true, len(`\xff`), 1
	}
	return false, n, n
}

// boundList bounds each name of a list, and the list to maxListLen names,
// the last of which then says how many more were cut.
func boundList(names []string) []string {
	ok := len(names) <= maxListLen
	for _, n := range names {
		ok = ok && len(n) <= maxFieldBytes && utf8.ValidString(n)
	}
	if ok {
		return names
	}
	out := make([]string, 0, min(len(names), maxListLen))
	for i, n := range names {
		if i == maxListLen-1 && len(names) > maxListLen {
			return append(out, cutNote(len(names)-i, "names"))
		}
		out = append(out, boundString(n, maxFieldBytes))
	}
	return out
}

// boundArgs returns args within the limits: args itself when they are,
// else a copy with each string bounded, each value too deep or of a type
// encoding/json does not decode to made what it reads back as (or a note
// when it is too deep), and, when the whole is still too large, members
// in the order of their keys kept while they fit, the others each
// replaced by a note of their size while notes fit, and the rest counted
// in one last member, "…".
func boundArgs(args map[string]any) (map[string]any, error) {
	size := 0
	if len(args) == 0 || fitsArgs(args, 1, &size) {
		return args, nil
	}
	v, err := boundValue(args, 1)
	if err != nil {
		return nil, err
	}
	m := v.(map[string]any)
	b, err := seal.AppendValue(nil, m)
	if err != nil {
		return nil, err
	}
	if len(b) <= maxArgsBytes {
		return m, nil
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	// The last member takes at most this much: `,"…":"…[cut N arguments, N bytes]"`.
	const lastMember = 80
	out := make(map[string]any)
	room := maxArgsBytes - len("{}") - lastMember
	cut, cutBytes := 0, 0
	for _, k := range keys {
		b = seal.AppendString(b[:0], k)
		key := len(b)
		if b, err = seal.AppendValue(b, m[k]); err != nil {
			return nil, err
		}
		member := len(b) + 2 // ':' and ','
		if member <= room {
			out[k], room = m[k], room-member
			continue
		}
		note := cutNote(len(b)-key, "bytes")
		if n := len(seal.AppendString(seal.AppendString(b[:0], k), note)) + 2; n <= room {
			out[k], room = note, room-n
			continue
		}
		cut, cutBytes = cut+1, cutBytes+member
	}
	if cut > 0 {
		out[uniqueKey(out, "…")] = "[cut " + strconv.Itoa(cut) + " arguments, " + strconv.Itoa(cutBytes) + " bytes]"
	}
	return out, nil
}

// fitsArgs reports whether v, at depth, is a decoded JSON value within the
// limits, adding the size of its canonical form to *size; it stops, false,
// once *size passes maxArgsBytes.
func fitsArgs(v any, depth int, size *int) bool {
	switch v := v.(type) {
	case nil:
		*size += len("null")
	case bool:
		*size += len(strconv.FormatBool(v))
	case float64:
		var buf [32]byte
		*size += len(strconv.AppendFloat(buf[:0], v, 'g', -1, 64))
	case string:
		if len(v) > maxArgBytes || !utf8.ValidString(v) {
			return false
		}
		*size += jsonStringLen(v)
	case []any:
		if depth > maxArgsDepth {
			return false
		}
		*size += len("[]") + max(len(v)-1, 0)
		for _, e := range v {
			if !fitsArgs(e, depth+1, size) {
				return false
			}
		}
	case map[string]any:
		if depth > maxArgsDepth {
			return false
		}
		*size += len("{}") + max(len(v)-1, 0)
		for k, e := range v {
			if len(k) > maxArgKeyBytes || !utf8.ValidString(k) {
				return false
			}
			*size += jsonStringLen(k) + len(":")
			if !fitsArgs(e, depth+1, size) {
				return false
			}
		}
	default:
		return false
	}
	return *size <= maxArgsBytes
}

// jsonStringLen is the length of valid UTF-8 s as seal.AppendString
// writes it, quoted and escaped as encoding/json escapes it.
func jsonStringLen(s string) int {
	n := len(`""`)
	for _, r := range s {
		switch {
		case r == '"' || r == '\\' || r == '\b' || r == '\f' || r == '\n' || r == '\r' || r == '\t':
			n += 2
		case r < 0x20 || r == '<' || r == '>' || r == '&' || r == '\u2028' || r == '\u2029':
			n += len(`\u0000`)
		default:
			n += utf8.RuneLen(r)
		}
	}
	return n
}

// tooDeep stands for a value nested deeper than maxArgsDepth.
var tooDeep = "…[cut: nested deeper than " + strconv.Itoa(maxArgsDepth) + "]"

// boundValue returns v, at depth, as a decoded JSON value within the
// per-value limits of boundArgs.
func boundValue(v any, depth int) (any, error) {
	switch v := v.(type) {
	case nil, bool, float64:
		return v, nil
	case string:
		return boundString(v, maxArgBytes), nil
	case []any:
		if depth > maxArgsDepth {
			return tooDeep, nil
		}
		out := make([]any, len(v))
		for i, e := range v {
			var err error
			if out[i], err = boundValue(e, depth+1); err != nil {
				return nil, err
			}
		}
		return out, nil
	case map[string]any:
		if depth > maxArgsDepth {
			return tooDeep, nil
		}
		keys := make([]string, 0, len(v))
		for k := range v {
			keys = append(keys, k)
		}
		// Keys made equal by bounding are told apart in the order of the
		// keys they were, so the copy does not depend on map order.
		slices.Sort(keys)
		out := make(map[string]any, len(v))
		for _, k := range keys {
			e, err := boundValue(v[k], depth+1)
			if err != nil {
				return nil, err
			}
			out[uniqueKey(out, boundString(k, maxArgKeyBytes))] = e
		}
		return out, nil
	}
	// A value of a type encoding/json does not decode into an any (an
	// int, a struct) is kept as its JSON reads back.
	b, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	var decoded any
	if err := json.Unmarshal(b, &decoded); err != nil {
		return nil, err
	}
	return boundValue(decoded, depth)
}

// uniqueKey returns k, or when m holds it already, k (cut to leave room)
// with the first suffix "~2", "~3", … that m does not hold.
func uniqueKey(m map[string]any, k string) string {
	if _, taken := m[k]; !taken {
		return k
	}
	base := boundString(k, maxArgKeyBytes-len("~")-20)
	for i := 2; ; i++ {
		c := base + "~" + strconv.Itoa(i)
		if _, taken := m[c]; !taken {
			return c
		}
	}
}
