package gateway

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"
)

// viewer is one identity of the visibility matrix, with its API key and
// what the rules of approval/ say it may do with the objects of the test.
type viewer struct {
	name, key string
	// sees: the pending and decided approvals, the grant and the history
	// of alice's calls; decides: may approve or deny them; own: is their
	// caller (refused with 403, not 404).
	sees, decides, own bool
}

// matrixViewers are acme's caller alice, an approver the rule names, one
// it does not, a member of a group it names, and identities of other
// tenants with the same principal names (the operator's name the rule
// lists included).
var matrixViewers = []viewer{
	{name: "the caller", key: "acme-alice", sees: true, own: true},
	{name: "the caller's name in another tenant", key: "other-alice"},
	{name: "an approver the rule names", key: "acme-bob", sees: true, decides: true},
	{name: "that approver's name in another tenant, in a group the rule names", key: "other-bob"},
	{name: "one the rule does not name", key: "acme-carol"},
	{name: "a member of a group the rule names", key: "acme-fin", sees: true, decides: true},
	{name: "the operator, named by the rule, of another tenant", key: "local-operator"},
}

const matrixConfig = `auth:
  keys:
    - {sha256: %s, principal: alice, tenant: acme}
    - {sha256: %s, principal: bob, tenant: acme}
    - {sha256: %s, principal: carol, tenant: acme}
    - {sha256: %s, principal: fin, tenant: acme, groups: [finance]}
    - {sha256: %s, principal: alice, tenant: other}
    - {sha256: %s, principal: bob, tenant: other, groups: [finance]}
    - {sha256: %s, principal: operator, tenant: local}
rules:
  - name: wipes
    match: {tools: [wipe]}
    mode: approval
    approvers: [bob, "group:finance", operator]
`

// TestWhoMaySeeAndDecide is the visibility matrix: every viewer against
// every object (a pending approval, a decided one, a standing grant, a
// line of history, a live event) on every face (REST, the console's pages
// and forms, its live events). Every face answers what the rules answer:
// identity is (tenant, principal), compared whole.
func TestWhoMaySeeAndDecide(t *testing.T) {
	ctx := context.Background()
	var hashes []any
	for _, k := range []string{"acme-alice", "acme-bob", "acme-carol", "acme-fin", "other-alice", "other-bob", "local-operator"} {
		hashes = append(hashes, HashKey(k))
	}
	gw, _ := startAudited(t, testConfig(t, fmt.Sprintf(matrixConfig, hashes...), "fx"), Options{})
	srv := httptest.NewServer(gw.Handler(false))
	t.Cleanup(srv.Close)
	wipe := func(target string) string {
		status, body := post(t, srv.URL+"/v1/tools/wipe/call", "acme-alice", fmt.Sprintf(`{"arguments":{"target":%q}}`, target))
		id, _ := body["approval_id"].(string)
		if status != http.StatusAccepted || id == "" {
			t.Fatalf("alice's wipe of %s: %d %v", target, status, body)
		}
		return id
	}
	pending, decided, granted := wipe("pending"), wipe("decided"), wipe("granted")
	if status, body := post(t, srv.URL+"/v1/approvals/"+decided+"/approve", "acme-bob", `{"reason":"checked by bob"}`); status != http.StatusOK {
		t.Fatalf("bob approves: %d %v", status, body)
	}
	status, sg := post(t, srv.URL+"/v1/approvals/"+granted+"/grant", "acme-fin", `{"when":"args.target == 'granted'","ttl":"1h","uses":5,"reason":"granted by fin"}`)
	if status != http.StatusOK {
		t.Fatalf("fin grants: %d %v", status, sg)
	}
	grant := sg["id"].(string)

	consoles := map[string]*browser{}
	for _, v := range matrixViewers {
		consoles[v.key] = signInWithKey(t, srv.URL, v.key)
	}
	for _, v := range matrixViewers {
		t.Run(v.name, func(t *testing.T) {
			b := consoles[v.key]
			check := func(face string, got, want bool) {
				t.Helper()
				if got != want {
					t.Errorf("%s: %t, want %t", face, got, want)
				}
			}
			// REST.
			for _, id := range []string{pending, decided} {
				status, _ := get(t, srv.URL+"/v1/approvals/"+id, v.key)
				check("GET /v1/approvals/"+id+" answers 200", status == http.StatusOK, v.sees)
				if status != http.StatusOK && status != http.StatusNotFound {
					t.Errorf("GET /v1/approvals/%s: %d, want 200 or 404", id, status)
				}
			}
			_, list := get(t, srv.URL+"/v1/approvals", v.key)
			check("GET /v1/approvals offers the pending approval", strings.Contains(fmt.Sprint(list), pending), v.decides)
			check("GET /v1/approvals offers the decided one", strings.Contains(fmt.Sprint(list), decided), false)
			_, grants := get(t, srv.URL+"/v1/grants", v.key)
			check("GET /v1/grants lists the grant", strings.Contains(fmt.Sprint(grants), grant), v.sees)

			// The console's pages.
			for _, id := range []string{pending, decided} {
				status, _, _ := b.get(srv.URL + "/console/approvals/" + id)
				check("the console's page of "+id+" answers 200", status == http.StatusOK, v.sees)
			}
			_, _, page := b.get(srv.URL + "/console/")
			check("the pending page lists the approval", strings.Contains(page, pending), v.sees)
			_, _, page = b.get(srv.URL + "/console/grants")
			check("the grants page lists the grant", strings.Contains(page, grant), v.sees)
			_, _, page = b.get(srv.URL + "/console/history")
			check("the history page shows bob's decision and reason", strings.Contains(page, "checked by bob"), v.sees)
			check("the history page shows the grant's approval and reason", strings.Contains(page, "granted by fin"), v.sees)

			// Decisions refused, 403 PERMISSION_DENIED over REST, as its
			// contract says of one's own call and of one a key may not
			// decide: nothing changes.
			if !v.decides {
				status, body := post(t, srv.URL+"/v1/approvals/"+pending+"/approve", v.key, `{}`)
				if status != http.StatusForbidden || body["code"] != "PERMISSION_DENIED" {
					t.Errorf("REST approve: %d %v, want 403 PERMISSION_DENIED", status, body)
				}
				status, _ = b.postForm(srv.URL+"/console/approvals/"+pending+"/decide", url.Values{"decision": {"approve"}}, "/console/approvals/"+pending)
				// The console answers with the approval's page, which one
				// who may not see it is told does not exist.
				if v.sees && status != http.StatusForbidden || !v.sees && status != http.StatusNotFound {
					t.Errorf("console approve: %d", status)
				}
				status, body = post(t, srv.URL+"/v1/approvals/"+pending+"/grant", v.key, `{"ttl":"1h","uses":1}`)
				if status != http.StatusForbidden || body["code"] != "PERMISSION_DENIED" {
					t.Errorf("REST grant: %d %v, want 403 PERMISSION_DENIED", status, body)
				}
			}
			if !v.sees {
				if status, _ := post(t, srv.URL+"/v1/grants/"+grant+"/revoke", v.key, ``); status != http.StatusNotFound {
					t.Errorf("REST revoke: %d, want 404", status)
				}
				status, _ := b.postForm(srv.URL+"/console/grants/"+grant+"/revoke", url.Values{}, "/console/grants")
				if status != http.StatusNotFound {
					t.Errorf("console revoke: %d, want 404", status)
				}
			}
		})
	}
	if a, err := gw.approvals.Store().Get(ctx, pending); err != nil || len(a.Approvals) != 0 || a.Denial != nil {
		t.Fatalf("refused decisions changed the approval: %+v %v", a, err)
	}
	if g, err := gw.approvals.Grants().Grant(ctx, grant); err != nil || g.Revoked {
		t.Fatalf("refused revocations changed the grant: %+v %v", g, err)
	}

	// Live events: every viewer listens; a decision on the pending
	// approval and the revocation of the grant reach those who may see
	// them, and nobody else.
	heard := map[string]chan string{}
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	for _, v := range matrixViewers {
		heard[v.key] = consoles[v.key].listen(sctx, t, srv.URL+"/console/events")
	}
	post(t, srv.URL+"/v1/approvals/"+pending+"/deny", "acme-fin", `{"reason":"not today"}`)
	post(t, srv.URL+"/v1/grants/"+grant+"/revoke", "acme-bob", ``)
	deadline := time.After(5 * time.Second)
	got := map[string]int{}
	for _, v := range matrixViewers {
		if !v.sees {
			continue
		}
		for got[v.key] < 2 {
			select {
			case <-heard[v.key]:
				got[v.key]++
			case <-deadline:
				t.Fatalf("%s heard %d of the 2 changes", v.name, got[v.key])
			}
		}
	}
	// Those who may not see had as long as the others to hear anything.
	time.Sleep(300 * time.Millisecond)
	for _, v := range matrixViewers {
		if !v.sees && len(heard[v.key]) > 0 {
			t.Errorf("%s heard of another's approval or grant: %q", v.name, <-heard[v.key])
		}
	}
}

