package gateway

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/interlock-mcp/interlock"
	"github.com/interlock-mcp/interlock/audit"
	"github.com/interlock-mcp/interlock/console"
)

// sessionKeys are the keys of the session tests: alice calls, bob
// approves (named by principal) and fin approves (through the finance
// group).
func sessionKeys(bob, fin string) string {
	return "auth:\n  keys:\n    - {sha256: " + HashKey("alice-key") + ", principal: alice, tenant: acme}\n" + bob + fin
}

var (
	bobKey = "    - {sha256: " + HashKey("bob-key") + ", principal: bob, tenant: acme}\n"
	finKey = "    - {sha256: " + HashKey("fin-key") + ", principal: fin, tenant: acme, groups: [finance]}\n"
)

const sessionRules = `rules:
  - name: wipes
    match: {tools: [wipe]}
    mode: approval
    approvers: [bob, "group:finance"]
`

// TestConsoleSessionsFollowTheirKeys: a console session stands on the key
// it was made with. A reload that removes or changes that key, or moves it
// to another tenant or out of the group the approver decides through,
// ends the session at once: its open event stream closes, its pages send
// it to sign in, its forms decide nothing, and the audit says so. A reload
// that leaves the key alone leaves the session alone.
func TestConsoleSessionsFollowTheirKeys(t *testing.T) {
	tests := []struct {
		name, key string
		// next is the configuration the gateway reloads.
		next string
		ends bool
	}{
		{"bob's key removed", "bob-key", sessionKeys("", finKey), true},
		{"bob's key replaced by a new one", "bob-key", sessionKeys("    - {sha256: "+HashKey("bob-key-2")+", principal: bob, tenant: acme}\n", finKey), true},
		{"bob's key given to another tenant", "bob-key", sessionKeys(strings.Replace(bobKey, "tenant: acme", "tenant: other", 1), finKey), true},
		{"bob's key given to another principal", "bob-key", sessionKeys(strings.Replace(bobKey, "principal: bob", "principal: robert", 1), finKey), true},
		{"bob's key given a group", "bob-key", sessionKeys(strings.Replace(bobKey, "tenant: acme}", "tenant: acme, groups: [ops]}", 1), finKey), true},
		{"fin's key out of the finance group", "fin-key", sessionKeys(bobKey, strings.Replace(finKey, "[finance]", "[sales]", 1)), true},
		{"another key removed", "bob-key", sessionKeys(bobKey, ""), false},
		{"the rules changed", "bob-key", sessionKeys(bobKey, finKey) + strings.Replace(sessionRules, "wipes", "all-wipes", 1), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			gw, log := startAudited(t, testConfig(t, sessionKeys(bobKey, finKey)+sessionRules, "fx"), Options{})
			srv := httptest.NewServer(gw.Handler(false))
			t.Cleanup(srv.Close)
			_, body := post(t, srv.URL+"/v1/tools/wipe/call", "alice-key", `{"arguments":{"target":"all"}}`)
			id := body["approval_id"].(string)

			b := signInWithKey(t, srv.URL, tt.key)
			_, _, page := b.get(srv.URL + "/console/approvals/" + id)
			csrf := csrfRE.FindStringSubmatch(page)
			if csrf == nil {
				t.Fatalf("the approval's page:\n%s", page)
			}
			sctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			stream := b.stream(sctx, t, srv.URL+"/console/events")

			next := tt.next
			if !strings.Contains(next, "rules:") {
				next += sessionRules
			}
			if err := gw.Reload(context.Background(), testConfig(t, next, "fx"), "test"); err != nil {
				t.Fatal(err)
			}
			select {
			case <-stream:
				if !tt.ends {
					t.Error("the event stream closed, yet the session's key is as it was")
				}
			case <-time.After(2 * time.Second):
				if tt.ends {
					t.Error("the event stream is still open after the reload")
				}
			}
			status, at, _ := b.get(srv.URL + "/console/approvals/" + id)
			if signedOut := strings.Contains(at, "/console/login"); signedOut != tt.ends {
				t.Errorf("after the reload the page is at %s (%d)", at, status)
			}
			status, _ = b.post(srv.URL+"/console/approvals/"+id+"/decide", url.Values{"csrf": {csrf[1]}, "decision": {"approve"}})
			a, _ := gw.approvals.Store().Get(context.Background(), id)
			if decided := len(a.Approvals) == 1; decided == tt.ends {
				t.Errorf("after the reload the session's approval counted: %t (status %d)", decided, status)
			}
			if tt.ends {
				if status, out := post(t, srv.URL+"/v1/tools/wipe/call", "alice-key", `{"arguments":{"target":"all"}}`); status == http.StatusOK {
					t.Errorf("the call ran: %v", out)
				}
			}
			// The REST face answers the key as the new file names it: a
			// removed or replaced key is refused, a re-scoped one no
			// longer sees the approval.
			status, _ = get(t, srv.URL+"/v1/approvals/"+id, tt.key)
			// bob is named by principal, so a group more changes what his
			// session stood on but not what he may see.
			if sees := status == http.StatusOK; sees == (tt.ends && !strings.Contains(tt.name, "given a group")) {
				t.Errorf("after the reload the key reads the approval over REST: %d", status)
			}
			ended := 0
			for rec, err := range log.Records(context.Background(), 1) {
				if err != nil {
					t.Fatal(err)
				}
				if rec.Event == "console_session_ended" {
					ended++
					if rec.Tenant != "acme" || !strings.Contains(rec.Detail, "API key") {
						t.Errorf("the record of the ended session: %+v", rec)
					}
				}
			}
			if (ended == 1) != tt.ends {
				t.Errorf("%d console_session_ended records", ended)
			}
		})
	}
	t.Run("checked on each request, not only on reload", func(t *testing.T) {
		gw := start(t, testConfig(t, sessionKeys(bobKey, finKey)+sessionRules, "fx"), "false")
		srv := httptest.NewServer(gw.Handler(false))
		t.Cleanup(srv.Close)
		b := signInWithKey(t, srv.URL, "bob-key")
		// The configuration changes under the console without its sweep,
		// as on a replica that has not reloaded yet.
		gw.running.Store(runningOf(testConfig(t, sessionKeys("", finKey)+sessionRules, "fx")))
		if _, at, _ := b.get(srv.URL + "/console/"); !strings.Contains(at, "/console/login") {
			t.Errorf("a session whose key is gone still opens pages: at %s", at)
		}
		if status, _ := get(t, srv.URL+"/v1/approvals", "bob-key"); status != http.StatusUnauthorized {
			t.Errorf("REST with the removed key: %d", status)
		}
	})
}

