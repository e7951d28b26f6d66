package interlock

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"iter"
	"math"
	"slices"
	"strconv"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/interlock-mcp/interlock/approval"
	"github.com/interlock-mcp/interlock/seal"
)

// AuditRecord is one entry of the audit log: a decision the gate took, the
// outcome of a call, or an event around the gate (a refused API key, an
// upstream restart, hints an upstream tried to loosen). Records form a hash
// chain: each carries the hash of its predecessor, and its own hash covers
// every other field, so an edit, a deletion, an insertion or a reordering
// breaks the chain at the first record it touches (see [VerifyChain]).
type AuditRecord struct {
	Seq  int64     `json:"seq"`
	Time time.Time `json:"time"`
	// Event is "call" for decisions and outcomes of tool calls, or the
	// name of an event: "auth_refused", "upstream_restarted",
	// "hints_loosened", "config_reloaded", "config_rejected".
	Event     string `json:"event"`
	Tenant    string `json:"tenant,omitempty"`
	Principal string `json:"principal,omitempty"`
	// Client is the client's name/version as it introduced itself.
	Client   string `json:"client,omitempty"`
	Session  string `json:"session,omitempty"`
	Tool     string `json:"tool,omitempty"`
	Upstream string `json:"upstream,omitempty"`
	Rule     string `json:"rule,omitempty"`
	Mode     string `json:"mode,omitempty"`
	// Args are the call's arguments, redacted; ArgsDigest is the hex
	// SHA-256 of their canonical form before redaction, the value sealed
	// into confirm tokens.
	Args       map[string]any `json:"args,omitempty"`
	ArgsDigest string         `json:"args_digest,omitempty"`
	// Summary is what a human was shown before confirming.
	Summary string `json:"summary,omitempty"`
	// Decision is one of the Decision* constants.
	Decision string `json:"decision,omitempty"`
	// ConfirmedBy says which key confirmed a call that ran: flag, token,
	// elicit, approval (Approvers name who), or relay.
	ConfirmedBy string   `json:"confirmed_by,omitempty"`
	Approvers   []string `json:"approvers,omitempty"`
	// Approval names the approval a record of mode approval concerns;
	// Caller is that approval's caller on the record of an approver's
	// decision, whose Principal is the approver; RuleApprovers are who
	// the rule named as approvers; Reason is the approver's reason.
	Approval      string   `json:"approval,omitempty"`
	Caller        string   `json:"caller,omitempty"`
	RuleApprovers []string `json:"rule_approvers,omitempty"`
	Reason        string   `json:"reason,omitempty"`
	// Grant names the standing grant that confirmed the call.
	Grant string `json:"grant,omitempty"`
	// Replaced holds the values a human's choice replaced, by argument.
	Replaced map[string]any `json:"replaced,omitempty"`
	// Outcome is "ok", or the error code the call ended with (an upstream
	// isError result included); empty on a decision that a later record
	// completes.
	Outcome   string  `json:"outcome,omitempty"`
	LatencyMS float64 `json:"latency_ms,omitempty"`
	// Detail describes an event in words.
	Detail string `json:"detail,omitempty"`
	// Hints are the tool's hints the policy decided on, so that a call can
	// be decided again (interlock replay); absent from records written
	// before they were kept.
	Hints *Hints `json:"hints,omitempty"`
	// ShadowRule and ShadowMode are what the shadow policy decided, on a
	// "shadow_differs" event; Rule and Mode are the live decision.
	ShadowRule string `json:"shadow_rule,omitempty"`
	ShadowMode string `json:"shadow_mode,omitempty"`

	Prev string `json:"prev"`
	Hash string `json:"hash"`

	// Raw is the record as its store holds it, when it was read back: the
	// hash is checked over these bytes, so a member added to a stored
	// record breaks the chain as surely as a changed one.
	Raw json.RawMessage `json:"-"`
}

