package console

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"slices"
	"strings"

	"github.com/go-webauthn/webauthn/protocol"
	"github.com/go-webauthn/webauthn/webauthn"

	"github.com/interlock-mcp/interlock"
	"github.com/interlock-mcp/interlock/approval"
	"github.com/interlock-mcp/interlock/consolestate"
)

// registered is a credential with the relying party it was made for: the
// host the console was opened at.
type registered struct {
	credential webauthn.Credential
	rpID       string
	origin     string
	// accepted are the digests of what the credential signed in the
	// assertions accepted from it, oldest first: the gate verifies a
	// decision's assertion again before its call runs, and that one must
	// pass although its counter no longer grows.
	accepted [][sha256.Size]byte
	// rev is the store's revision of it, which a change must still find.
	rev int64
}

// keepAccepted bounds the assertions remembered per credential. An
// approval's call runs long before its approver signs this many others;
// one that does not is refused, never run unchecked.
const keepAccepted = 1024

// passkeyAccount is one approver's WebAuthn user; it implements
// webauthn.User.
type passkeyAccount struct {
	id          []byte
	name        string
	credentials []registered
}

func (u *passkeyAccount) WebAuthnID() []byte          { return u.id }
func (u *passkeyAccount) WebAuthnName() string        { return u.name }
func (u *passkeyAccount) WebAuthnDisplayName() string { return u.name }
func (u *passkeyAccount) WebAuthnCredentials() []webauthn.Credential {
	out := make([]webauthn.Credential, len(u.credentials))
	for i, r := range u.credentials {
		out[i] = r.credential
	}
	return out
}

// forHost returns the ids of the credentials made for rpID.
func (u *passkeyAccount) forHost(rpID string) [][]byte {
	var ids [][]byte
	for _, r := range u.credentials {
		if r.rpID == rpID {
			ids = append(ids, r.credential.ID)
		}
	}
	return ids
}

// passkeys are the approvers' registered credentials, kept in the
// console's store, so a passkey registered on one replica signs on every
// other, and its signature counter is one counter for all of them. It
// verifies the assertions of decisions for the gate.
type passkeys struct {
	state consolestate.Store
}

// forget drops the registrations of every owner gone says has no
// credential left, and returns who they were.
func (p *passkeys) forget(ctx context.Context, gone func(interlock.Identity) bool) ([]interlock.Identity, error) {
	owners, err := p.state.PasskeyOwners(ctx)
	if err != nil {
		return nil, fmt.Errorf("listing the approvers with passkeys: %w", err)
	}
	var out []interlock.Identity
	for _, o := range owners {
		who := interlock.Identity{Tenant: o.Tenant, Principal: o.Principal}
		if !gone(who) {
			continue
		}
		if err := p.state.ForgetPasskeys(ctx, o); err != nil {
			return out, fmt.Errorf("forgetting passkeys: %w", err)
		}
		out = append(out, who)
	}
	return out, nil
}

// account returns who's account as the store holds it now, its user
// handle made on first use.
func (p *passkeys) account(ctx context.Context, who interlock.Identity) (*passkeyAccount, error) {
	owner := consolestate.OwnerOf(who)
	fresh := make([]byte, 32)
	if _, err := rand.Read(fresh); err != nil {
		panic(err)
	}
	id, err := p.state.PasskeyUser(ctx, owner, fresh)
	if err != nil {
		return nil, fmt.Errorf("reading a passkey user: %w", err)
	}
	kept, err := p.state.Passkeys(ctx, owner)
	if err != nil {
		return nil, fmt.Errorf("reading passkeys: %w", err)
	}
	a := &passkeyAccount{id: id, name: who.Principal}
	for _, k := range kept {
		r := registered{rpID: k.RPID, origin: k.Origin, accepted: k.Accepted, rev: k.Rev}
		if err := json.Unmarshal(k.Credential, &r.credential); err != nil {
			return nil, fmt.Errorf("reading a passkey: %w", err)
		}
		a.credentials = append(a.credentials, r)
	}
	return a, nil
}

