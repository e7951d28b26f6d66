package gateway

import (
	"context"
	"net/http"
	"slices"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/auth"

	"github.com/interlock-mcp/interlock"
	"github.com/interlock-mcp/interlock/console"
)

// Operator is whom a one-time console link signs in on a gateway without
// API keys: the person who started it, on this machine.
const Operator = "operator"

// newConsole makes the approvers' console over the gateway's gate, its
// API keys, its OAuth issuer and its audit log.
func (g *Gateway) newConsole(audit interlock.AuditLog, public string) *console.Console {
	opts := console.Options{Gate: g.gate, Logger: g.log, SignIn: g.consoleSignIn(public)}
	if len(g.config().Auth.Keys) > 0 {
		opts.Authenticate = func(ctx context.Context, key string) (interlock.Identity, error) {
			ti, err := g.verifyKey(ctx, key, nil)
			if err != nil {
				return interlock.Identity{}, err
			}
			return approverOf(ti), nil
		}
	}
	if h, ok := audit.(console.History); ok {
		opts.History = h
	}
	return console.New(opts)
}

// Console returns the approvers' console.
func (g *Gateway) Console() *console.Console { return g.console }

// OperatorLoginLink returns a link that signs the local operator in to the
// console once, under base (such as http://127.0.0.1:8740); empty when API
// keys or an OAuth issuer are configured, since approvers then sign in
// with those.
func (g *Gateway) OperatorLoginLink(base string) string {
	if g.config().Auth.Configured() {
		return ""
	}
	once := g.console.OneTimeLogin(interlock.Identity{Principal: Operator, Tenant: interlock.TenantLocal})
	return strings.TrimSuffix(base, "/") + "/console/login?once=" + once
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
		h.ServeHTTP(w, r)
	})
}

// approverOf is who a verified API key or access token names.
func approverOf(ti *auth.TokenInfo) interlock.Identity {
	principal, _ := ti.Extra["principal"].(string)
	tenant, _ := ti.Extra["tenant"].(string)
	groups, _ := ti.Extra["groups"].([]string)
	return interlock.Identity{Principal: principal, Tenant: tenant, Groups: groups}
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
