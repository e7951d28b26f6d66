package console

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-webauthn/webauthn/protocol/webauthncbor"
	"github.com/go-webauthn/webauthn/protocol/webauthncose"
	"github.com/go-webauthn/webauthn/webauthn"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/interlock-mcp/interlock"
	"github.com/interlock-mcp/interlock/approval"
	"github.com/interlock-mcp/interlock/audit"
	"github.com/interlock-mcp/interlock/config"
	"github.com/interlock-mcp/interlock/consolestate"
	"github.com/interlock-mcp/interlock/policy"
)

// TestPasskeyApprovalsInTheConsole: without a passkey's signature the
// console neither approves, denies nor grants an approval whose rule
// requires one, and its page sends the approver to register a passkey.
func TestPasskeyApprovalsInTheConsole(t *testing.T) {
	signed := func(r *rig, t *testing.T) {
		a := refund("apr_1", 1)
		a.RequirePasskey = true
		r.keep(t, a)
	}
	t.Run("the page asks for a passkey before offering a decision", func(t *testing.T) {
		r := newRig(t, false, nil)
		signed(r, t)
		b := r.signedIn(t, "key-bob")
		_, page := b.get("/console/approvals/apr_1")
		if strings.Contains(page, `value="approve"`) || strings.Contains(page, "Grant these calls") || !strings.Contains(page, `<a href="/console/passkey">Register a passkey</a>`) {
			t.Errorf("the page of an approval that requires a passkey, for an approver without one:\n%s", page)
		}
	})
	t.Run("the passkey page offers a registration at a host name", func(t *testing.T) {
		r := newRig(t, false, nil)
		r.url = strings.Replace(r.url, "127.0.0.1", "localhost", 1)
		b := r.signedIn(t, "key-bob")
		_, page := b.get("/console/passkey")
		if !strings.Contains(page, "no passkey registered for <strong>localhost</strong>") || !strings.Contains(page, `id="passkey-register"`) ||
			!strings.Contains(page, `&#34;userVerification&#34;:&#34;required&#34;`) {
			t.Errorf("the passkey page:\n%s", page)
		}
	})
	t.Run("the passkey page at an IP address says to open the console by name", func(t *testing.T) {
		r := newRig(t, false, nil)
		b := r.signedIn(t, "key-bob")
		_, page := b.get("/console/passkey")
		if strings.Contains(page, `id="passkey-register"`) || !strings.Contains(page, "this console was opened at the address 127.0.0.1") {
			t.Errorf("the passkey page:\n%s", page)
		}
	})
	tests := []struct {
		name string
		path string
		form url.Values
		says string
	}{
		{"approve without an assertion", "/console/approvals/apr_1/decide", url.Values{"decision": {"approve"}},
			"only when it is signed with your passkey"},
		{"deny without an assertion", "/console/approvals/apr_1/decide", url.Values{"decision": {"deny"}},
			"only when it is signed with your passkey"},
		{"approve with an assertion that is not one", "/console/approvals/apr_1/decide", url.Values{"decision": {"approve"}, "assertion": {`{"id":"x"}`}},
			"only when it is signed with your passkey"},
		{"grant a scope", "/console/approvals/apr_1/grant", url.Values{"ttl": {"1h"}, "uses": {"3"}},
			"no standing scope may be granted"},
	}
	for _, tt := range tests {
		t.Run("refused: "+tt.name, func(t *testing.T) {
			r := newRig(t, false, nil)
			signed(r, t)
			b := r.signedIn(t, "key-bob")
			tt.form.Set("csrf", b.csrf("/console/"))
			res, page := b.post(tt.path, tt.form)
			if res.StatusCode != http.StatusForbidden || !strings.Contains(page, tt.says) {
				t.Errorf("status %d, want 403 saying %q:\n%s", res.StatusCode, tt.says, page)
			}
			a, _ := r.store.Get(context.Background(), "apr_1")
			if a.State(time.Now()) != approval.Pending {
				t.Errorf("state %s after the refusal", a.State(time.Now()))
			}
		})
	}
}