// stream opens an event stream and closes the channel it returns when
// the stream ends.
func (b *browser) stream(ctx context.Context, t *testing.T, raw string) chan struct{} {
	t.Helper()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, raw, nil)
	res, err := b.c.Do(req)
	if err != nil || res.StatusCode != http.StatusOK {
		t.Fatalf("events: %v %v", res, err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer res.Body.Close()
		buf := make([]byte, 512)
		for {
			if _, err := res.Body.Read(buf); err != nil {
				return
			}
		}
	}()
	return done
}

// TestRESTAnswersAreNotCached: every answer of the REST face that holds
// arguments (an approval, the list, a pending call, a result) says
// Cache-Control: no-store.
func TestRESTAnswersAreNotCached(t *testing.T) {
	gw := start(t, testConfig(t, sessionKeys(bobKey, finKey)+sessionRules, "fx"), "false")
	srv := httptest.NewServer(gw.Handler(false))
	t.Cleanup(srv.Close)
	do := func(method, path, key, body string) *http.Response {
		req, _ := http.NewRequest(method, srv.URL+path, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+key)
		req.Header.Set("Content-Type", "application/json")
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		return res
	}
	pending := do("POST", "/v1/tools/wipe/call", "alice-key", `{"arguments":{"target":"all"}}`)
	_, body := post(t, srv.URL+"/v1/tools/wipe/call", "alice-key", `{"arguments":{"target":"all"}}`)
	id := body["approval_id"].(string)
	for name, res := range map[string]*http.Response{
		"a pending call":    pending,
		"the list":          do("GET", "/v1/approvals", "bob-key", ""),
		"an approval":       do("GET", "/v1/approvals/"+id, "bob-key", ""),
		"a decision":        do("POST", "/v1/approvals/"+id+"/approve", "bob-key", `{}`),
		"a result":          do("POST", "/v1/tools/wipe/call", "alice-key", `{"arguments":{"target":"all"}}`),
		"a refused request": do("GET", "/v1/approvals/apr_none", "bob-key", ""),
		"the grants":        do("GET", "/v1/grants", "bob-key", ""),
	} {
		if got := res.Header.Get("Cache-Control"); got != "no-store" {
			t.Errorf("%s (%d): Cache-Control %q", name, res.StatusCode, got)
		}
	}
}

