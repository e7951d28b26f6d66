package strictjson

import (
	"fmt"
	"strconv"
	"strings"
	"unicode/utf16"
	"unicode/utf8"
)

// Limits of the reader. They bound the work one call can cost (a number of
// 400,000 digits once cost seconds of CPU) and keep every accepted value one
// that each side reads the same way.
const (
	// MaxNumberLength is the longest number literal accepted, in bytes.
	MaxNumberLength = 64
	// MaxDepth is the deepest nesting of objects and arrays accepted.
	MaxDepth = 64
)

// Check reports whether data is exactly one JSON value that every reader
// decodes the same way: no duplicate object keys at any depth (compared
// after unescaping), valid UTF-8 with no lone surrogate escapes, numbers
// that a 64-bit float holds exactly and that are at most [MaxNumberLength]
// bytes, and nesting at most [MaxDepth] deep. It returns nil or an [*Error]
// for the first problem.
func Check(data []byte) error {
	_, err := Decode(data)
	return err
}

// Decode reads data as [Check] checks it and returns the value as
// encoding/json would decode it into an any: map[string]any, []any, string,
// float64, bool or nil. The error, when there is one, is an [*Error].
func Decode(data []byte) (any, error) {
	d := reader{data: data}
	d.space()
	v, err := d.value(0)
	if err == nil {
		d.space()
		if d.pos < len(d.data) {
			err = d.fail("unexpected data after the JSON value", "syntax")
		}
	}
	if err != nil {
		return nil, err.done()
	}
	return v, nil
}

// Error is the first problem [Decode] found: JSON that is malformed, or that
// two readers could read differently.
type Error struct {
	// Path is where the problem is, as an argument path ("a.b[2]", with keys
	// that are not plain names quoted as [PathKey] quotes them); "" is the
	// value itself. It is as long as the input made it.
	Path string
	// Message says what is wrong in a few words ("duplicate key").
	Message string
	// Code names the problem for programs: syntax, duplicate_key,
	// invalid_utf8, lone_surrogate, number_too_long, number_inexact or
	// too_deep.
	Code string
	// Offset is the byte of the input at which the problem was found.
	Offset int
}

func (e *Error) Error() string {
	at := e.Path
	if at == "" {
		at = "the value"
	}
	return fmt.Sprintf("JSON ambiguous or malformed at %s (byte %d): %s", at, e.Offset, e.Message)
}

// readError is a problem found while reading; path is built on the way out,
// innermost segment first, so reading a valid value costs nothing for it.
type readError struct {
	msg, code string
	offset    int
	path      []string
}

func (e *readError) done() *Error {
	var b strings.Builder
	for i := len(e.path) - 1; i >= 0; i-- {
		seg := e.path[i]
		if seg[0] != '[' && b.Len() > 0 {
			b.WriteByte('.')
		}
		b.WriteString(seg)
	}
	return &Error{Path: b.String(), Message: e.msg, Code: e.code, Offset: e.offset}
}

type reader struct {
	data []byte
	pos  int
}

func (d *reader) fail(msg, code string) *readError {
	return &readError{msg: msg, code: code, offset: d.pos}
}

func (d *reader) space() {
	for d.pos < len(d.data) {
		switch d.data[d.pos] {
		case ' ', '\t', '\n', '\r':
			d.pos++
		default:
			return
		}
	}
}

func (d *reader) value(depth int) (any, *readError) {
	if d.pos >= len(d.data) {
		return nil, d.fail("unexpected end of JSON", "syntax")
	}
	switch c := d.data[d.pos]; {
	case c == '{':
		return d.object(depth + 1)
	case c == '[':
		return d.array(depth + 1)
	case c == '"':
		return d.string()
	case c == '-' || ('0' <= c && c <= '9'):
		return d.number()
	case c == 't':
		return true, d.literal("true")
	case c == 'f':
		return false, d.literal("false")
	case c == 'n':
		return nil, d.literal("null")
	}
	return nil, d.fail(fmt.Sprintf("unexpected character %q", d.data[d.pos]), "syntax")
}

func (d *reader) literal(word string) *readError {
	if !strings.HasPrefix(string(d.data[d.pos:min(len(d.data), d.pos+len(word))]), word) {
		return d.fail("invalid literal", "syntax")
	}
	d.pos += len(word)
	return nil
}