// kept is r as the store keeps it.
func (r registered) kept() (consolestate.Passkey, error) {
	b, err := json.Marshal(r.credential)
	if err != nil {
		return consolestate.Passkey{}, fmt.Errorf("encoding a passkey: %w", err)
	}
	return consolestate.Passkey{ID: r.credential.ID, RPID: r.rpID, Origin: r.origin, Credential: b, Accepted: r.accepted, Rev: r.rev}, nil
}

// maxSwaps bounds the tries of a counter's move that keeps losing races.
const maxSwaps = 50

// accept records that a credential of who made an assertion whose signed
// data has the given digest and signature counter, once its signature is
// verified. It refuses, wrapping [interlock.ErrPasskeyReplayed], an
// assertion not accepted before whose counter is not above the one
// stored, unless both are 0: an authenticator without a counter reports 0
// always (WebAuthn §6.1.1). The check and the update are one
// compare-and-set in the store ([consolestate.Store.SwapPasskey]), tried
// again on the counter another replica moved first, so two assertions
// with one counter never both pass, on one replica or on two.
func (p *passkeys) accept(ctx context.Context, who interlock.Identity, id []byte, signed [sha256.Size]byte, counter uint32) error {
	for range maxSwaps {
		a, err := p.account(ctx, who)
		if err != nil {
			return err
		}
		i := slices.IndexFunc(a.credentials, func(r registered) bool { return bytes.Equal(r.credential.ID, id) })
		if i < 0 {
			return errors.New("the assertion's credential is not one the approver registered")
		}
		r := a.credentials[i]
		if slices.Contains(r.accepted, signed) {
			return nil
		}
		stored := r.credential.Authenticator
		updated := stored
		updated.UpdateCounter(counter)
		if updated.CloneWarning {
			// The record names the credential by a prefix of its id: the
			// audit record's detail is short.
			return fmt.Errorf("%w: %d after %d, credential %.12s", interlock.ErrPasskeyReplayed,
				counter, stored.SignCount, base64.RawURLEncoding.EncodeToString(id))
		}
		r.credential.Authenticator.SignCount = updated.SignCount
		r.accepted = slices.Clone(r.accepted)
		if len(r.accepted) >= keepAccepted {
			r.accepted = slices.Delete(r.accepted, 0, len(r.accepted)-keepAccepted+1)
		}
		r.accepted = append(r.accepted, signed)
		k, err := r.kept()
		if err != nil {
			return err
		}
		swapped, err := p.state.SwapPasskey(ctx, consolestate.OwnerOf(who), k)
		if err != nil {
			return fmt.Errorf("moving a passkey's counter: %w", err)
		}
		if swapped {
			return nil
		}
	}
	return fmt.Errorf("a passkey's counter moved concurrently %d times in a row", maxSwaps)
}

// add keeps a credential who registered.
func (p *passkeys) add(ctx context.Context, who interlock.Identity, r registered) error {
	k, err := r.kept()
	if err != nil {
		return err
	}
	if err := p.state.AddPasskey(ctx, consolestate.OwnerOf(who), k); err != nil {
		return fmt.Errorf("keeping a passkey: %w", err)
	}
	return nil
}

// relyingParty is the console's WebAuthn relying party for the host the
// request came to.
func relyingParty(rpID, origin string) (*webauthn.WebAuthn, error) {
	wa, err := webauthn.New(&webauthn.Config{RPID: rpID, RPDisplayName: "interlock approvals", RPOrigins: []string{origin}})
	if err != nil {
		return nil, fmt.Errorf("relying party %s: %w", rpID, err)
	}
	return wa, nil
}

// hostOf returns the relying party id and origin of the host r came to.
func hostOf(r *http.Request) (rpID, origin string) {
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	rpID = r.Host
	if h, _, err := net.SplitHostPort(r.Host); err == nil {
		rpID = h
	}
	return rpID, scheme + "://" + r.Host
}

