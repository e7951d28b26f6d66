package gateway

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"time"

	"github.com/modelcontextprotocol/go-sdk/auth"

	"github.com/interlock-mcp/interlock"
	"github.com/interlock-mcp/interlock/approval"
)

// approvalView is an approval as approvers see it over REST.
type approvalView struct {
	*approval.Approval
	State string `json:"state"`
	URL   string `json:"url,omitempty"`
}

func (g *Gateway) view(a *approval.Approval) approvalView {
	return approvalView{Approval: a, State: a.State(time.Now())}
}

// routeApprovals adds the approvers' REST face to mux, one named handler
// per route:
//
//	GET  /v1/approvals               pending approvals the caller may decide
//	GET  /v1/approvals/{id}          one the caller may see
//	POST /v1/approvals/{id}/approve  {"reason": "…"}
//	POST /v1/approvals/{id}/deny     {"reason": "…"}
//	POST /v1/approvals/{id}/grant    {"when": "…", "ttl": "2h", "uses": 10, "reason": "…"}
//	GET  /v1/grants                  the grants the caller may see
//	POST /v1/grants/{id}/revoke
//
// The approver is the API key's (or token's) identity; without keys there
// is nobody to tell from the caller, so the face refuses. Who may see or
// decide what is package approval's to say, and a refusal's code and
// words refusal.Of's.
func (g *Gateway) routeApprovals(mux *http.ServeMux) {
	for _, route := range []struct {
		pattern string
		handle  func(http.ResponseWriter, *http.Request, interlock.Identity)
	}{
		{"GET /v1/approvals", g.handleListApprovals},
		{"GET /v1/approvals/{id}", g.handleGetApproval},
		{"POST /v1/approvals/{id}/approve", g.handleDecide(approval.Approve)},
		{"POST /v1/approvals/{id}/deny", g.handleDecide(approval.Deny)},
		{"POST /v1/approvals/{id}/grant", g.handleGrantScope},
		{"GET /v1/grants", g.handleListGrants},
		{"POST /v1/grants/{id}/revoke", g.handleRevokeGrant},
	} {
		mux.HandleFunc(route.pattern, func(w http.ResponseWriter, r *http.Request) {
			if who, ok := g.approver(w, r); ok {
				route.handle(w, r, who)
			}
		})
	}
}

func (g *Gateway) handleListApprovals(w http.ResponseWriter, r *http.Request, who interlock.Identity) {
	pending, err := g.approvals.Store().List(r.Context())
	if err != nil {
		writeError(w, interlock.StoreUnavailable(err, "the approvals cannot be listed now"))
		return
	}
	out := []approvalView{}
	for _, a := range pending {
		if approval.MayDecide(who, a) == nil {
			out = append(out, g.view(a))
		}
	}
	writeJSON(w, http.StatusOK, map[string]any{"approvals": out})
}

func (g *Gateway) handleGetApproval(w http.ResponseWriter, r *http.Request, who interlock.Identity) {
	a, err := g.approvals.Store().Get(r.Context(), r.PathValue("id"))
	if err == nil && !approval.MaySee(who, a.Subject()) {
		// Neither the caller nor one the rule names: as if it did not
		// exist.
		err = approval.ErrUnknown
	}
	if err != nil {
		writeError(w, interlock.StoreUnavailable(err, "the approval cannot be shown now"))
		return
	}
	writeJSON(w, http.StatusOK, g.view(a))
}