// Subject is what the rules of who may see the record need to know
// ([approval.MaySee]): the caller whose call it concerns, whom the rule
// named as approvers, and who decided. An approver's decision and a
// grant's events name the caller in Caller, since their Principal is the
// one who acted.
func (r *AuditRecord) Subject() approval.Subject {
	s := approval.Subject{Tenant: r.Tenant, Caller: r.Caller, Approvers: r.RuleApprovers, Deciders: r.Approvers}
	if s.Caller == "" && r.Event == "call" {
		s.Caller = r.Principal
	}
	if r.Event != "call" && r.Principal != "" {
		s.Deciders = append(slices.Clip(s.Deciders), r.Principal)
	}
	return s
}

// The decisions an audit record names.
const (
	DecisionAllowed    = "allowed"
	DecisionDenied     = "denied"
	DecisionPreviewed  = "previewed"
	DecisionAsked      = "asked"
	DecisionConfirmed  = "confirmed"
	DecisionDeclined   = "declined"
	DecisionCancelled  = "cancelled"
	DecisionExpired    = "expired"
	DecisionInvalid    = "invalid"
	DecisionMismatched = "mismatched"
)

// OutcomeOK is the outcome of a call that ran and did not fail.
const OutcomeOK = "ok"

// AuditLog appends records to a durable, hash-chained log. Package sqlite
// and package postgres implement it.
type AuditLog interface {
	// Append adds records at the end of the chain, in order, setting their
	// Seq, Prev and Hash. It returns once they are committed, so a crash of
	// the process loses none of them; when durable is set, once they are
	// flushed to stable storage as well, so a crash of the machine loses
	// none either.
	Append(ctx context.Context, durable bool, recs ...*AuditRecord) error
}

// AuditReader reads an audit log back, in chain order.
type AuditReader interface {
	// Records yields every record with a sequence number of at least from.
	Records(ctx context.Context, from int64) iter.Seq2[*AuditRecord, error]
}

// genesis is the Prev of the first record.
const genesis = ""

// Link sets r's place in the chain after prev (the hash of the record
// before it, or "" for the first) and returns the record as a store keeps
// it: its canonical form, hash included. The hash is computed over the
// same canonical form without the hash, as [AuditRecord.ComputeHash]
// recomputes it from the stored bytes. The record is encoded once: the
// hash member is inserted where it sorts into the form that was hashed.
//
// Every record is bounded here, before it is hashed: its text is made
// valid UTF-8 and cut to size (see bound), in r itself, so that r holds
// what is stored.
func (r *AuditRecord) Link(seq int64, prev string) ([]byte, error) {
	r.Seq, r.Prev, r.Hash, r.Raw = seq, prev, "", nil
	if err := r.bound(); err != nil {
		return nil, err
	}
	b, at, err := r.appendMembers(append(make([]byte, 0, 1024), hashPrefix...))
	if err != nil {
		return nil, fmt.Errorf("audit: encoding record %d: %w", r.Seq, err)
	}
	h := chainHash(b)
	r.Hash = string(h[:])
	var m [len(`,"hash":""`) + len(h)]byte
	member := append(append(append(m[:0], `,"hash":"`...), h[:]...), '"')
	return slices.Insert(b[len(hashPrefix):], at-len(hashPrefix), member...), nil
}

// hashPrefix starts what a record's hash covers, so that it is the hash of
// nothing but an audit record.
const hashPrefix = "interlock audit v1\n"

// chainHash returns the hex SHA-256 of b, a canonical record after
// hashPrefix.
func chainHash(b []byte) [2 * sha256.Size]byte {
	sum := sha256.Sum256(b)
	var h [2 * sha256.Size]byte
	hex.Encode(h[:], sum[:])
	return h
}

// appendCanonical appends the canonical form of r, bounded as Link bounds
// it, without its "hash" member to b, and returns the offset in b at which
// that member belongs. r itself is left as it is.
func (r *AuditRecord) appendCanonical(b []byte) ([]byte, int, error) {
	c := *r
	if err := c.bound(); err != nil {
		return nil, 0, err
	}
	out, at, err := c.appendMembers(b)
	if err != nil {
		return nil, 0, fmt.Errorf("audit: encoding record %d: %w", r.Seq, err)
	}
	return out, at, nil
}