// VerifyPasskey implements [interlock.PasskeyVerifier]: v.Passkey must be
// an assertion, by a credential v's approver registered, over challenge,
// with the user verified, and with a signature counter above the last one
// the credential presented, unless it is the assertion accepted before.
func (p *passkeys) VerifyPasskey(ctx context.Context, a *approval.Approval, v approval.Vote, challenge []byte) error {
	parsed, err := protocol.ParseCredentialRequestResponseBytes(v.Passkey)
	if err != nil {
		return fmt.Errorf("parsing the assertion on %s: %w", a.ID, err)
	}
	account, err := p.account(ctx, interlock.Identity{Tenant: v.Tenant, Principal: v.Principal})
	if err != nil {
		return err
	}
	for _, r := range account.credentials {
		if string(r.credential.ID) != string(parsed.RawID) {
			continue
		}
		wa, err := relyingParty(r.rpID, r.origin)
		if err != nil {
			return err
		}
		session := webauthn.SessionData{Challenge: base64.RawURLEncoding.EncodeToString(challenge), RelyingPartyID: r.rpID,
			UserID: account.id, AllowedCredentialIDs: [][]byte{r.credential.ID}, UserVerification: protocol.VerificationRequired}
		if _, err := wa.ValidateLogin(account, session, parsed); err != nil {
			return fmt.Errorf("verifying the assertion on %s: %w", a.ID, err)
		}
		// ValidateLogin compared the counter with a copy of the credential;
		// accept compares it with the stored one, and stores it.
		return p.accept(ctx, interlock.Identity{Tenant: v.Tenant, Principal: v.Principal}, r.credential.ID,
			signedData(parsed), parsed.Response.AuthenticatorData.Counter)
	}
	return errors.New("the assertion's credential is not one the approver registered")
}

// signedData is the digest of what an assertion's signature covers: its
// authenticator data and the hash of its client data. Two encodings of
// one assertion, or two signatures of one statement, have one digest.
func signedData(parsed *protocol.ParsedCredentialAssertionData) [sha256.Size]byte {
	client := sha256.Sum256(parsed.Raw.AssertionResponse.ClientDataJSON)
	h := sha256.New()
	h.Write(parsed.Raw.AssertionResponse.AuthenticatorData)
	h.Write(client[:])
	var d [sha256.Size]byte
	h.Sum(d[:0])
	return d
}

// passkeyData is what the passkey page shows.
type passkeyData struct {
	Registered int
	Host       string
	// ByAddress is set when the console was opened at an IP address,
	// which WebAuthn does not accept as a relying party.
	ByAddress bool
	// Options are the credential creation options, as JSON.
	Options string
}

func (c *Console) passkeyPage(w http.ResponseWriter, r *http.Request, s *session) {
	c.showPasskeys(w, r, s, http.StatusOK, "")
}

// showPasskeys shows the passkey page with a fresh registration
// challenge, kept in the session for the answer.
func (c *Console) showPasskeys(w http.ResponseWriter, r *http.Request, s *session, status int, problem string) {
	rpID, origin := hostOf(r)
	account, err := c.passkeys.account(r.Context(), s.who)
	if err != nil {
		c.fail(w, r, s, err)
		return
	}
	d := passkeyData{Registered: len(account.forHost(rpID)), Host: rpID}
	if net.ParseIP(rpID) != nil {
		d.ByAddress = true
		c.render(w, r, status, "passkey", c.pageFor(s, "Passkey", "passkey", page{Error: problem, Data: d}))
		return
	}
	wa, err := relyingParty(rpID, origin)
	if err != nil {
		c.fail(w, r, s, err)
		return
	}
	creation, registration, err := wa.BeginRegistration(account,
		webauthn.WithAuthenticatorSelection(protocol.AuthenticatorSelection{ResidentKey: protocol.ResidentKeyRequirementPreferred,
			UserVerification: protocol.VerificationRequired}),
		webauthn.WithExclusions(webauthn.Credentials(account.WebAuthnCredentials()).CredentialDescriptors()))
	if err != nil {
		c.fail(w, r, s, fmt.Errorf("beginning a passkey registration: %w", err))
		return
	}
	options, err := json.Marshal(creation.Response)
	if err != nil {
		c.fail(w, r, s, fmt.Errorf("encoding the passkey options: %w", err))
		return
	}
	kept, err := json.Marshal(registration)
	if err == nil {
		err = c.state.Put(r.Context(), s.key, consolestate.Registration, kept)
	}
	if err != nil {
		c.fail(w, r, s, fmt.Errorf("keeping a passkey registration's challenge: %w", err))
		return
	}
	d.Options = string(options)
	c.render(w, r, status, "passkey", c.pageFor(s, "Passkey", "passkey", page{Error: problem, Data: d}))
}

