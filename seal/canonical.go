package seal

import (
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
)

// MetaPrefix marks meta-arguments, which are never part of the canonical
// arguments.
const MetaPrefix = "__"

// Canonical returns the normal form of decoded JSON arguments, the values
// encoding/json decodes into an any (map[string]any, []any, string,
// float64, bool, nil):
//
//   - top-level keys that start with "__" (meta-arguments) are left out;
//   - object keys are sorted by their UTF-8 bytes, at every depth;
//   - strings are written as encoding/json writes them;
//   - numbers are written in the shortest form that reads back as the same
//     float64, so 1, 1.0, 1e0 and 10e-1 are all "1";
//   - no insignificant white space.
//
// The caller decodes the arguments once, strictly, and digests the value it
// decided on; the seal never parses raw bytes of its own. The form is only
// ever hashed, never parsed back. Its cost is linear in the size of the
// value.
func Canonical(args map[string]any) ([]byte, error) {
	b := []byte{'{'}
	first := true
	for _, k := range sortedKeys(args) {
		if strings.HasPrefix(k, MetaPrefix) {
			continue
		}
		if !first {
			b = append(b, ',')
		}
		first = false
		b = AppendString(b, k)
		b = append(b, ':')
		var err error
		if b, err = AppendValue(b, args[k]); err != nil {
			return nil, err
		}
	}
	return append(b, '}'), nil
}

// Digest returns the SHA-256 of the canonical arguments.
func Digest(args map[string]any) ([32]byte, error) {
	c, err := Canonical(args)
	if err != nil {
		return [32]byte{}, err
	}
	return sha256.Sum256(c), nil
}

// DigestValue returns the SHA-256 of the canonical form of any decoded JSON
// value, such as a tool's definition; unlike [Digest] it keeps every key.
func DigestValue(v any) ([32]byte, error) {
	b, err := AppendValue(nil, v)
	if err != nil {
		return [32]byte{}, err
	}
	return sha256.Sum256(b), nil
}

// DigestOf returns the SHA-256 of the canonical form of v's JSON encoding,
// read back leniently, so that no limit of the strict reader can leave a
// part of v unbound: every field its encoding holds is digested.
func DigestOf(v any) ([32]byte, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return [32]byte{}, err
	}
	var decoded any
	if err := json.Unmarshal(b, &decoded); err != nil {
		return [32]byte{}, err
	}
	return DigestValue(decoded)
}

func sortedKeys(m map[string]any) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// AppendString appends s to b as encoding/json writes it, quoted, the form
// [Canonical] gives strings; it lets a caller that writes a canonical object
// member by member, such as an audit record, write no string differently.
// Like encoding/json it writes each byte of s that is not UTF-8 as \ufffd,
// which reads back as another string: decoded JSON never holds one, and a
// caller whose form is parsed back gives it valid UTF-8 (the audit log
// does).
func AppendString(b []byte, s string) []byte {
	if plain(s) {
		// What encoding/json writes for such a string, without its
		// reflection and allocation: most keys and values are plain.
		b = append(b, '"')
		b = append(b, s...)
		return append(b, '"')
	}
	e, _ := json.Marshal(s) // a string always encodes
	return append(b, e...)
}

// plain reports whether encoding/json writes s between quotes as it is:
// printable ASCII that it neither escapes nor, as it does for <, > and &,
// spells as \u sequences.
func plain(s string) bool {
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c < 0x20 || c > 0x7e, c == '"', c == '\\', c == '<', c == '>', c == '&':
			return false
		}
	}
	return true
}

// AppendNumber appends the canonical form of a number to b: the shortest
// that reads back as the same float64. It takes a float64, not an any, so
// that a caller's number is not boxed.
func AppendNumber(b []byte, f float64) ([]byte, error) {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return nil, fmt.Errorf("seal: number %v has no JSON form", f)
	}
	return strconv.AppendFloat(b, f, 'g', -1, 64), nil
}

// AppendValue appends the canonical form of a decoded JSON value to b: the
// form [DigestValue] digests, every key kept.
func AppendValue(b []byte, v any) ([]byte, error) {
	switch v := v.(type) {
	case nil:
		b = append(b, "null"...)
	case bool:
		b = strconv.AppendBool(b, v)
	case string:
		b = AppendString(b, v)
	case float64:
		return AppendNumber(b, v)
	case []any:
		b = append(b, '[')
		for i, e := range v {
			if i > 0 {
				b = append(b, ',')
			}
			var err error
			if b, err = AppendValue(b, e); err != nil {
				return nil, err
			}
		}
		b = append(b, ']')
	case map[string]any:
		b = append(b, '{')
		for i, k := range sortedKeys(v) {
			if i > 0 {
				b = append(b, ',')
			}
			b = AppendString(b, k)
			b = append(b, ':')
			var err error
			if b, err = AppendValue(b, v[k]); err != nil {
				return nil, err
			}
		}
		b = append(b, '}')
	default:
		return nil, fmt.Errorf("seal: unexpected JSON value %T", v)
	}
	return b, nil
}