// appendMembers writes r's canonical form without "hash" straight from its
// fields, in the order of their keys: the members encoding/json writes
// (omitempty ones only when set), holding what it would decode them to
// (numbers as float64), so no object is built. r must be bounded (see
// [AuditRecord.bound]); it fails on a number with no JSON form.
func (r *AuditRecord) appendMembers(b []byte) ([]byte, int, error) {
	m := members{b: append(b, '{')}
	var err error
	m.str("approval", r.Approval)
	m.list("approvers", r.Approvers)
	if len(r.Args) > 0 {
		m.key("args")
		if m.b, err = seal.AppendValue(m.b, r.Args); err != nil {
			return nil, 0, err
		}
	}
	m.strs([]strMember{{"args_digest", r.ArgsDigest}, {"caller", r.Caller}, {"client", r.Client}, {"confirmed_by", r.ConfirmedBy},
		{"decision", r.Decision}, {"detail", r.Detail}})
	m.key("event")
	m.b = seal.AppendString(m.b, r.Event)
	m.str("grant", r.Grant)
	// "hash" sorts here, after "event" and before "prev", which every
	// record has: its member goes in as `,"hash":"…"`.
	at := len(m.b)
	if h := r.Hints; h != nil {
		m.key("hints")
		o := members{b: append(m.b, '{')}
		o.boolean("destructive", h.Destructive)
		o.boolean("idempotent", h.Idempotent)
		o.boolean("openWorld", h.OpenWorld)
		o.boolean("readOnly", h.ReadOnly)
		m.b = append(o.b, '}')
	}
	if r.LatencyMS != 0 {
		m.key("latency_ms")
		if m.b, err = seal.AppendNumber(m.b, r.LatencyMS); err != nil {
			return nil, 0, err
		}
	}
	m.strs([]strMember{{"mode", r.Mode}, {"outcome", r.Outcome}})
	m.key("prev")
	m.b = seal.AppendString(m.b, r.Prev)
	m.strs([]strMember{{"principal", r.Principal}, {"reason", r.Reason}})
	if len(r.Replaced) > 0 {
		m.key("replaced")
		if m.b, err = seal.AppendValue(m.b, r.Replaced); err != nil {
			return nil, 0, err
		}
	}
	m.str("rule", r.Rule)
	m.list("rule_approvers", r.RuleApprovers)
	m.key("seq")
	m.b, _ = seal.AppendNumber(m.b, float64(r.Seq)) // a finite number always encodes
	m.strs([]strMember{{"session", r.Session}, {"shadow_mode", r.ShadowMode}, {"shadow_rule", r.ShadowRule},
		{"summary", r.Summary}, {"tenant", r.Tenant}})
	m.key("time")
	// A time in RFC 3339 holds no character encoding/json escapes.
	m.b = append(r.Time.UTC().AppendFormat(append(m.b, '"'), time.RFC3339Nano), '"')
	m.strs([]strMember{{"tool", r.Tool}, {"upstream", r.Upstream}})
	return append(m.b, '}'), at, nil
}

// members writes the members of a JSON object after its "{".
type members struct {
	b []byte
	n int
}

func (m *members) key(k string) {
	if m.n > 0 {
		m.b = append(m.b, ',')
	}
	m.n++
	m.b = seal.AppendString(m.b, k)
	m.b = append(m.b, ':')
}

// str writes a string member that is left out when empty.
func (m *members) str(k, v string) {
	if v != "" {
		m.key(k)
		m.b = seal.AppendString(m.b, v)
	}
}

// list writes a member whose value is a list of strings, left out when
// empty.
func (m *members) list(k string, vs []string) {
	if len(vs) == 0 {
		return
	}
	m.key(k)
	m.b = append(m.b, '[')
	for i, v := range vs {
		if i > 0 {
			m.b = append(m.b, ',')
		}
		m.b = seal.AppendString(m.b, v)
	}
	m.b = append(m.b, ']')
}

