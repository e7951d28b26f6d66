package seal

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"crypto/sha256"
	"errors"
)

// A box keeps bytes the gateway must store and read back but that no one
// reading the store may learn or change, such as the arguments of a call
// that runs later: AES-256-GCM under a key derived from the sealing key,
// with a random nonce, bound to what the caller names as its place (ad).
// Any of the sealer's keys opens a box, as any opens a token, so keys
// rotate the same way.

// boxVersion starts every box.
const boxVersion = 1

// ErrBoxOpen is a box that no key opens, or that was moved from where it
// was made.
var ErrBoxOpen = errors.New("seal: the box does not open")

// boxCipher is the AEAD of key.
func boxCipher(key []byte) cipher.AEAD {
	k := sha256.Sum256(append([]byte("interlock box v1\x00"), key...))
	block, err := aes.NewCipher(k[:])
	if err != nil {
		panic(err) // a 32-byte key always makes a cipher
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		panic(err)
	}
	return aead
}

// Box returns plain boxed under the first key, bound to ad.
func (s *Sealer) Box(plain, ad []byte) []byte {
	aead := boxCipher(s.keys[0])
	out := make([]byte, 1+aead.NonceSize(), 1+aead.NonceSize()+len(plain)+aead.Overhead())
	out[0] = boxVersion
	if _, err := rand.Read(out[1:]); err != nil {
		panic(err)
	}
	return aead.Seal(out, out[1:1+aead.NonceSize()], plain, ad)
}

// Unbox returns what box holds, when a key opens it and it was made for
// ad; ErrBoxOpen otherwise.
func (s *Sealer) Unbox(box, ad []byte) ([]byte, error) {
	for _, k := range s.keys {
		aead := boxCipher(k)
		if len(box) < 1+aead.NonceSize() || box[0] != boxVersion {
			return nil, ErrBoxOpen
		}
		if plain, err := aead.Open(nil, box[1:1+aead.NonceSize()], box[1+aead.NonceSize():], ad); err == nil {
			return plain, nil
		}
	}
	return nil, ErrBoxOpen
}