// softKey is a software authenticator: a P-256 key whose assertions
// report whatever signature counter a test gives.
type softKey struct {
	id  []byte
	key *ecdsa.PrivateKey
}

const (
	keyRPID   = "localhost"
	keyOrigin = "https://localhost"
)

func newSoftKey(t *testing.T) *softKey {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	id := make([]byte, 16)
	rand.Read(id)
	return &softKey{id: id, key: key}
}

// credential is the key as a registration stores it, its counter at
// counter.
func (k *softKey) credential(t *testing.T, counter uint32) webauthn.Credential {
	t.Helper()
	point, err := k.key.PublicKey.Bytes()
	if err != nil {
		t.Fatal(err)
	}
	public, err := webauthncbor.Marshal(webauthncose.EC2PublicKeyData{
		PublicKeyData: webauthncose.PublicKeyData{KeyType: int64(webauthncose.EllipticKey), Algorithm: int64(webauthncose.AlgES256)},
		Curve:         int64(webauthncose.P256), XCoord: point[1:33], YCoord: point[33:]})
	if err != nil {
		t.Fatal(err)
	}
	return webauthn.Credential{ID: k.id, PublicKey: public, AttestationType: "none",
		Flags:         webauthn.CredentialFlags{UserPresent: true, UserVerified: true},
		Authenticator: webauthn.Authenticator{SignCount: counter}}
}

// assert signs challenge for the user with handle user, with the user
// present and verified, reporting counter; it returns the assertion as
// the console's page posts it.
func (k *softKey) assert(t *testing.T, user, challenge []byte, counter uint32) json.RawMessage {
	t.Helper()
	client, err := json.Marshal(map[string]any{"type": "webauthn.get", "origin": keyOrigin, "crossOrigin": false,
		"challenge": base64.RawURLEncoding.EncodeToString(challenge)})
	if err != nil {
		t.Fatal(err)
	}
	rp := sha256.Sum256([]byte(keyRPID))
	data := binary.BigEndian.AppendUint32(append(rp[:], 0x05), counter) // flags: user present, user verified
	clientHash := sha256.Sum256(client)
	digest := sha256.Sum256(append(slices.Clip(data), clientHash[:]...))
	signature, err := ecdsa.SignASN1(rand.Reader, k.key, digest[:])
	if err != nil {
		t.Fatal(err)
	}
	b64 := base64.RawURLEncoding.EncodeToString
	assertion, err := json.Marshal(map[string]any{"id": b64(k.id), "rawId": b64(k.id), "type": "public-key",
		"response": map[string]string{"clientDataJSON": b64(client), "authenticatorData": b64(data),
			"signature": b64(signature), "userHandle": b64(user)}})
	if err != nil {
		t.Fatal(err)
	}
	return assertion
}

// passkeyRig is a gate whose payouts bob approves with a passkey the
// console's verifier holds, registered with its counter at stored.
type passkeyRig struct {
	gate  *interlock.Gate
	keys  *passkeys
	key   *softKey
	audit *audit.Memory
	runs  atomic.Int64
	tool  *interlock.Tool
}

var (
	payer    = interlock.Identity{Principal: "alice", Tenant: "acme"}
	approver = interlock.Identity{Principal: "bob", Tenant: "acme"}
)

func newPasskeyRig(t *testing.T, stored uint32) *passkeyRig {
	t.Helper()
	f, err := config.Parse("approvals.yaml", []byte(`
rules:
  - name: payouts
    match: {tools: [pay_out]}
    mode: approval
    approvers: [bob]
    require_passkey: true
`), func(string) (string, bool) { return "", false })
	if err != nil {
		t.Fatal(err)
	}
	r := &passkeyRig{keys: &passkeys{state: consolestate.NewMemory()}, key: newSoftKey(t), audit: &audit.Memory{}}
	r.gate, err = interlock.NewGate(&f.Policy, &interlock.GateOptions{Approvals: interlock.NewApprovalService(interlock.ApprovalOptions{
		CompileCondition: policy.CompileCondition, Passkeys: r.keys, Audit: r.audit, Logger: quiet}), Logger: quiet, Audit: r.audit,
		Getenv: func(k string) string {
			if k == "MCP_DRY_RUN" {
				return "false"
			}
			return strings.Repeat("s", 32)
		}})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.keys.add(context.Background(), approver, registered{credential: r.key.credential(t, stored), rpID: keyRPID, origin: keyOrigin}); err != nil {
		t.Fatal(err)
	}
	if r.tool, err = interlock.NewTool("pay_out", "", interlock.HintsOf(nil), nil); err != nil {
		t.Fatal(err)
	}
	return r
}