// strMember is a string member's key and value.
type strMember struct{ k, v string }

// strs writes string members in order, each left out when empty.
func (m *members) strs(fs []strMember) {
	for _, f := range fs {
		m.str(f.k, f.v)
	}
}

func (m *members) boolean(k string, v bool) {
	m.key(k)
	m.b = strconv.AppendBool(m.b, v)
}

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
func (r *AuditRecord) bound() error {
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

// ComputeHash returns the hex SHA-256 of the record's canonical encoding:
// its JSON object without the "hash" member, keys sorted at every depth,
// numbers in their shortest form, no insignificant white space (the form
// of package seal's canonical arguments), prefixed by the line
// "interlock audit v1\n". Times are RFC 3339 in UTC with nanoseconds. A
// record read back from a store is hashed over its stored bytes (Raw).
func (r *AuditRecord) ComputeHash() (string, error) {
	if r.Raw == nil {
		b, _, err := r.appendCanonical([]byte(hashPrefix))
		if err != nil {
			return "", err
		}
		h := chainHash(b)
		return string(h[:]), nil
	}
	var v map[string]any
	if err := json.Unmarshal(r.Raw, &v); err != nil {
		return "", fmt.Errorf("audit: record %d is not a JSON object: %w", r.Seq, err)
	}
	delete(v, "hash")
	// Every member counts, even one whose name the seal's form of
	// arguments would leave out (a leading "__"): no record is written
	// with one, so a member added to a stored record changes its hash.
	b, err := seal.AppendValue([]byte(hashPrefix), v)
	if err != nil {
		return "", fmt.Errorf("audit: encoding record %d: %w", r.Seq, err)
	}
	h := chainHash(b)
	return string(h[:]), nil
}

// Encode returns the record's JSON, time in UTC, as `audit tail --json`
// prints it.
func (r *AuditRecord) Encode() ([]byte, error) {
	c := *r
	c.Time = c.Time.UTC()
	return json.Marshal(&c)
}

// ErrUnreadableRecord is the error of a stored record that is not a
// record's JSON.
var ErrUnreadableRecord = errors.New("audit: stored record is not a record")

// DecodeAuditRecord reads a record as a store keeps it, keeping the bytes
// for verification.
func DecodeAuditRecord(b []byte) (*AuditRecord, error) {
	r := &AuditRecord{}
	// The canonical form writes numbers as their shortest spelling, so
	// record 1,000,000 is stored as "seq":1e+06, which encoding/json will
	// not read into an int64: seq is read as a number and checked.
	type fields AuditRecord
	aux := struct {
		*fields
		Seq json.RawMessage `json:"seq"`
	}{fields: (*fields)(r)}
	if err := json.Unmarshal(b, &aux); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrUnreadableRecord, err)
	}
	seq, err := seqOf(aux.Seq)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrUnreadableRecord, err)
	}
	r.Seq = seq
	r.Raw = append(json.RawMessage(nil), b...)
	return r, nil
}

// seqOf reads a stored sequence number: a whole number, not negative, in
// either spelling the canonical form may give it.
func seqOf(raw json.RawMessage) (int64, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return 0, nil
	}
	if i, err := strconv.ParseInt(string(raw), 10, 64); err == nil && i >= 0 {
		return i, nil
	}
	f, err := strconv.ParseFloat(string(raw), 64)
	if err != nil || f != math.Trunc(f) || f < 0 || f > 1<<53 {
		return 0, fmt.Errorf("seq %s is not a sequence number", raw)
	}
	return int64(f), nil
}

// ChainError names the first record at which an audit chain breaks.
type ChainError struct {
	// Seq is the sequence number the record has, or should have had.
	Seq    int64
	Reason string
}

func (e *ChainError) Error() string { return fmt.Sprintf("record %d: %s", e.Seq, e.Reason) }