func (d *reader) object(depth int) (any, *readError) {
	if depth > MaxDepth {
		return nil, d.fail(fmt.Sprintf("nested more than %d deep", MaxDepth), "too_deep")
	}
	d.pos++ // {
	m := map[string]any{}
	d.space()
	if d.pos < len(d.data) && d.data[d.pos] == '}' {
		d.pos++
		return m, nil
	}
	for {
		d.space()
		if d.pos >= len(d.data) || d.data[d.pos] != '"' {
			return nil, d.fail("expected a string key", "syntax")
		}
		start := d.pos
		k, err := d.string()
		if err != nil {
			return nil, err
		}
		if _, dup := m[k]; dup {
			e := &readError{msg: "duplicate key", code: "duplicate_key", offset: start}
			e.path = append(e.path, PathKey(k))
			return nil, e
		}
		d.space()
		if d.pos >= len(d.data) || d.data[d.pos] != ':' {
			return nil, d.fail("expected ':' after a key", "syntax")
		}
		d.pos++
		d.space()
		v, err := d.value(depth)
		if err != nil {
			err.path = append(err.path, PathKey(k))
			return nil, err
		}
		m[k] = v
		d.space()
		if d.pos >= len(d.data) {
			return nil, d.fail("unexpected end of JSON in an object", "syntax")
		}
		switch d.data[d.pos] {
		case ',':
			d.pos++
		case '}':
			d.pos++
			return m, nil
		default:
			return nil, d.fail("expected ',' or '}' in an object", "syntax")
		}
	}
}

// PathKey writes an object key as a segment of a path: a plain name as it
// is, any other key quoted in brackets (["a b"]), so a path is never
// ambiguous and never holds text a terminal would act on.
func PathKey(k string) string {
	plain := k != ""
	for i := 0; i < len(k) && plain; i++ {
		c := k[i]
		plain = c == '_' || c == '-' || ('a' <= c && c <= 'z') || ('A' <= c && c <= 'Z') || ('0' <= c && c <= '9')
	}
	if plain {
		return k
	}
	return "[" + strconv.QuoteToASCII(k) + "]"
}

func (d *reader) array(depth int) (any, *readError) {
	if depth > MaxDepth {
		return nil, d.fail(fmt.Sprintf("nested more than %d deep", MaxDepth), "too_deep")
	}
	d.pos++ // [
	a := []any{}
	d.space()
	if d.pos < len(d.data) && d.data[d.pos] == ']' {
		d.pos++
		return a, nil
	}
	for {
		d.space()
		v, err := d.value(depth)
		if err != nil {
			err.path = append(err.path, "["+strconv.Itoa(len(a))+"]")
			return nil, err
		}
		a = append(a, v)
		d.space()
		if d.pos >= len(d.data) {
			return nil, d.fail("unexpected end of JSON in an array", "syntax")
		}
		switch d.data[d.pos] {
		case ',':
			d.pos++
		case ']':
			d.pos++
			return a, nil
		default:
			return nil, d.fail("expected ',' or ']' in an array", "syntax")
		}
	}
}

// string reads a string at d.pos (which holds its opening quote).
func (d *reader) string() (string, *readError) {
	d.pos++
	start := d.pos
	// Fast path: plain ASCII without escapes is the string itself.
	for d.pos < len(d.data) {
		c := d.data[d.pos]
		if c == '"' {
			s := string(d.data[start:d.pos])
			d.pos++
			return s, nil
		}
		if c == '\\' || c < 0x20 || c >= utf8.RuneSelf {
			break
		}
		d.pos++
	}
	var b strings.Builder
	b.Write(d.data[start:d.pos])
	for d.pos < len(d.data) {
		c := d.data[d.pos]
		switch {
		case c == '"':
			d.pos++
			return b.String(), nil
		case c < 0x20:
			return "", d.fail("control character in a string", "syntax")
		case c >= utf8.RuneSelf:
			r, n := utf8.DecodeRune(d.data[d.pos:])
			if r == utf8.RuneError && n <= 1 {
				return "", d.fail("invalid UTF-8", "invalid_utf8")
			}
			b.Write(d.data[d.pos : d.pos+n])
			d.pos += n
		case c == '\\':
			if err := d.escape(&b); err != nil {
				return "", err
			}
		default:
			b.WriteByte(c)
			d.pos++
		}
	}
	return "", d.fail("unterminated string", "syntax")
}

