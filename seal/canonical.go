package seal

import (
	"bytes"
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
	var b bytes.Buffer
	b.WriteByte('{')
	first := true
	for _, k := range sortedKeys(args) {
		if strings.HasPrefix(k, MetaPrefix) {
			continue
		}
		if !first {
			b.WriteByte(',')
		}
		first = false
		writeString(&b, k)
		b.WriteByte(':')
		if err := writeCanonical(&b, args[k]); err != nil {
			return nil, err
		}
	}
	b.WriteByte('}')
	return b.Bytes(), nil
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
	var b bytes.Buffer
	if err := writeCanonical(&b, v); err != nil {
		return [32]byte{}, err
	}
	return sha256.Sum256(b.Bytes()), nil
}

func sortedKeys(m map[string]any) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

func writeString(b *bytes.Buffer, s string) {
	if plain(s) {
		// What encoding/json writes for such a string, without its
		// reflection and allocation: most keys and values are plain.
		b.WriteByte('"')
		b.WriteString(s)
		b.WriteByte('"')
		return
	}
	e, _ := json.Marshal(s) // a string always encodes
	b.Write(e)
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

func writeCanonical(b *bytes.Buffer, v any) error {
	switch v := v.(type) {
	case nil:
		b.WriteString("null")
	case bool:
		b.WriteString(strconv.FormatBool(v))
	case string:
		writeString(b, v)
	case float64:
		if math.IsNaN(v) || math.IsInf(v, 0) {
			return fmt.Errorf("seal: number %v has no JSON form", v)
		}
		b.WriteString(strconv.FormatFloat(v, 'g', -1, 64))
	case []any:
		b.WriteByte('[')
		for i, e := range v {
			if i > 0 {
				b.WriteByte(',')
			}
			if err := writeCanonical(b, e); err != nil {
				return err
			}
		}
		b.WriteByte(']')
	case map[string]any:
		b.WriteByte('{')
		for i, k := range sortedKeys(v) {
			if i > 0 {
				b.WriteByte(',')
			}
			writeString(b, k)
			b.WriteByte(':')
			if err := writeCanonical(b, v[k]); err != nil {
				return err
			}
		}
		b.WriteByte('}')
	default:
		return fmt.Errorf("seal: unexpected JSON value %T", v)
	}
	return nil
}