// VerifyChain reads records in order and checks that they form one
// unbroken chain from the first: consecutive sequence numbers from 1, each
// record's Prev the hash of the one before, and each hash what its fields
// give. It returns how many records verified and, at the first break, a
// [*ChainError].
func VerifyChain(records iter.Seq2[*AuditRecord, error]) (int64, error) {
	var n int64
	prev := genesis
	for r, err := range records {
		if errors.Is(err, ErrUnreadableRecord) {
			return n, &ChainError{Seq: n + 1, Reason: "was edited: " + err.Error()}
		}
		if err != nil {
			return n, err
		}
		want := n + 1
		switch {
		case r.Seq != want:
			return n, &ChainError{Seq: want, Reason: fmt.Sprintf("missing or out of order: found record %d where %d belongs", r.Seq, want)}
		case r.Prev != prev:
			return n, &ChainError{Seq: r.Seq, Reason: "does not follow its predecessor (prev hash differs): a record before it was deleted, inserted or changed"}
		}
		h, err := r.ComputeHash()
		if err != nil {
			return n, &ChainError{Seq: r.Seq, Reason: err.Error()}
		}
		if h != r.Hash {
			return n, &ChainError{Seq: r.Seq, Reason: "was edited: its hash does not match its contents"}
		}
		prev = r.Hash
		n++
	}
	return n, nil
}

// GroupCommit batches appends for an audit store: one goroutine commits
// every record waiting at the time in one transaction, so concurrent
// callers share the cost of a commit (and of a flush, when any of them
// needs one).
type GroupCommit struct {
	requests chan *commitRequest
	commit   func(ctx context.Context, durable bool, recs []*AuditRecord) error
	done     chan struct{}

	mu     sync.RWMutex
	closed bool
}

type commitRequest struct {
	recs    []*AuditRecord
	durable bool
	result  chan error
}

// maxBatch bounds the records of one transaction.
const maxBatch = 256

// NewGroupCommit starts the committing goroutine. commit writes a batch in
// one transaction and returns only once it is committed (and flushed when
// durable is set).
func NewGroupCommit(commit func(ctx context.Context, durable bool, recs []*AuditRecord) error) *GroupCommit {
	g := &GroupCommit{requests: make(chan *commitRequest, maxBatch), commit: commit, done: make(chan struct{})}
	go g.loop()
	return g
}

// ErrAuditClosed is returned by appends after the log was closed.
var ErrAuditClosed = errors.New("audit: log is closed")

// Append implements [AuditLog].
func (g *GroupCommit) Append(ctx context.Context, durable bool, recs ...*AuditRecord) error {
	if len(recs) == 0 {
		return nil
	}
	req := &commitRequest{recs: recs, durable: durable, result: make(chan error, 1)}
	g.mu.RLock()
	if g.closed {
		g.mu.RUnlock()
		return ErrAuditClosed
	}
	select {
	case g.requests <- req:
		g.mu.RUnlock()
	case <-ctx.Done():
		g.mu.RUnlock()
		return ctx.Err()
	}
	// Once queued, the records are written whatever the caller's context
	// says: a call must not run on a confirmation whose record may or may
	// not exist.
	return <-req.result
}

func (g *GroupCommit) loop() {
	for {
		first, ok := <-g.requests
		if !ok {
			close(g.done)
			return
		}
		// A batch gathers what is already waiting; it never waits for more.
		batch := []*commitRequest{first}
		n := len(first.recs)
	drain:
		for n < maxBatch {
			select {
			case r, ok := <-g.requests:
				if !ok {
					break drain
				}
				batch = append(batch, r)
				n += len(r.recs)
			default:
				break drain
			}
		}
		durable := false
		recs := make([]*AuditRecord, 0, n)
		for _, r := range batch {
			durable = durable || r.durable
			recs = append(recs, r.recs...)
		}
		err := g.commit(context.Background(), durable, recs)
		for _, r := range batch {
			r.result <- err
		}
	}
}

// Close stops accepting records and returns once those already queued are
// written.
func (g *GroupCommit) Close() {
	g.mu.Lock()
	if !g.closed {
		g.closed = true
		close(g.requests)
	}
	g.mu.Unlock()
	<-g.done
}