// signInWithKey signs a browser in to the console with an API key.
func signInWithKey(t *testing.T, base, key string) *browser {
	t.Helper()
	b := newBrowser(t)
	_, _, login := b.get(base + "/console/login")
	m := csrfRE.FindStringSubmatch(login)
	if m == nil {
		t.Fatalf("no sign-in form:\n%s", login)
	}
	status, page := b.post(base+"/console/login", url.Values{"csrf": {m[1]}, "key": {key}})
	if status != http.StatusOK || !strings.Contains(page, "Signed in as") {
		t.Fatalf("signing in with %s: %d\n%s", key, status, page)
	}
	return b
}

// postForm posts form with the session's CSRF token, read from the page
// at from, without following a redirect, and returns the status.
func (b *browser) postForm(raw string, form url.Values, from string) (int, string) {
	b.t.Helper()
	u, _ := url.Parse(raw)
	_, _, page := b.get(u.Scheme + "://" + u.Host + from)
	if m := csrfRE.FindStringSubmatch(page); m != nil {
		form.Set("csrf", m[1])
	}
	c := *b.c
	c.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	res, err := c.PostForm(raw, form)
	if err != nil {
		b.t.Fatal(err)
	}
	defer res.Body.Close()
	return res.StatusCode, ""
}

// listen opens the console's event stream and sends the data of each
// change event it hears.
func (b *browser) listen(ctx context.Context, t *testing.T, raw string) chan string {
	t.Helper()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, raw, nil)
	res, err := b.c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if res.StatusCode != http.StatusOK {
		t.Fatalf("events: %d", res.StatusCode)
	}
	out := make(chan string, 16)
	// The stream says it listens before any change can be missed.
	sc := bufio.NewScanner(res.Body)
	for sc.Scan() && sc.Text() != ": listening" {
	}
	go func() {
		defer res.Body.Close()
		change := false
		for sc.Scan() {
			line := sc.Text()
			switch {
			case line == "event: change":
				change = true
			case change && strings.HasPrefix(line, "data: "):
				out <- strings.TrimPrefix(line, "data: ")
				change = false
			}
		}
	}()
	return out
}