// call is alice's payout of amount.
func (r *passkeyRig) call(amount int) interlock.Body {
	args := json.RawMessage(`{"amount":` + strconv.Itoa(amount) + `}`)
	return interlock.BodyOfResult(r.gate.Call(context.Background(), r.tool, payer, args,
		func(context.Context, json.RawMessage) (*mcp.CallToolResult, error) {
			r.runs.Add(1)
			return &mcp.CallToolResult{Content: []mcp.Content{}}, nil
		}))
}

// pending is the approval alice's payout of amount waits for.
func (r *passkeyRig) pending(t *testing.T, amount int) *approval.Approval {
	t.Helper()
	b := r.call(amount)
	if b.Code != interlock.CodeApprovalPending {
		t.Fatalf("the payout of %d: %+v", amount, b)
	}
	a, err := r.gate.Approvals().Store().Get(context.Background(), b.ApprovalID)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// approve has bob approve a with his passkey, reporting counter.
func (r *passkeyRig) approve(t *testing.T, a *approval.Approval, counter uint32) error {
	t.Helper()
	challenge, err := a.PasskeyChallenge(approval.Approve)
	if err != nil {
		t.Fatal(err)
	}
	assertion := r.key.assert(t, r.account(t).id, challenge, counter)
	_, err = r.gate.Approvals().DecideWithPasskey(context.Background(), a.ID, approver, approval.Approve, "", assertion)
	return err
}

// account is bob's account as the store keeps it.
func (r *passkeyRig) account(t *testing.T) *passkeyAccount {
	t.Helper()
	a, err := r.keys.account(context.Background(), approver)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// stored is the counter the verifier keeps for bob's passkey.
func (r *passkeyRig) stored(t *testing.T) uint32 {
	return r.account(t).credentials[0].credential.Authenticator.SignCount
}

// TestPasskeySignatureCounter: an assertion counts only when its
// signature counter grows past the one stored for its credential, or
// when the authenticator reports 0 always; a refusal is audited, and an
// accepted assertion is verified again, and passes, when its call runs.
func TestPasskeySignatureCounter(t *testing.T) {
	type step struct {
		counter uint32
		ok      bool
	}
	tests := []struct {
		name   string
		stored uint32
		steps  []step
	}{
		{"a growing counter passes", 5, []step{{6, true}, {7, true}, {1000, true}}},
		{"the same counter again is refused", 5, []step{{6, true}, {6, false}, {7, true}}},
		{"the stored counter is refused", 5, []step{{5, false}, {6, true}}},
		{"a lower counter is refused", 5, []step{{4, false}, {9, true}, {8, false}, {1, false}, {10, true}}},
		{"an authenticator that reports 0 always passes", 0, []step{{0, true}, {0, true}, {0, true}}},
		{"0 after a counter is refused", 3, []step{{0, false}, {4, true}}},
		{"a counter that starts after 0 is kept", 0, []step{{0, true}, {1, true}, {0, false}, {1, false}, {2, true}}},
		{"the highest counter is refused after a wrap", 0, []step{{math.MaxUint32, true}, {math.MaxUint32, false}, {0, false}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := newPasskeyRig(t, tt.stored)
			want, refusals, runs := tt.stored, 0, int64(0)
			for i, s := range tt.steps {
				amount := 100 + i
				a := r.pending(t, amount)
				err := r.approve(t, a, s.counter)
				if s.ok {
					if err != nil {
						t.Fatalf("step %d, counter %d after %d: %v", i, s.counter, want, err)
					}
					want = s.counter
					// The gate verifies the approval's assertion again
					// before the call runs: it is the one accepted.
					if b := r.call(amount); b.Code != "" || r.runs.Load() != runs+1 {
						t.Fatalf("step %d: the approved call answered %+v, ran %d times", i, b, r.runs.Load()-runs)
					}
					runs++
				} else {
					if !errors.Is(err, interlock.ErrPasskeyInvalid) || !errors.Is(err, interlock.ErrPasskeyReplayed) {
						t.Fatalf("step %d, counter %d after %d: %v, want ErrPasskeyReplayed", i, s.counter, want, err)
					}
					refusals++
					got, _ := r.gate.Approvals().Store().Get(context.Background(), a.ID)
					if got.State(time.Now()) != approval.Pending || r.call(amount).Code != interlock.CodeApprovalPending {
						t.Fatalf("step %d: after the refusal the approval is %s", i, got.State(time.Now()))
					}
					recs := r.audit.Events("passkey_refused")
					if len(recs) != refusals {
						t.Fatalf("step %d: %d passkey_refused records, want %d", i, len(recs), refusals)
					}
					rec := recs[len(recs)-1]
					if rec.Tenant != "acme" || rec.Principal != "bob" || rec.Caller != "alice" || rec.Approval != a.ID ||
						rec.Tool != "pay_out" || rec.Rule != "payouts" || !strings.Contains(rec.Detail, fmt.Sprintf("signature counter did not grow: %d after %d, credential ", s.counter, want)) {
						t.Errorf("step %d: the record %+v", i, rec)
					}
				}
				if got := r.stored(t); got != want {
					t.Fatalf("step %d: stored counter %d, want %d", i, got, want)
				}
			}
			if runs != r.runs.Load() || len(r.audit.Events("passkey_refused")) != refusals {
				t.Errorf("%d calls ran, want %d; %d refusals recorded, want %d",
					r.runs.Load(), runs, len(r.audit.Events("passkey_refused")), refusals)
			}
		})
	}
}

// TestPasskeyCounterRace: of two assertions with one counter, made at
// once for two approvals, one counts.
func TestPasskeyCounterRace(t *testing.T) {
	r := newPasskeyRig(t, 5)
	approvals := []*approval.Approval{r.pending(t, 100), r.pending(t, 200)}
	// Both assertions read the stored counter before either moves it: the
	// first two compare-and-swaps wait for each other, so one of them
	// always loses, rather than only when the scheduler happens to
	// interleave the two.
	swaps := &swapBarrier{Store: r.keys.state, want: 2, met: make(chan struct{})}
	r.keys.state = swaps
	errs := make([]error, len(approvals))
	var wg sync.WaitGroup
	for i, a := range approvals {
		wg.Go(func() { errs[i] = r.approve(t, a, 6) })
	}
	wg.Wait()
	if swaps.late.Load() {
		t.Fatal("the two assertions did not reach the counter's compare-and-swap at once")
	}
	if (errs[0] == nil) == (errs[1] == nil) || !errors.Is(errors.Join(errs...), interlock.ErrPasskeyReplayed) {
		t.Errorf("two assertions with counter 6: %v", errs)
	}
	if r.stored(t) != 6 || len(r.audit.Events("passkey_refused")) != 1 {
		t.Errorf("stored counter %d, %d refusals recorded", r.stored(t), len(r.audit.Events("passkey_refused")))
	}
}

// swapBarrier holds the first want compare-and-swaps of a passkey until
// want of them have arrived, or five seconds pass (late).
type swapBarrier struct {
	consolestate.Store
	want    int
	arrived atomic.Int32
	met     chan struct{}
	late    atomic.Bool
}

func (b *swapBarrier) SwapPasskey(ctx context.Context, owner consolestate.Owner, p consolestate.Passkey) (bool, error) {
	if n := int(b.arrived.Add(1)); n == b.want {
		close(b.met)
	} else if n < b.want {
		select {
		case <-b.met:
		case <-time.After(5 * time.Second):
			b.late.Store(true)
		}
	}
	return b.Store.SwapPasskey(ctx, owner, p)
}