// registerPasskey verifies a new credential against the registration
// challenge the passkey page gave this session, and keeps it.
func (c *Console) registerPasskey(w http.ResponseWriter, r *http.Request, s *session) {
	kept, err := c.state.Take(r.Context(), s.key, consolestate.Registration)
	if err != nil {
		c.fail(w, r, s, fmt.Errorf("reading a passkey registration's challenge: %w", err))
		return
	}
	var registration *webauthn.SessionData
	if kept != nil {
		registration = &webauthn.SessionData{}
		if err := json.Unmarshal(kept, registration); err != nil {
			c.fail(w, r, s, fmt.Errorf("reading a passkey registration's challenge: %w", err))
			return
		}
	}
	parsed, err := protocol.ParseCredentialCreationResponseBytes([]byte(r.PostFormValue("credential")))
	if registration == nil || err != nil {
		c.showPasskeys(w, r, s, http.StatusBadRequest, "The browser did not create a passkey. Try again.")
		return
	}
	rpID, origin := hostOf(r)
	wa, err := relyingParty(rpID, origin)
	if err != nil {
		c.fail(w, r, s, err)
		return
	}
	account, err := c.passkeys.account(r.Context(), s.who)
	if err != nil {
		c.fail(w, r, s, err)
		return
	}
	credential, err := wa.CreateCredential(account, *registration, parsed)
	if err != nil {
		c.log.InfoContext(r.Context(), "passkey registration refused", "principal", s.who.Principal, "error", err)
		c.showPasskeys(w, r, s, http.StatusBadRequest, "The passkey could not be verified. Try again.")
		return
	}
	if err := c.passkeys.add(r.Context(), s.who, registered{credential: *credential, rpID: rpID, origin: origin}); err != nil {
		c.fail(w, r, s, err)
		return
	}
	c.setFlash(r.Context(), s, "Your passkey is registered for "+rpID+".")
	http.Redirect(w, r, "/console/passkey", http.StatusSeeOther)
}

// passkeyPrompt is what an approval page's script needs to ask for the
// approver's passkey.
type passkeyPrompt struct {
	// Registered is false when the approver has no passkey for this host.
	Registered                      bool
	RPID                            string
	ChallengeApprove, ChallengeDeny string
	// Credentials are the ids of the approver's credentials, base64url,
	// separated by commas.
	Credentials string
}

// promptFor returns the passkey prompt of approval a for who at r's host.
func (c *Console) promptFor(r *http.Request, a *approval.Approval, who interlock.Identity) (*passkeyPrompt, error) {
	rpID, _ := hostOf(r)
	account, err := c.passkeys.account(r.Context(), who)
	if err != nil {
		return nil, err
	}
	ids := account.forHost(rpID)
	p := &passkeyPrompt{Registered: len(ids) > 0, RPID: rpID}
	encoded := make([]string, len(ids))
	for i, id := range ids {
		encoded[i] = base64.RawURLEncoding.EncodeToString(id)
	}
	p.Credentials = strings.Join(encoded, ",")
	for _, side := range []struct {
		verdict approval.Verdict
		into    *string
	}{{approval.Approve, &p.ChallengeApprove}, {approval.Deny, &p.ChallengeDeny}} {
		challenge, err := a.PasskeyChallenge(side.verdict)
		if err != nil {
			return nil, err
		}
		*side.into = base64.RawURLEncoding.EncodeToString(challenge)
	}
	return p, nil
}