// escape reads one escape sequence at d.pos into b. A \u escape of a
// surrogate must be a high surrogate followed at once by a low one: a lone
// surrogate has no text, and readers disagree about what to make of it.
func (d *reader) escape(b *strings.Builder) *readError {
	if d.pos+1 >= len(d.data) {
		return d.fail("unterminated escape", "syntax")
	}
	c := d.data[d.pos+1]
	switch c {
	case '"', '\\', '/':
		b.WriteByte(c)
	case 'b':
		b.WriteByte('\b')
	case 'f':
		b.WriteByte('\f')
	case 'n':
		b.WriteByte('\n')
	case 'r':
		b.WriteByte('\r')
	case 't':
		b.WriteByte('\t')
	case 'u':
		r, ok := hex4(d.data, d.pos+2)
		if !ok {
			return d.fail(`invalid \u escape`, "syntax")
		}
		switch {
		case utf16.IsSurrogate(r) && r < 0xdc00:
			lo, ok := rune(0), d.pos+11 < len(d.data) && d.data[d.pos+6] == '\\' && d.data[d.pos+7] == 'u'
			if ok {
				lo, ok = hex4(d.data, d.pos+8)
			}
			if !ok || lo < 0xdc00 || lo > 0xdfff {
				return d.fail("lone surrogate escape", "lone_surrogate")
			}
			b.WriteRune(utf16.DecodeRune(r, lo))
			d.pos += 12
			return nil
		case utf16.IsSurrogate(r):
			return d.fail("lone surrogate escape", "lone_surrogate")
		}
		b.WriteRune(r)
		d.pos += 6
		return nil
	default:
		return d.fail(fmt.Sprintf(`invalid escape \%c`, c), "syntax")
	}
	d.pos += 2
	return nil
}

func hex4(data []byte, at int) (rune, bool) {
	if at+4 > len(data) {
		return 0, false
	}
	var r rune
	for _, c := range data[at : at+4] {
		switch {
		case '0' <= c && c <= '9':
			r = r<<4 | rune(c-'0')
		case 'a' <= c && c <= 'f':
			r = r<<4 | rune(c-'a'+10)
		case 'A' <= c && c <= 'F':
			r = r<<4 | rune(c-'A'+10)
		default:
			return 0, false
		}
	}
	return r, true
}

// number reads a number literal. It is accepted only when the float64 it
// becomes holds it exactly, so the policy, the seal and a tool that reads
// the number in any precision all see the same value.
func (d *reader) number() (any, *readError) {
	start := d.pos
	if d.data[d.pos] == '-' {
		d.pos++
	}
	digits := func() int {
		n := 0
		for d.pos < len(d.data) && '0' <= d.data[d.pos] && d.data[d.pos] <= '9' {
			d.pos++
			n++
		}
		return n
	}
	switch {
	case d.pos < len(d.data) && d.data[d.pos] == '0':
		d.pos++
	case digits() == 0:
		return nil, d.fail("invalid number", "syntax")
	}
	if d.pos < len(d.data) && d.data[d.pos] == '.' {
		d.pos++
		if digits() == 0 {
			return nil, d.fail("invalid number", "syntax")
		}
	}
	if d.pos < len(d.data) && (d.data[d.pos] == 'e' || d.data[d.pos] == 'E') {
		d.pos++
		if d.pos < len(d.data) && (d.data[d.pos] == '+' || d.data[d.pos] == '-') {
			d.pos++
		}
		if digits() == 0 {
			return nil, d.fail("invalid number", "syntax")
		}
	}
	lit := string(d.data[start:d.pos])
	if len(lit) > MaxNumberLength {
		e := d.fail(fmt.Sprintf("number of %d characters; at most %d are accepted", len(lit), MaxNumberLength), "number_too_long")
		e.offset = start
		return nil, e
	}
	f, err := strconv.ParseFloat(lit, 64)
	if short := strconv.FormatFloat(f, 'g', -1, 64); err != nil || !sameDecimal(lit, short) {
		e := d.fail(fmt.Sprintf("number %s has more precision or range than a 64-bit float keeps (it would read as %s)", lit, short), "number_inexact")
		e.offset = start
		return nil, e
	}
	return f, nil
}

// sameDecimal reports whether two number literals denote the same decimal
// value, by comparing their normal forms (sign, significant digits,
// exponent); no big arithmetic, so the cost is linear in their length.
func sameDecimal(a, b string) bool {
	an, ad, ae, aok := decimalForm(a)
	bn, bd, be, bok := decimalForm(b)
	if !aok || !bok {
		return false
	}
	if ad == "" && bd == "" {
		return an == bn // 0 and -0 are different floats
	}
	return an == bn && ad == bd && ae == be
}

// decimalForm splits a number literal into its sign, its significant digits
// without leading or trailing zeros, and the exponent of the last of them.
func decimalForm(s string) (neg bool, digits string, exp int, ok bool) {
	neg = strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	mant, expPart, hasExp := strings.Cut(strings.ToLower(s), "e")
	if hasExp {
		e, err := strconv.Atoi(expPart)
		if err != nil || e > 1<<20 || e < -1<<20 {
			return false, "", 0, false
		}
		exp = e
	}
	intPart, frac, _ := strings.Cut(mant, ".")
	all := intPart + frac
	exp -= len(frac)
	trimmed := strings.TrimRight(all, "0")
	exp += len(all) - len(trimmed)
	digits = strings.TrimLeft(trimmed, "0")
	if digits == "" {
		exp = 0
	}
	return neg, digits, exp, true
}