// TestSignInFlood: ten thousand and more unauthenticated requests to start
// a sign-in with the identity provider leave no state behind, so a real
// approver signs in during the flood and after it.
func TestSignInFlood(t *testing.T) {
	o := startSignInGateway(t, `
  - name: wipes-need-finance
    match: {tools: [wipe]}
    mode: approval
    approvers: ["group:finance"]
`)
	noRedirects := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		Transport: &http.Transport{MaxIdleConnsPerHost: 8}}
	const flood = 12_000
	var sent, refused atomic.Int64
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for sent.Add(1) <= flood {
				res, err := noRedirects.Get(o.srv.URL + "/console/oidc/start")
				if err != nil {
					t.Error(err)
					return
				}
				res.Body.Close()
				if res.StatusCode != http.StatusSeeOther {
					refused.Add(1)
				}
			}
		})
	}
	signIn := func() {
		t.Helper()
		b := newBrowser(t)
		status, at, page := b.get(o.srv.URL + "/console/oidc/start")
		if status != http.StatusOK || !strings.Contains(page, "carol@example.com") {
			t.Fatalf("a real sign-in after %d flood requests: %d at %s\n%s", sent.Load(), status, at, page)
		}
		if _, _, page := b.get(o.srv.URL + "/console/"); !strings.Contains(page, "Signed in as") {
			t.Fatalf("not signed in:\n%s", page)
		}
	}
	for sent.Load() < flood/2 {
		time.Sleep(10 * time.Millisecond)
	}
	signIn()
	wg.Wait()
	signIn()
	if refused.Load() != 0 {
		t.Errorf("%d of the flood's sign-ins were refused", refused.Load())
	}
}

// TestProviderSessionsEnd: a console session made with the identity
// provider ends with the sign-in it came from (the ID token's lifetime).
func TestProviderSessionsEnd(t *testing.T) {
	gw := start(t, testConfig(t, sessionKeys(bobKey, finKey)+sessionRules, "fx"), "false")
	who := interlock.Identity{Tenant: "acme", Principal: "carol"}
	if _, err := gw.recheckCredential(context.Background(), who, console.Credential{Kind: console.CredentialProvider}); err == nil {
		t.Error("a gateway without an issuer stands by an identity provider's sign-in")
	}
	if _, err := gw.recheckCredential(context.Background(), who, console.Credential{Kind: console.CredentialLink}); err == nil {
		t.Error("a gateway with keys stands by a one-time link")
	}
	got, err := gw.recheckCredential(context.Background(), who, console.Credential{Kind: console.CredentialKey, Ref: HashKey("fin-key")})
	if err != nil || !got.Is(interlock.Identity{Tenant: "acme", Principal: "fin"}) || fmt.Sprint(got.Groups) != "[finance]" {
		t.Errorf("fin's key names %+v, %v", got, err)
	}
}

// TestConsoleRefusalsAreFolded: refused console sign-ins count against
// their source as refused API keys do: a flood of bad keys from one
// address writes a bounded number of records, and the chain verifies.
func TestConsoleRefusalsAreFolded(t *testing.T) {
	gw, log := startAudited(t, testConfig(t, sessionKeys(bobKey, finKey)+sessionRules, "fx"), Options{})
	srv := httptest.NewServer(gw.Handler(false))
	t.Cleanup(srv.Close)
	b := newBrowser(t)
	for i := range 25 {
		_, _, login := b.get(srv.URL + "/console/login")
		m := csrfRE.FindStringSubmatch(login)
		if m == nil {
			t.Fatalf("no sign-in form:\n%s", login)
		}
		if status, _ := b.post(srv.URL+"/console/login", url.Values{"csrf": {m[1]}, "key": {fmt.Sprintf("not-a-key-%d", i)}}); status != http.StatusUnauthorized {
			t.Fatalf("sign-in %d with a bad key: %d", i, status)
		}
	}
	refused := 0
	for rec, err := range log.Records(context.Background(), 1) {
		if err != nil {
			t.Fatal(err)
		}
		if rec.Event == "auth_refused" {
			refused++
			if !strings.Contains(rec.Detail, "console sign-in with an unknown API key") {
				t.Errorf("a refusal's record: %q", rec.Detail)
			}
		}
	}
	if refused == 0 || refused > 10 {
		t.Errorf("%d auth_refused records for 25 refused sign-ins from one source, want 1 to 10", refused)
	}
	n, err := audit.Verify(log.Records(context.Background(), 1))
	if err != nil {
		t.Errorf("the chain does not verify after %d records: %v", n, err)
	}
}
