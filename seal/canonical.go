package seal

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"math/big"
	"sort"
	"strconv"
	"strings"
)

// MetaPrefix marks meta-arguments, which are never part of the canonical
// arguments.
const MetaPrefix = "__"

// Canonical returns the normal form of a JSON arguments object:
//
//   - top-level keys that start with "__" (meta-arguments) are removed;
//   - object keys are sorted by their UTF-8 bytes, at every depth;
//   - strings are written as encoding/json writes them;
//   - numbers are written as exact rationals in lowest terms, so 1, 1.0,
//     1e0 and 10e-1 are all "1", and 0.5 is "1/2"; no precision is lost,
//     however large the number;
//   - no insignificant white space.
//
// The form is only ever hashed, never parsed back.
func Canonical(args json.RawMessage) ([]byte, error) {
	dec := json.NewDecoder(bytes.NewReader(args))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, fmt.Errorf("seal: arguments are not JSON: %w", err)
	}
	if v == nil {
		v = map[string]any{}
	}
	m, ok := v.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("seal: arguments are not a JSON object")
	}
	for k := range m {
		if strings.HasPrefix(k, MetaPrefix) {
			delete(m, k)
		}
	}
	var b bytes.Buffer
	if err := writeCanonical(&b, m); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

// Digest returns the SHA-256 of the canonical arguments.
func Digest(args json.RawMessage) ([32]byte, error) {
	c, err := Canonical(args)
	if err != nil {
		return [32]byte{}, err
	}
	return sha256.Sum256(c), nil
}

func writeCanonical(b *bytes.Buffer, v any) error {
	switch v := v.(type) {
	case nil:
		b.WriteString("null")
	case bool:
		if v {
			b.WriteString("true")
		} else {
			b.WriteString("false")
		}
	case string:
		s, _ := json.Marshal(v)
		b.Write(s)
	case json.Number:
		if !saneExponent(string(v)) {
			return fmt.Errorf("seal: number %s out of range", v)
		}
		r, ok := new(big.Rat).SetString(string(v))
		if !ok {
			return fmt.Errorf("seal: number %s out of range", v)
		}
		b.WriteString(r.RatString())
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
		keys := make([]string, 0, len(v))
		for k := range v {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		b.WriteByte('{')
		for i, k := range keys {
			if i > 0 {
				b.WriteByte(',')
			}
			s, _ := json.Marshal(k)
			b.Write(s)
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

// maxExponent bounds the decimal exponent of a number: big.Rat would
// otherwise compute 10^exponent exactly, which a short input can make huge.
const maxExponent = 1000

func saneExponent(num string) bool {
	i := strings.IndexAny(num, "eE")
	if i < 0 {
		return true
	}
	exp, err := strconv.Atoi(num[i+1:])
	return err == nil && exp >= -maxExponent && exp <= maxExponent
}
