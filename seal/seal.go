// Package seal makes and checks sealed, single-purpose tokens: compact,
// URL-safe strings that carry who may use them, for which tool and
// arguments, and until when, under an HMAC-SHA256 so that any change is
// detected.
//
// # Keys
//
// A [Sealer] holds one or more keys. It seals with the first and opens with
// any, so keys rotate by putting the new key first and dropping the old one
// once its tokens have expired.
//
// # Format
//
// A token is the prefix "ilt1_" followed by the unpadded base64url encoding
// of the claims in a fixed binary layout and the 32-byte MAC over a
// domain-separation label and those claims:
//
//	version(1) kind(1) issued_at(8) expires_at(8) nonce(16) digest(32)
//	definition(32) len(tenant)(2) tenant len(principal)(2) principal
//	len(tool)(2) tool len(payload)(4) payload mac(32)
//
// Times are Unix milliseconds, big-endian. The base64url text must be in
// its one canonical spelling: a token with any character changed, even one
// whose change only touches unused bits, does not open. The claims are
// readable by anyone who holds the token; only the MAC is secret.
//
// # Canonical arguments
//
// [Digest] binds a token to arguments through [Canonical], so the same
// arguments sent with keys in another order, or numbers written another way,
// digest the same; see [Canonical] for the normal form.
package seal

import (
	"bytes"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"time"
)

// Prefix starts every token, so a token is recognisable in logs and
// support requests.
const Prefix = "ilt1_"

const version = 2

// MinKeyLength is the shortest key a Sealer accepts, in bytes.
const MinKeyLength = 32

// Kind separates the purposes tokens are sealed for, so a token made for one
// purpose never opens as another.
type Kind byte

// The kinds of sealed token.
const (
	// KindConfirm is a confirm token handed to an agent.
	KindConfirm Kind = 1
	// KindRequestState is the state carried through a multi-round-trip call.
	KindRequestState Kind = 2
	// KindUpstreamState wraps the request state of a question the server
	// behind the gate asked during a call.
	KindUpstreamState Kind = 3
)

// Claims are what a token binds.
type Claims struct {
	Kind      Kind
	Tenant    string
	Principal string
	Tool      string
	// Digest is the SHA-256 of the canonical arguments (see [Digest]).
	Digest [32]byte
	// Definition is the SHA-256 of the tool's definition as it was
	// advertised (see [DigestValue]), so a token outlives no change of the
	// tool.
	Definition [32]byte
	IssuedAt   time.Time
	Expires    time.Time
	// Nonce makes every token unique and is what a store consumes.
	Nonce [16]byte
	// Payload is carried sealed but not secret: anyone holding the token
	// can read it.
	Payload []byte
}

// NonceString returns the nonce in a form fit for store keys.
func (c Claims) NonceString() string { return base64.RawURLEncoding.EncodeToString(c.Nonce[:]) }

// Fingerprint returns the nonce and the SHA-256 of every other claim, in a
// form fit for a store value. A store that keeps the fingerprint of each
// live token rather than its nonce alone honours only the claims it was
// issued with: a token re-sealed around a live nonce with other claims
// does not match, even under the right key.
func (c Claims) Fingerprint() string {
	sum := sha256.Sum256(c.encode())
	return c.NonceString() + "." + base64.RawURLEncoding.EncodeToString(sum[:])
}

// Errors from [Sealer.Open]. Both mean the token must not be honoured.
var (
	// ErrMalformed: not a token of this format (truncated, wrong prefix,
	// unknown version).
	ErrMalformed = errors.New("seal: malformed token")
	// ErrForged: the MAC does not verify under any key (tampered, or sealed
	// by another deployment's key).
	ErrForged = errors.New("seal: token does not verify")
)

// Sealer seals and opens tokens.
type Sealer struct {
	keys [][]byte
}

// New returns a Sealer that seals with keys[0] and opens with any key.
func New(keys ...[]byte) (*Sealer, error) {
	if len(keys) == 0 {
		return nil, errors.New("seal: no key")
	}
	s := &Sealer{}
	for i, k := range keys {
		if len(k) < MinKeyLength {
			return nil, fmt.Errorf("seal: key %d is %d bytes; use at least %d", i+1, len(k), MinKeyLength)
		}
		s.keys = append(s.keys, bytes.Clone(k))
	}
	return s, nil
}

// ParseKeys reads a comma-separated list of keys, as INTERLOCK_SECRET holds
// them.
func ParseKeys(s string) [][]byte {
	var keys [][]byte
	for _, k := range strings.Split(s, ",") {
		if k = strings.TrimSpace(k); k != "" {
			keys = append(keys, []byte(k))
		}
	}
	return keys
}

