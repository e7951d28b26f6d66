package console

import (
	"context"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/interlock-mcp/interlock"
	"github.com/interlock-mcp/interlock/approval"
)

func TestApprovalPageOffersAScope(t *testing.T) {
	tests := []struct {
		name, key string
		quorum    int
		says      string
		form      bool
	}{
		{"an approver", "key-bob", 1, "Approve this call and similar ones", true},
		{"the caller", "key-alice", 1, "You made this call", false},
		{"under a quorum of two", "key-bob", 2, "The rule asks 2 approvers for each call, so no one approver may grant calls like it.", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := newRig(t, false, nil)
			r.requestQuorum(t, "apr_1", tt.quorum)
			b := r.signedIn(t, tt.key)
			_, page := b.get("/console/approvals/apr_1")
			if !strings.Contains(page, tt.says) {
				t.Errorf("the page does not say %q:\n%s", tt.says, page)
			}
			if got := strings.Contains(page, `action="/console/approvals/apr_1/grant"`); got != tt.form {
				t.Errorf("scope form shown: %t, want %t", got, tt.form)
			}
			if tt.form && !strings.Contains(page, "<code>args.amount</code>, <code>args.invoice_id</code>") {
				t.Errorf("the condition's hint does not name the arguments:\n%s", page)
			}
		})
	}
}

func TestGrantScope(t *testing.T) {
	scope := func(when, ttl, uses string) url.Values {
		return url.Values{"when": {when}, "ttl": {ttl}, "uses": {uses}, "reason": {"month-end refunds"}}
	}
	tests := []struct {
		name, key string
		quorum    int
		form      url.Values
		status    int
		says      string
	}{
		{"an approver grants a scope", "key-bob", 1, scope("num(args.amount) <= 5000", "4h", "5"), http.StatusSeeOther, ""},
		{"a condition that does not compile", "key-bob", 1, scope("args.amount >", "1h", "5"), http.StatusBadRequest,
			"The condition does not compile"},
		{"a lifetime the form does not offer", "key-bob", 1, scope("", "48h", "5"), http.StatusBadRequest, "Choose how long the grant lasts."},
		{"uses that are not a number", "key-bob", 1, scope("", "1h", "ten"), http.StatusBadRequest, "as a whole number from 1 to 10000"},
		{"no uses", "key-bob", 1, scope("", "1h", "0"), http.StatusBadRequest, "A grant allows from 1 to 10000 uses, not 0."},
		{"the caller", "key-alice", 1, scope("", "1h", "5"), http.StatusForbidden, "You cannot approve or deny your own call."},
		{"someone the rule does not name", "key-mallory", 1, scope("", "1h", "5"), http.StatusNotFound, "no such approval"},
		{"under a quorum of two", "key-bob", 2, scope("", "1h", "5"), http.StatusForbidden,
			"The rule asks 2 approvers for each call of refund_invoice, so no one approver may grant a standing scope."},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := newRig(t, false, nil)
			r.requestQuorum(t, "apr_1", tt.quorum)
			b := r.signedIn(t, tt.key)
			tt.form.Set("csrf", b.csrf("/console/"))
			res, page := b.post("/console/approvals/apr_1/grant", tt.form)
			if res.StatusCode != tt.status || !strings.Contains(page, tt.says) {
				t.Fatalf("status %d, want %d saying %q:\n%s", res.StatusCode, tt.status, tt.says, page)
			}
			live, _ := r.console.approvals.Grants().LiveGrants(context.Background())
			a, _ := r.store.Get(context.Background(), "apr_1")
			if tt.status != http.StatusSeeOther {
				if len(live) != 0 || a.State(time.Now()) != approval.Pending {
					t.Errorf("a refused form left grants %+v and the approval %s", live, a.State(time.Now()))
				}
				if tt.status == http.StatusBadRequest && !strings.Contains(page, `month-end refunds`) {
					t.Errorf("the refused form lost what the approver typed:\n%s", page)
				}
				return
			}
			if loc := res.Header.Get("Location"); loc != "/console/grants" {
				t.Errorf("sent to %q", loc)
			}
			if len(live) != 1 || live[0].When != "num(args.amount) <= 5000" || live[0].Uses != 5 || live[0].GrantedBy != "bob" ||
				live[0].Principal != "alice" || time.Until(live[0].ExpiresAt) > 4*time.Hour {
				t.Errorf("grants %+v", live)
			}
			if a.State(time.Now()) != approval.Consumed {
				t.Errorf("the approval is %s, want consumed: the waiting call is the grant's first use", a.State(time.Now()))
			}
			if _, page := b.get("/console/grants"); !strings.Contains(page, "You approved alice&#39;s call of refund_invoice and granted similar calls: 5 uses") {
				t.Errorf("the grants page does not confirm the grant:\n%s", page)
			}
		})
	}
	t.Run("the condition is escaped when the form comes back", func(t *testing.T) {
		r := newRig(t, false, nil)
		r.request(t, "apr_1")
		b := r.signedIn(t, "key-bob")
		form := url.Values{"csrf": {b.csrf("/console/")}, "when": {`</textarea><script>alert(1)</script>`}, "ttl": {"1h"}, "uses": {"1"}}
		_, page := b.post("/console/approvals/apr_1/grant", form)
		if strings.Contains(page, "<script>alert(1)") {
			t.Errorf("the condition reached the page unescaped:\n%s", page)
		}
	})
}