// handleDecide records the caller's verdict, with the reason the body may
// give.
func (g *Gateway) handleDecide(verdict approval.Verdict) func(http.ResponseWriter, *http.Request, interlock.Identity) {
	return func(w http.ResponseWriter, r *http.Request, who interlock.Identity) {
		var body struct {
			Reason string `json:"reason"`
		}
		if r.ContentLength != 0 {
			data, err := readBody(w, r, 64<<10)
			if err != nil {
				writeError(w, err)
				return
			}
			dec := json.NewDecoder(bytes.NewReader(data))
			dec.DisallowUnknownFields()
			if err := dec.Decode(&body); err != nil {
				writeError(w, &interlock.Error{Code: interlock.CodeValidationFailed, Err: err,
					Message: `The request body is not a JSON object of the form {"reason": "…"}.`,
					Hint:    `Send {"reason": "why"}, or no body at all.`})
				return
			}
		}
		a, err := g.approvals.Decide(r.Context(), r.PathValue("id"), who, verdict, body.Reason)
		if err != nil {
			writeError(w, err)
			return
		}
		writeJSON(w, http.StatusOK, g.view(a))
	}
}

func (g *Gateway) handleListGrants(w http.ResponseWriter, r *http.Request, who interlock.Identity) {
	live, err := g.approvals.Grants().LiveGrants(r.Context())
	if err != nil {
		writeError(w, interlock.StoreUnavailable(err, "the grants cannot be listed now"))
		return
	}
	out := []*approval.StandingGrant{}
	for _, sg := range live {
		if approval.MaySee(who, sg.Subject()) {
			out = append(out, sg)
		}
	}
	writeJSON(w, http.StatusOK, map[string]any{"grants": out})
}

func (g *Gateway) handleRevokeGrant(w http.ResponseWriter, r *http.Request, who interlock.Identity) {
	sg, err := g.approvals.RevokeGrant(r.Context(), r.PathValue("id"), who)
	if err != nil {
		writeError(w, interlock.StoreUnavailable(err, "nothing was revoked"))
		return
	}
	writeJSON(w, http.StatusOK, sg)
}

// grantRequest is the body of POST /v1/approvals/{id}/grant.
type grantRequest struct {
	// When is a CEL condition over the call (args, tool, principal…).
	When string `json:"when"`
	// TTL is the grant's lifetime, a Go duration of at most 24h.
	TTL    string `json:"ttl"`
	Uses   int    `json:"uses"`
	Reason string `json:"reason"`
}

// handleGrantScope approves an approval and grants its caller a standing
// scope.
func (g *Gateway) handleGrantScope(w http.ResponseWriter, r *http.Request, who interlock.Identity) {
	data, err := readBody(w, r, 64<<10)
	if err != nil {
		writeError(w, err)
		return
	}
	var body grantRequest
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	bad := func(msg string) {
		writeError(w, &interlock.Error{Code: interlock.CodeValidationFailed, Message: msg,
			Hint: fmt.Sprintf(`Send {"when": "num(args.amount) <= 100", "ttl": "2h", "uses": 10, "reason": "…"}: ttl at most %gh, uses 1 to %d, when optional.`,
				approval.MaxGrantLifetime.Hours(), approval.MaxGrantUses)})
	}
	if err := dec.Decode(&body); err != nil {
		bad("The request body is not a grant.")
		return
	}
	ttl, err := approval.ParseLifetime(body.TTL)
	if err != nil {
		bad("ttl: " + err.Error() + ".")
		return
	}
	sg, err := g.approvals.GrantScope(r.Context(), r.PathValue("id"), who, interlock.GrantRequest{When: body.When, TTL: ttl, Uses: body.Uses, Reason: body.Reason})
	if err != nil {
		writeError(w, interlock.StoreUnavailable(err, "no grant was made (the call may stand approved, for one run)"))
		return
	}
	writeJSON(w, http.StatusOK, sg)
}

// approver is who calls the approvers' face; without API keys it answers
// PERMISSION_DENIED itself.
func (g *Gateway) approver(w http.ResponseWriter, r *http.Request) (interlock.Identity, bool) {
	ti := auth.TokenInfoFromContext(r.Context())
	if ti == nil {
		writeError(w, &interlock.Error{Code: interlock.CodePermissionDenied,
			Message: "Deciding approvals needs an approver's API key; this gateway has none configured.",
			Hint:    "Configure API keys (interlock key) for the approvers, and call with Authorization: Bearer <key>."})
		return interlock.Identity{}, false
	}
	return identityOf(ti), true
}