// Rows is what the rows of database/sql and of pgx have in common.
type Rows interface {
	Next() bool
	Scan(dest ...any) error
	Err() error
}

// YieldRecords decodes rows of one column, a stored record's text, and
// yields them until yield asks to stop or a row fails; wrap names the
// store in errors.
func YieldRecords(rows Rows, wrap func(error) error, yield func(*AuditRecord, error) bool) {
	for rows.Next() {
		var text string
		if err := rows.Scan(&text); err != nil {
			yield(nil, wrap(err))
			return
		}
		r, err := DecodeAuditRecord([]byte(text))
		if !yield(r, err) || err != nil {
			return
		}
	}
	if err := rows.Err(); err != nil {
		yield(nil, wrap(err))
	}
}

// What confirmed a call, as an audit record's ConfirmedBy says.
const (
	ConfirmedByFlag   = "flag"
	ConfirmedByToken  = "token"
	ConfirmedByElicit = "elicit"
	// ConfirmedByRelay marks the continuation of a call the gate already
	// let through, after a question the tool itself asked was answered.
	ConfirmedByRelay = "relay"
)

// OutcomeInputRequired is the outcome of a call whose tool asked the
// client a question instead of finishing.
const OutcomeInputRequired = "input_required"

// OutcomeToolError is the outcome of a call whose tool answered an error
// result without an interlock error code.
const OutcomeToolError = "tool_error"

// trail is what the audit log records of one call, gathered on its way
// through the gate.
type trail struct {
	// call is nil when the arguments were refused before there was one.
	call *Call
	// ran is set once the gate let the call run; decision says how.
	ran      bool
	decision string
	// recorded is set once the decision to run is on record.
	recorded bool
	// ranFor is how long the tool ran.
	ranFor time.Duration
	// budget names the budget that refused the call.
	budget string
}

// decisionOf returns the decision an audit record names for a call that
// ended with res or err.
func (tr *trail) decisionOf(res *mcp.CallToolResult, err error) string {
	if tr.ran {
		return tr.decision
	}
	if tr.budget != "" {
		return DecisionDenied
	}
	if err == nil {
		if res != nil && res.InputRequests != nil {
			return DecisionAsked
		}
		return ""
	}
	switch ErrorCode(err) {
	case CodeToolNotAllowed:
		return DecisionDenied
	case CodeDryRunPreview:
		return DecisionPreviewed
	case CodeConfirmationRequired, CodeApprovalPending:
		return DecisionAsked
	case CodeDeclined:
		return DecisionDeclined
	case CodeCancelled:
		return DecisionCancelled
	case CodeConsentTokenExpired:
		return DecisionExpired
	case CodeConsentTokenMismatch:
		return DecisionMismatched
	case CodeConsentTokenInvalid, CodeValidationFailed, CodeNotFound:
		return DecisionInvalid
	}
	return ""
}

// outcomeOf returns the outcome an audit record names.
func outcomeOf(res *mcp.CallToolResult, err error) string {
	switch {
	case err != nil:
		return string(ErrorCode(err))
	case res == nil:
		return ""
	case res.InputRequests != nil:
		return OutcomeInputRequired
	case res.IsError:
		if code := BodyOfResult(res).Code; code != "" {
			return string(code)
		}
		return OutcomeToolError
	}
	return OutcomeOK
}

