package gateway

import (
	"context"
	"crypto/subtle"
	"errors"
	"net/http"
	"slices"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/auth"

	"github.com/interlock-mcp/interlock"
	"github.com/interlock-mcp/interlock/console"
	"github.com/interlock-mcp/interlock/seal"
)

// Operator is whom a one-time console link signs in on a gateway without
// API keys: the person who started it, on this machine.
const Operator = "operator"

// newConsole makes the approvers' console over the gateway's approvals, its
// API keys, its OAuth issuer, its audit log and the store and signal its
// state is shared by (see [Options.ConsoleState]), where one-time links
// are kept too, whoever made them; boxes, of the sealing keys every
// replica shares, seals its sign-ins under way.
func (g *Gateway) newConsole(o Options, boxes *seal.Sealer) *console.Console {
	opts := console.Options{Approvals: g.approvals, Logger: g.log, SignIn: g.consoleSignIn(o.PublicURL), Recheck: g.recheckCredential,
		State: o.ConsoleState, Signal: o.ConsoleSignal, Sealer: boxes, Instance: o.Instance,
		Refused: func(_ context.Context, r *http.Request, why string) { g.recordRefusal(r, why) }}
	if len(g.config().Auth.Keys) > 0 {
		opts.Authenticate = func(ctx context.Context, key string) (interlock.Identity, console.Credential, error) {
			ti, err := g.verifyKey(ctx, key, nil)
			if err != nil {
				return interlock.Identity{}, console.Credential{}, err
			}
			return identityOf(ti), console.Credential{Kind: console.CredentialKey, Ref: HashKey(key)}, nil
		}
	}
	if h, ok := o.Audit.(console.History); ok {
		opts.History = h
	}
	return console.New(opts)
}

// Console returns the approvers' console.
func (g *Gateway) Console() *console.Console { return g.console }

// OperatorLoginLink returns a link that signs the local operator in to the
// console once, within a day, under base (such as http://127.0.0.1:8740);
// empty when API keys or an OAuth issuer are configured, since approvers
// then sign in with those. The link is kept in the console's store, so any
// gateway sharing it spends it.
func (g *Gateway) OperatorLoginLink(ctx context.Context, base string) (string, error) {
	if g.config().Auth.Configured() {
		return "", nil
	}
	once, err := g.console.OneTimeLogin(ctx, interlock.Identity{Principal: Operator, Tenant: interlock.TenantLocal})
	if err != nil {
		return "", err
	}
	return strings.TrimSuffix(base, "/") + "/console/login?once=" + once, nil
}

// consoleHandler serves the console; without authentication only under a
// loopback Host, which defeats DNS rebinding as on the REST face.
func (g *Gateway) consoleHandler() http.Handler {
	h := g.console.Handler()
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !g.config().Auth.Configured() && !loopbackHost(r.Host) {
			http.Error(w, "Without API keys this gateway's console answers only loopback names such as 127.0.0.1.", http.StatusForbidden)
			return
		}
		// A page without a session (sign-in among them) may read a body
		// for long: its connection counts as unauthenticated meanwhile.
		if g.console.SignedIn(r) {
			proveConn(r.Context())
		} else {
			unprovenConn(r.Context())
		}
		h.ServeHTTP(w, r)
	})
}

// identityOf is who a verified API key or access token names: the one
// reading of a credential's identity, for callers and approvers alike.
func identityOf(ti *auth.TokenInfo) interlock.Identity {
	principal, _ := ti.Extra["principal"].(string)
	tenant, _ := ti.Extra["tenant"].(string)
	groups, _ := ti.Extra["groups"].([]string)
	return interlock.Identity{Principal: principal, Tenant: tenant, Groups: groups}
}

// recheckCredential is who a console session's credential names under the
// configuration in force: the key of that SHA-256, if it is still there;
// the local operator, while the gateway still has no authentication; an
// identity provider's sign-in, while the gateway still takes its issuer
// (the session ends at the sign-in's own end in any case).
func (g *Gateway) recheckCredential(_ context.Context, who interlock.Identity, cred console.Credential) (interlock.Identity, error) {
	a := g.config().Auth
	switch cred.Kind {
	case console.CredentialKey:
		for _, k := range a.Keys {
			if subtle.ConstantTimeCompare([]byte(k.SHA256), []byte(cred.Ref)) == 1 {
				return interlock.Identity{Tenant: k.Tenant, Principal: k.Principal, Groups: k.Groups}, nil
			}
		}
		return interlock.Identity{}, errors.New("no API key of that hash is configured")
	case console.CredentialLink:
		if !a.Configured() {
			return interlock.Identity{Tenant: interlock.TenantLocal, Principal: Operator}, nil
		}
		return interlock.Identity{}, errors.New("the gateway now authenticates its callers")
	case console.CredentialProvider:
		if a.OAuth != nil {
			return who, nil
		}
		return interlock.Identity{}, errors.New("the gateway no longer takes the identity provider's sign-ins")
	}
	return interlock.Identity{}, errors.New("a credential the gateway cannot check again")
}

// currentIdentity is who as the configuration in force knows them: the
// groups of every API key of that tenant and principal, and false when no
// key names them any more. Principals the gateway cannot list (an OAuth
// issuer's, or the local operator of a gateway without keys) are taken as
// they were.
func (g *Gateway) currentIdentity(who interlock.Identity) (interlock.Identity, bool) {
	a := g.config().Auth
	if len(a.Keys) == 0 {
		return who, true
	}
	now := interlock.Identity{Tenant: who.Tenant, Principal: who.Principal}
	found := false
	for _, k := range a.Keys {
		if k.Tenant == who.Tenant && k.Principal == who.Principal {
			found = true
			for _, grp := range k.Groups {
				if !slices.Contains(now.Groups, grp) {
					now.Groups = append(now.Groups, grp)
				}
			}
		}
	}
	if !found && a.OAuth != nil {
		return who, true
	}
	return now, found
}

// approvalURL is the base of the approval_url a pending approval carries.
func approvalURL(public string) string {
	if public == "" {
		return ""
	}
	return strings.TrimSuffix(public, "/") + console.ApprovalsPath
}
