package interlock

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/interlock-mcp/interlock/seal"
)

// A grant is a sealed, single-use permission bound to one call: a confirm
// token, the request state of a confirmation form, or the wrapped state of
// a question a tool asked. All three are issued and spent the same way;
// they differ in their kind (so one never passes for another), their place
// in the store, and their words.
type grant struct {
	kind seal.Kind
	// store separates the grants of one binding in the token store.
	store string
	// name and successor are what messages call the grant and what
	// replaces it.
	name, successor string
	// expired answers a grant presented too late.
	expired func(c *Call, claims seal.Claims) *Error
}

var (
	confirmGrant = grant{
		kind: seal.KindConfirm, name: "confirm token", successor: "confirmation request",
		expired: func(_ *Call, claims seal.Claims) *Error {
			return &Error{Code: CodeConsentTokenExpired,
				Message: fmt.Sprintf("The confirm token expired at %s.", claims.Expires.UTC().Format(time.RFC3339))}
		},
	}
	formGrant = grant{
		kind: seal.KindRequestState, store: "form:", name: "request state", successor: "confirmation",
		expired: func(c *Call, _ seal.Claims) *Error {
			return &Error{Code: CodeCancelled,
				Message: fmt.Sprintf("Nobody answered the confirmation for %s in time; nothing ran.", c.Tool)}
		},
	}
	relayGrant = grant{
		kind: seal.KindUpstreamState, store: "relay:", name: "request state", successor: "question",
		expired: func(c *Call, _ seal.Claims) *Error {
			return &Error{Code: CodeCancelled,
				Message: fmt.Sprintf("Nobody answered the question of %s in time; it did not finish.", c.Tool)}
		},
	}
)

func (k grant) binding(tenant, principal, tool string) string {
	return k.store + seal.BindingKey(tenant, principal, tool)
}

// issue seals a grant for c, bound to the arguments the client sent and
// the tool's definition, and makes it the binding's only live grant of its
// kind: issuing supersedes the earlier one. The store keeps the grant's
// fingerprint, so only these exact claims can be spent.
func (g *Gate) issue(ctx context.Context, k grant, c *Call, ttl time.Duration, payload []byte) (string, seal.Claims, error) {
	digest, err := c.digest()
	if err != nil {
		return "", seal.Claims{}, fmt.Errorf("digesting arguments of %s: %w", c.Tool, err)
	}
	now := time.Now()
	claims := seal.Claims{
		Kind: k.kind, Tenant: c.Tenant, Principal: c.Principal, Tool: c.Tool,
		Digest: digest, Definition: c.definition,
		IssuedAt: now, Expires: now.Add(ttl), Nonce: seal.NewNonce(), Payload: payload,
	}
	if err := g.tokens.Issue(ctx, k.binding(c.Tenant, c.Principal, c.Tool), claims.Fingerprint(), ttl); err != nil {
		return "", seal.Claims{}, confirmationStoreDown(c, err)
	}
	return g.sealer.Seal(claims), claims, nil
}

// confirmationStoreDown answers a call whose confirmation (a grant, an
// approval, a standing grant) could not be written or read. Approvers meet
// the same failure as StoreUnavailable.
func confirmationStoreDown(c *Call, err error) error {
	return storeDown(c, err, "confirmation", "be confirmed")
}

// storeDown answers a call that could not go on because interlock's own
// store of the kind named could not be reached: a transient failure, in
// which nothing ran; the call could not do what it names.
func storeDown(c *Call, err error, kind, do string) error {
	return &Error{
		Code:         CodeUpstreamUnavailable,
		Message:      fmt.Sprintf("interlock's %s store cannot be reached, so %s cannot %s now; nothing ran.", kind, c.Tool, do),
		Hint:         "Retry in a few seconds; if it keeps failing, tell the operator that interlock's store is down.",
		RetryAfterMS: 2000,
		Err:          err,
	}
}

// spend checks a grant presented with c and consumes it, in this order:
// seal, kind, expiry, consume, binding. The grant is consumed before its
// binding is compared, so one presented for the wrong call is gone
// afterwards: a mistake or a probe costs a new confirmation, never a second
// try. again is the recovery hint of every refusal.
func (g *Gate) spend(ctx context.Context, k grant, c *Call, token, again string) (seal.Claims, error) {
	claims, err := g.sealer.Open(token)
	if err != nil || claims.Kind != k.kind {
		return claims, &Error{Code: CodeConsentTokenInvalid, Hint: again,
			Message: fmt.Sprintf("The %s is not valid: it was altered, cut short, or issued by another deployment.", k.name)}
	}
	if !time.Now().Before(claims.Expires) {
		e := k.expired(c, claims)
		e.Hint = again
		return claims, e
	}
	live, err := g.tokens.Consume(ctx, k.binding(claims.Tenant, claims.Principal, claims.Tool), claims.Fingerprint())
	if err != nil {
		return claims, confirmationStoreDown(c, err)
	}
	if !live {
		return claims, &Error{Code: CodeConsentTokenInvalid, Hint: again,
			Message: fmt.Sprintf("The %s was already used, or a newer %s for this tool replaced it.", k.name, k.successor)}
	}
	var differ []string
	if claims.Tenant != c.Tenant {
		differ = append(differ, "tenant")
	}
	if claims.Principal != c.Principal {
		differ = append(differ, "caller")
	}
	if claims.Tool != c.Tool {
		differ = append(differ, "tool")
	}
	if digest, err := c.digest(); err != nil || digest != claims.Digest {
		differ = append(differ, "arguments")
	}
	if claims.Definition != c.definition {
		differ = append(differ, "tool definition (the tool changed since)")
	}
	if len(differ) > 0 {
		return claims, &Error{Code: CodeConsentTokenMismatch, Hint: again,
			Message: fmt.Sprintf("The %s does not match this call's %s; it is used up now.", k.name, strings.Join(differ, ", "))}
	}
	return claims, nil
}