// grantFrom approves apr_1 as bob with a scope and returns the grant.
func grantFrom(t *testing.T, r *rig) *approval.StandingGrant {
	t.Helper()
	r.request(t, "apr_1")
	sg, err := r.console.approvals.GrantScope(context.Background(), "apr_1", keys["key-bob"],
		interlock.GrantRequest{When: "args.invoice_id == 'inv_1005'", TTL: time.Hour, Uses: 3, Reason: "<b>duplicates</b>"})
	if err != nil {
		t.Fatal(err)
	}
	return sg
}

func TestGrantsPage(t *testing.T) {
	tests := []struct {
		name, key string
		lists     bool
	}{
		{"the grantor", "key-bob", true},
		{"the caller it covers", "key-alice", true},
		{"someone the rule does not name", "key-mallory", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := newRig(t, false, nil)
			sg := grantFrom(t, r)
			b := r.signedIn(t, tt.key)
			res, page := b.get("/console/grants")
			if res.StatusCode != http.StatusOK {
				t.Fatalf("status %d", res.StatusCode)
			}
			want := []string{"<code>refund_invoice</code>", "alice <span class=\"muted\">(acme)</span>", "<code>args.invoice_id == &#39;inv_1005&#39;</code>", "0 of 3",
				"bob: “&lt;b&gt;duplicates&lt;/b&gt;”", `action="/console/grants/` + sg.ID + `/revoke"`}
			for _, w := range want {
				if got := strings.Contains(page, w); got != tt.lists {
					t.Errorf("page shows %q: %t, want %t", w, got, tt.lists)
				}
			}
			if !tt.lists && !strings.Contains(page, "No live grant is yours to revoke.") {
				t.Errorf("the empty page:\n%s", page)
			}
		})
	}
}

func TestRevokeGrant(t *testing.T) {
	tests := []struct {
		name, key, grant string
		status           int
		says             string
		live             bool
	}{
		{"the grantor revokes", "key-bob", "", http.StatusSeeOther, "", false},
		{"the caller gives it up", "key-alice", "", http.StatusSeeOther, "", false},
		{"someone the rule does not name may not", "key-mallory", "", http.StatusNotFound, "There is no such grant, or it is not one you may see.", true},
		{"a grant that does not exist", "key-bob", "grt_none", http.StatusNotFound, "There is no such grant, or it is not one you may see.", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := newRig(t, false, nil)
			sg := grantFrom(t, r)
			id := tt.grant
			if id == "" {
				id = sg.ID
			}
			b := r.signedIn(t, tt.key)
			res, page := b.post("/console/grants/"+id+"/revoke", url.Values{"csrf": {b.csrf("/console/grants")}})
			if res.StatusCode != tt.status || !strings.Contains(page, tt.says) {
				t.Fatalf("status %d, want %d saying %q:\n%s", res.StatusCode, tt.status, tt.says, page)
			}
			got, _ := r.console.approvals.Grants().Grant(context.Background(), sg.ID)
			if got.Live(time.Now()) != tt.live {
				t.Errorf("grant live: %t, want %t", got.Live(time.Now()), tt.live)
			}
		})
	}
	t.Run("without the session's token", func(t *testing.T) {
		r := newRig(t, false, nil)
		sg := grantFrom(t, r)
		b := r.signedIn(t, "key-bob")
		res, _ := b.post("/console/grants/"+sg.ID+"/revoke", url.Values{"csrf": {"forged"}})
		if got, _ := r.console.approvals.Grants().Grant(context.Background(), sg.ID); res.StatusCode != http.StatusForbidden || !got.Live(time.Now()) {
			t.Errorf("status %d, grant live %t", res.StatusCode, got.Live(time.Now()))
		}
	})
}

func TestEventsTellOfGrants(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	r := newRig(t, false, nil)
	bob := r.browser(t)
	bob.login("key-bob", "")
	events := bob.events(ctx)
	time.Sleep(100 * time.Millisecond)
	var sg *approval.StandingGrant
	// The approval a grant is made from may be seen while it waits and once
	// it is consumed, before the grant, depending on when the watcher reads;
	// those events are told in that order or not at all.
	before := map[string][]string{"a grant": {"New approval waiting: refund_invoice, called by alice.", "refund_invoice ran, approved by bob."}}
	steps := []struct {
		name string
		do   func()
		want func() []string
	}{
		{"a grant", func() { sg = grantFrom(t, r); r.console.Notify() }, func() []string {
			return []string{"bob granted alice's calls of refund_invoice: 3 uses until " + sg.ExpiresAt.UTC().Format("15:04 UTC") + "."}
		}},
		{"a use", func() {
			if ok, err := r.console.approvals.Grants().UseGrant(ctx, sg.ID); !ok || err != nil {
				t.Fatalf("use: %t, %v", ok, err)
			}
			r.console.Notify()
		}, func() []string {
			return []string{"alice's call of refund_invoice ran under bob's grant (1 of 3 uses)."}
		}},
		{"a revocation", func() {
			if _, err := r.console.approvals.RevokeGrant(ctx, sg.ID, keys["key-bob"]); err != nil {
				t.Fatal(err)
			}
			r.console.Notify()
		}, func() []string { return []string{"The grant of refund_invoice to alice was revoked."} }},
	}
	for _, s := range steps {
		t.Run(s.name, func(t *testing.T) {
			s.do()
			may := before[s.name]
			for _, want := range s.want() {
				got := nextEvent(t, events)
				for len(may) > 0 && got != want {
					if got != may[0] {
						may = may[1:]
						continue
					}
					may = may[1:]
					got = nextEvent(t, events)
				}
				if got != want {
					t.Errorf("event %q, want %q", got, want)
				}
			}
		})
	}
}