// callRecord returns the record of c with what every record of a call
// carries.
func (g *Gate) callRecord(c *Call, t *Tool, id Identity, ex Exchange, d Decision) *AuditRecord {
	hints := t.Hints
	rec := &AuditRecord{Time: time.Now(), Event: "call", Tenant: id.Tenant, Principal: id.Principal,
		Tool: t.Name, Upstream: t.Upstream, Rule: d.RuleName(), Mode: string(d.Mode), Hints: &hints}
	if d.Mode == ModeApproval {
		rec.RuleApprovers = d.Approvers
	}
	if req := ex.req; req != nil && req.Session != nil {
		rec.Session = req.Session.ID()
		if p := req.Session.InitializeParams(); p != nil && p.ClientInfo != nil {
			rec.Client = p.ClientInfo.Name + "/" + p.ClientInfo.Version
		}
	}
	if c != nil {
		rec.Args = g.redactedArgs(c)
		if digest, err := c.digest(); err == nil {
			rec.ArgsDigest = hex.EncodeToString(digest[:])
		}
		rec.ConfirmedBy = c.confirmedBy
		rec.Approvers, rec.Grant, rec.Approval = c.approvers, c.grant, c.approval
		if len(c.replaced) > 0 {
			rec.Replaced = Redact(c.replaced, c.policy.IsSecret)
		}
	}
	return rec
}

// recordRun is called when the gate lets c run. A confirmed call runs only
// once its record is durably written: when the log cannot take it and the
// audit is required, the call fails closed. An allowed call is recorded
// once, with its outcome.
func (g *Gate) recordRun(ctx context.Context, c *Call, d Decision, ex Exchange, tr *trail) error {
	tr.ran = true
	if c.confirmedBy == "" {
		tr.decision = DecisionAllowed
		return nil
	}
	tr.decision = DecisionConfirmed
	if g.audit == nil {
		return nil
	}
	t, _, _ := g.Tool(c.Tool)
	if t == nil {
		t = &Tool{Name: c.Tool, Upstream: c.Upstream}
	}
	rec := g.callRecord(c, t, c.Identity, ex, d)
	rec.Decision = DecisionConfirmed
	if err := g.audit.Append(ctx, true, rec); err != nil {
		if g.auditOptional {
			g.log.ErrorContext(ctx, "audit log cannot be written; running the confirmed call anyway (audit.required is false)",
				"tool", c.Tool, "error", clip(err.Error()))
			return nil
		}
		return &Error{
			Code: CodeUpstreamUnavailable,
			Message: fmt.Sprintf("interlock's audit log cannot be written, and a confirmed call runs only once its record is safe: "+
				"%s did not run.", c.Tool),
			Hint:         "Retry in a few seconds; if it keeps failing, tell the operator that interlock's audit log is down.",
			RetryAfterMS: 2000,
			Err:          err,
		}
	}
	tr.recorded = true
	return nil
}

// recordOutcome writes the record of how a call ended.
func (g *Gate) recordOutcome(ctx context.Context, t *Tool, id Identity, ex Exchange, d Decision, tr *trail, res *mcp.CallToolResult, err error, took time.Duration) {
	if g.audit == nil {
		return
	}
	rec := g.callRecord(tr.call, t, id, ex, d)
	rec.Decision = tr.decisionOf(res, err)
	rec.Outcome = outcomeOf(res, err)
	rec.LatencyMS = float64(took.Microseconds()) / 1000
	if tr.budget != "" {
		rec.Detail = fmt.Sprintf("budget %q is spent", tr.budget)
	}
	if err != nil {
		rec.Summary = BodyOf(err).Summary
	} else if res != nil && res.InputRequests != nil {
		if form, ok := res.InputRequests[formRequestID].(*mcp.ElicitParams); ok && !tr.ran {
			rec.Summary = form.Message
		}
	}
	if err := g.audit.Append(ctx, false, rec); err != nil {
		g.log.ErrorContext(ctx, "audit log cannot be written", "tool", t.Name, "error", clip(err.Error()))
	}
}

// RecordEvent appends a record of something that happened around the gate
// (a refused API key, an upstream restart). It sets the record's time when
// unset; a failure to write it is logged.
func (g *Gate) RecordEvent(ctx context.Context, rec *AuditRecord) {
	if g.audit == nil {
		return
	}
	if rec.Time.IsZero() {
		rec.Time = time.Now()
	}
	if err := g.audit.Append(ctx, false, rec); err != nil {
		g.log.ErrorContext(ctx, "audit log cannot be written", "event", rec.Event, "error", clip(err.Error()))
	}
}
