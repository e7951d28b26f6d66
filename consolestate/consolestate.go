// Package consolestate is what the approvers' console keeps between
// requests, declared once so that every store keeps it alike: sessions
// (whom they sign in, on what credential, their CSRF secret, idle
// expiry, the flash message and the WebAuthn challenge they wait on),
// passkeys with their signature counters, one-time sign-in links, and the
// word that approvals or grants changed ([Signal]).
//
// Kept in the store the gateways share (SQLite on a data directory,
// Redis, PostgreSQL), any replica answers any request of the console:
// signing in on one and listing on another, a passkey registered on one
// and used on another, a live page on one hearing a decision made on
// another. [Memory] keeps it in one process, for tests;
// consolestatetest is every store's conformance suite.
package consolestate

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"github.com/interlock-mcp/interlock/approval"
)

// Errors a [Store] returns.
var (
	// ErrNoSession: no session is kept under the key, or it idled out.
	ErrNoSession = errors.New("no such console session")
	// ErrPasskeyExists: the owner already registered a passkey of that
	// credential id.
	ErrPasskeyExists = errors.New("a passkey of that credential id is registered")
	// ErrNoPasskey: the owner has no passkey of that credential id.
	ErrNoPasskey = errors.New("no passkey of that credential id is registered")
)

// Key is what a secret (a session's id, a one-time link's token) is kept
// under: its SHA-256, in hex. Stores are handed keys only, never the
// secrets, so whoever reads a store (a backup, a database replica, a
// Redis dump) finds no session to ride and no link to spend.
func Key(secret string) string {
	sum := sha256.Sum256([]byte(secret))
	return hex.EncodeToString(sum[:])
}

// Credential is what a console session stands on: how its approver
// signed in, and what the gateway is asked again on each request.
type Credential struct {
	// Kind is how the approver signed in.
	Kind string `json:"kind"`
	// Ref names the credential to the gateway, such as an API key's
	// SHA-256; never the secret itself.
	Ref string `json:"ref,omitempty"`
	// Expires, when set, ends the session whatever else holds: the end of
	// the identity provider's sign-in.
	Expires time.Time `json:"expires,omitzero"`
}

// Session is one signed-in approver as a store keeps it.
type Session struct {
	Who        approval.Identity `json:"who"`
	Credential Credential        `json:"credential"`
	// CSRF is the secret every form of the session carries.
	CSRF     string    `json:"csrf"`
	Created  time.Time `json:"created"`
	LastSeen time.Time `json:"last_seen"`
}

// Slot is a value a session holds until it is taken, once.
type Slot string

// The slots of a session.
const (
	// Flash is the message left for the next page.
	Flash Slot = "flash"
	// Registration is the WebAuthn challenge (session data) of the
	// passkey page last shown: one registration answers it.
	Registration Slot = "registration"
)

// CheckSlot returns an error for a slot that is not one of this package.
func CheckSlot(s Slot) error {
	if s != Flash && s != Registration {
		return fmt.Errorf("consolestate: %q is not a slot of a session", string(s))
	}
	return nil
}

// Owner is whose passkeys they are: a principal of a tenant.
type Owner struct {
	Tenant    string `json:"tenant"`
	Principal string `json:"principal"`
}

// OwnerOf is the owner who names.
func OwnerOf(who approval.Identity) Owner { return Owner{Tenant: who.Tenant, Principal: who.Principal} }

// Passkey is a registered credential and what was accepted from it.
type Passkey struct {
	// ID is the credential's id.
	ID []byte `json:"id"`
	// RPID and Origin are the relying party and origin it was made for.
	RPID   string `json:"rp_id"`
	Origin string `json:"origin"`
	// Credential is the WebAuthn credential as JSON, its signature
	// counter included; the console reads and writes it, a store only
	// keeps it.
	Credential []byte `json:"credential"`
	// Accepted are the digests of what the credential signed in the
	// assertions accepted from it, oldest first.
	Accepted [][sha256.Size]byte `json:"accepted,omitempty"`
	// Rev is the store's revision of the passkey: [Store.SwapPasskey]
	// replaces it only while it is still the one read.
	Rev int64 `json:"rev"`
}