// RandomKey returns a new random key.
func RandomKey() []byte {
	k := make([]byte, MinKeyLength)
	if _, err := rand.Read(k); err != nil {
		panic(err) // crypto/rand does not fail on supported platforms
	}
	return k
}

// NewNonce returns a random nonce.
func NewNonce() [16]byte {
	var n [16]byte
	if _, err := rand.Read(n[:]); err != nil {
		panic(err)
	}
	return n
}

var label = []byte("interlock seal v1\x00")

func mac(key, payload []byte) []byte {
	m := hmac.New(sha256.New, key)
	m.Write(label)
	m.Write(payload)
	return m.Sum(nil)
}

// encode writes the claims in the token's binary layout, without the MAC.
func (c Claims) encode() []byte {
	payload := make([]byte, 0, headerLen+6+len(c.Tenant)+len(c.Principal)+len(c.Tool)+4+len(c.Payload)+32)
	payload = append(payload, version, byte(c.Kind))
	payload = binary.BigEndian.AppendUint64(payload, uint64(c.IssuedAt.UnixMilli()))
	payload = binary.BigEndian.AppendUint64(payload, uint64(c.Expires.UnixMilli()))
	payload = append(payload, c.Nonce[:]...)
	payload = append(payload, c.Digest[:]...)
	payload = append(payload, c.Definition[:]...)
	for _, f := range []string{c.Tenant, c.Principal, c.Tool} {
		payload = binary.BigEndian.AppendUint16(payload, uint16(min(len(f), 0xffff)))
		payload = append(payload, f[:min(len(f), 0xffff)]...)
	}
	payload = binary.BigEndian.AppendUint32(payload, uint32(len(c.Payload)))
	return append(payload, c.Payload...)
}

// headerLen is the length of the fixed part of the layout.
const headerLen = 1 + 1 + 8 + 8 + 16 + 32 + 32

// Seal returns the token for c.
func (s *Sealer) Seal(c Claims) string {
	payload := c.encode()
	payload = append(payload, mac(s.keys[0], payload)...)
	return Prefix + base64.RawURLEncoding.EncodeToString(payload)
}

// strictBase64 refuses the other spellings of the same bytes (non-zero
// unused bits in the last character), so a token has exactly one text.
var strictBase64 = base64.RawURLEncoding.Strict()

// Open verifies token under each key, in constant time per key, and returns
// its claims. It does not check expiry: what counts as now is the caller's.
func (s *Sealer) Open(token string) (Claims, error) {
	var c Claims
	rest, ok := strings.CutPrefix(token, Prefix)
	if !ok {
		return c, ErrMalformed
	}
	raw, err := strictBase64.DecodeString(rest)
	if err != nil || len(raw) < headerLen+6+4+32 {
		return c, ErrMalformed
	}
	// The decoder skips line breaks; only the one spelling of these bytes
	// is their token.
	if base64.RawURLEncoding.EncodedLen(len(raw)) != len(rest) {
		return c, ErrMalformed
	}
	payload, sum := raw[:len(raw)-32], raw[len(raw)-32:]
	verified := false
	for _, k := range s.keys {
		if hmac.Equal(mac(k, payload), sum) {
			verified = true
		}
	}
	if !verified {
		return c, ErrForged
	}
	if payload[0] != version {
		return c, ErrMalformed
	}
	c.Kind = Kind(payload[1])
	c.IssuedAt = time.UnixMilli(int64(binary.BigEndian.Uint64(payload[2:10])))
	c.Expires = time.UnixMilli(int64(binary.BigEndian.Uint64(payload[10:18])))
	copy(c.Nonce[:], payload[18:34])
	copy(c.Digest[:], payload[34:66])
	copy(c.Definition[:], payload[66:98])
	p := payload[headerLen:]
	fields := make([]string, 3)
	for i := range fields {
		if len(p) < 2 {
			return Claims{}, ErrMalformed
		}
		n := int(binary.BigEndian.Uint16(p))
		if len(p) < 2+n {
			return Claims{}, ErrMalformed
		}
		fields[i], p = string(p[2:2+n]), p[2+n:]
	}
	if len(p) < 4 || uint64(len(p)-4) != uint64(binary.BigEndian.Uint32(p)) {
		return Claims{}, ErrMalformed
	}
	if len(p) > 4 {
		c.Payload = bytes.Clone(p[4:])
	}
	c.Tenant, c.Principal, c.Tool = fields[0], fields[1], fields[2]
	return c, nil
}
