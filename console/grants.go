package console

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"github.com/interlock-mcp/interlock"
	"github.com/interlock-mcp/interlock/approval"
)

// scopeForm is what an approver asks for when they approve a call and
// similar ones: the form's fields as typed, so a refused form comes back
// as it was sent.
type scopeForm struct {
	When   string
	TTL    string
	Uses   string
	Reason string
}

// newScopeForm is the form as first shown: any arguments, for an hour,
// ten calls.
func newScopeForm() scopeForm { return scopeForm{TTL: "1h", Uses: "10"} }

// lifetime is one choice of how long a grant lasts.
type lifetime struct{ Value, Label string }

// lifetimes are the choices the scope form offers, up to
// [approval.MaxGrantLifetime].
var lifetimes = []lifetime{{"15m", "15 minutes"}, {"1h", "1 hour"}, {"4h", "4 hours"}, {"8h", "8 hours"}, {"24h", "24 hours"}}

// scopeView is the scope form on an approval's page.
type scopeView struct {
	Form      scopeForm
	Lifetimes []lifetime
	// Why says why no scope may be granted from this approval; the form
	// is shown when it is empty.
	Why string
}

// scopeFor says whether who may grant a scope from the approval v shows.
func (c *Console) scopeFor(v approvalView, form scopeForm) scopeView {
	sv := scopeView{Form: form, Lifetimes: lifetimes}
	switch {
	case !c.approvals.OffersGrants():
		sv.Why = "This gateway keeps no standing grants."
	case v.Quorum > 1:
		sv.Why = fmt.Sprintf("The rule asks %d approvers for each call, so no one approver may grant calls like it.", v.Quorum)
	}
	return sv
}

// grantScope approves an approval and grants its caller a standing scope
// from the scope form.
func (c *Console) grantScope(w http.ResponseWriter, r *http.Request, s *session) {
	form := scopeForm{When: strings.TrimSpace(r.PostFormValue("when")), TTL: r.PostFormValue("ttl"),
		Uses: strings.TrimSpace(r.PostFormValue("uses")), Reason: strings.TrimSpace(r.PostFormValue("reason"))}
	ttl, err := approval.ParseLifetime(form.TTL)
	if err != nil || !slices.ContainsFunc(lifetimes, func(l lifetime) bool { return l.Value == form.TTL }) {
		c.showApproval(w, r, s, http.StatusBadRequest, "Choose how long the grant lasts.", form)
		return
	}
	uses, err := strconv.Atoi(form.Uses)
	if err != nil {
		c.showApproval(w, r, s, http.StatusBadRequest, fmt.Sprintf("Give the number of calls the grant allows, as a whole number from 1 to %d.", approval.MaxGrantUses), form)
		return
	}
	id := r.PathValue("id")
	sg, err := c.approvals.GrantScope(r.Context(), id, s.who, interlock.GrantRequest{When: form.When, TTL: ttl, Uses: uses, Reason: form.Reason})
	if err != nil {
		status, problem := refused(err)
		if status == 0 {
			c.fail(w, r, s, fmt.Errorf("granting a scope: %w", err))
			return
		}
		c.showApproval(w, r, s, status, problem, form)
		return
	}
	c.Notify()
	c.setFlash(r.Context(), s, fmt.Sprintf("You approved %s's call of %s and granted similar calls: %d uses until %s.",
		sg.Principal, sg.Tool, sg.Uses, sg.ExpiresAt.UTC().Format("2006-01-02 15:04 UTC")))
	http.Redirect(w, r, "/console/grants", http.StatusSeeOther)
}

// grantsData is what the grants page lists.
type grantsData struct {
	Grants  []*approval.StandingGrant
	Version string
}

// grantsPage lists the live grants the approver may revoke.
func (c *Console) grantsPage(w http.ResponseWriter, r *http.Request, s *session) {
	var d grantsData
	live, err := c.approvals.Grants().LiveGrants(r.Context())
	if err != nil {
		c.fail(w, r, s, fmt.Errorf("listing grants: %w", err))
		return
	}
	h := sha256.New()
	for _, sg := range live {
		if approval.MaySee(s.who, sg.Subject()) {
			d.Grants = append(d.Grants, sg)
			fmt.Fprintf(h, "%s %d\n", sg.ID, sg.Used)
		}
	}
	d.Version = hex.EncodeToString(h.Sum(nil))[:16]
	c.render(w, r, http.StatusOK, "grants", c.pageFor(s, "Grants", "grants", page{Data: d}))
}

// revokeGrant ends a grant from the grants page.
func (c *Console) revokeGrant(w http.ResponseWriter, r *http.Request, s *session) {
	sg, err := c.approvals.RevokeGrant(r.Context(), r.PathValue("id"), s.who)
	if err != nil {
		status, problem := refused(err)
		if status == 0 {
			c.fail(w, r, s, fmt.Errorf("revoking a grant: %w", err))
			return
		}
		c.render(w, r, status, "message", c.pageFor(s, "Not revoked", "grants", page{Message: problem}))
		return
	}
	c.Notify()
	c.setFlash(r.Context(), s, fmt.Sprintf("You revoked the grant of %s to %s; their next call asks for approval again.", sg.Tool, sg.Principal))
	http.Redirect(w, r, "/console/grants", http.StatusSeeOther)
}
