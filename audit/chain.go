package audit

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"iter"
	"slices"
	"strconv"
	"time"

	"github.com/interlock-mcp/interlock/seal"
)

// genesis is the Prev of the first record.
const genesis = ""

// Link sets r's place in the chain after prev (the hash of the record
// before it, or "" for the first) and returns the record as a store keeps
// it: its canonical form, hash included. The hash is computed over the
// same canonical form without the hash, as [Record.ComputeHash]
// recomputes it from the stored bytes. The record is encoded once: the
// hash member is inserted where it sorts into the form that was hashed.
//
// Every record is bounded here, before it is hashed: its text is made
// valid UTF-8 and cut to size (see bound), in r itself, so that r holds
// what is stored.
func (r *Record) Link(seq int64, prev string) ([]byte, error) {
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
func (r *Record) appendCanonical(b []byte) ([]byte, int, error) {
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
// [Record.bound]); it fails on a number with no JSON form.
func (r *Record) appendMembers(b []byte) ([]byte, int, error) {
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

// ComputeHash returns the hex SHA-256 of the record's canonical encoding:
// its JSON object without the "hash" member, keys sorted at every depth,
// numbers in their shortest form, no insignificant white space (the form
// of package seal's canonical arguments), prefixed by the line
// "interlock audit v1\n". Times are RFC 3339 in UTC with nanoseconds. A
// record read back from a store is hashed over its stored bytes (Raw).
func (r *Record) ComputeHash() (string, error) {
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

// ChainError names the first record at which an audit chain breaks.
type ChainError struct {
	// Seq is the sequence number the record has, or should have had.
	Seq    int64
	Reason string
}

func (e *ChainError) Error() string { return fmt.Sprintf("record %d: %s", e.Seq, e.Reason) }

// Verify reads records in order and checks that they form one
// unbroken chain from the first: consecutive sequence numbers from 1, each
// record's Prev the hash of the one before, and each hash what its fields
// give. It returns how many records verified and, at the first break, a
// [*ChainError].
func Verify(records iter.Seq2[*Record, error]) (int64, error) {
	var n int64
	prev := genesis
	for r, err := range records {
		if errors.Is(err, ErrUnreadable) {
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