// Store keeps the console's state. Every method is safe for concurrent
// use, from any number of processes sharing the store. Times come from
// the caller, so that a store and its conformance suite need no clock.
type Store interface {
	// StartSession keeps s under key ([Key] of the session's id), and
	// drops sessions last seen more than idle before s.Created.
	StartSession(ctx context.Context, key string, s Session, idle time.Duration) error
	// Session returns the session kept under key. One last seen more
	// than idle before now has idled out: it is ended, and, as for a key
	// never kept, ErrNoSession is returned. touch sets its LastSeen to
	// now.
	Session(ctx context.Context, key string, now time.Time, idle time.Duration, touch bool) (Session, error)
	// EndSession ends the session kept under key with what its slots
	// hold; ending one that is gone is no error.
	EndSession(ctx context.Context, key string) error
	// Sessions returns every session kept, by key.
	Sessions(ctx context.Context) (map[string]Session, error)
	// Put leaves value in slot of the session under key, replacing what
	// was there; ErrNoSession when it is gone.
	Put(ctx context.Context, key string, slot Slot, value []byte) error
	// Take returns what slot of the session under key holds, and empties
	// it in the same step: of any number of takes at once, one gets the
	// value. nil when it is empty or the session is gone.
	Take(ctx context.Context, key string, slot Slot) ([]byte, error)

	// PasskeyUser returns owner's WebAuthn user handle: fresh, when
	// owner has none yet, else the one kept. Every replica must give an
	// owner the same handle, or a passkey made on one would not sign on
	// another.
	PasskeyUser(ctx context.Context, owner Owner, fresh []byte) ([]byte, error)
	// Passkeys returns owner's passkeys, in the order registered.
	Passkeys(ctx context.Context, owner Owner) ([]Passkey, error)
	// AddPasskey keeps p (Rev 1) as one of owner's passkeys;
	// ErrPasskeyExists when owner has one of that id.
	AddPasskey(ctx context.Context, owner Owner, p Passkey) error
	// SwapPasskey replaces owner's passkey of p's id with p, at revision
	// p.Rev+1, only while the one kept is at revision p.Rev; false when
	// another change came first. Of any number of swaps from one
	// revision, one succeeds: that is how a signature counter is
	// checked and moved as one step across replicas. ErrNoPasskey when
	// there is none of that id.
	SwapPasskey(ctx context.Context, owner Owner, p Passkey) (bool, error)
	// PasskeyOwners returns every owner with a passkey.
	PasskeyOwners(ctx context.Context) ([]Owner, error)
	// ForgetPasskeys drops owner's passkeys and user handle.
	ForgetPasskeys(ctx context.Context, owner Owner) error

	// AddLink keeps a one-time link under key ([Key] of its token) that
	// signs who in until expires.
	AddLink(ctx context.Context, key string, who approval.Identity, expires time.Time) error
	// SpendLink returns whom the link under key signs in and spends it,
	// in one step: of any number of spends at once, one is told true.
	// false for a link unknown, spent, or expired by now.
	SpendLink(ctx context.Context, key string, now time.Time) (approval.Identity, bool, error)
}

// Signal carries word that approvals or grants changed, between the
// gateways sharing a store: a gateway's console raises it when it (or its
// gate) changed something, and every console listening reads the stores
// again and tells its open pages what changed, each only what its viewer
// may see. The word is a hint, never the change itself: pages are
// refreshed from the stores, so a word lost or repeated costs a moment,
// never a wrong page.
type Signal interface {
	// Raise sends what (such as an approval's id) to every listener,
	// this process's included.
	Raise(ctx context.Context, what string) error
	// Listen returns a channel that receives what every Raise sends from
	// now on, until ctx ends, when it is closed. After a gap in which
	// words may have been lost (a reconnection), it receives "".
	Listen(ctx context.Context) (<-chan string, error)
}

// Send hands word to the listener of a Listen's channel ch, unless ctx
// ends first; it reports whether it did.
func Send(ctx context.Context, ch chan<- string, word string) bool {
	select {
	case ch <- word:
		return true
	case <-ctx.Done():
		return false
	}
}
