package console

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/interlock-mcp/interlock"
	"github.com/interlock-mcp/interlock/approval"
	"github.com/interlock-mcp/interlock/policy"
)

// TestLinksMadeElsewhere: a token the console did not make is asked of
// Links, which signs in whom it names once; a token Links refuses, or
// cannot check, signs nobody in.
func TestLinksMadeElsewhere(t *testing.T) {
	gate, err := interlock.NewGate(interlock.ByAnnotations{}, &interlock.GateOptions{Approvals: approval.NewMemory(), Logger: quiet,
		CompileCondition: policy.CompileCondition, Getenv: func(string) string { return "" }})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	live := map[string]bool{"made-elsewhere": true}
	var asked []string
	c := New(Options{Gate: gate, Logger: quiet, Poll: 20 * time.Millisecond,
		Links: func(_ context.Context, token string) (interlock.Identity, bool, error) {
			mu.Lock()
			defer mu.Unlock()
			asked = append(asked, token)
			if token == "store-down" {
				return interlock.Identity{}, false, errors.New("database is locked")
			}
			ok := live[token]
			delete(live, token)
			return interlock.Identity{Principal: "operator", Tenant: "local"}, ok, nil
		}})
	srv := httptest.NewServer(c.Handler())
	t.Cleanup(func() { c.Close(); srv.Close() })
	r := &rig{srv: srv, url: srv.URL, console: c}

	b := r.browser(t)
	res, _ := b.get("/console/login?once=made-elsewhere")
	if res.StatusCode != http.StatusSeeOther || cookieNamed(res, sessionCookie) == nil {
		t.Fatalf("first use: status %d, no session cookie", res.StatusCode)
	}
	if _, page := b.get("/console/"); !strings.Contains(page, "Signed in as <strong>operator</strong>") {
		t.Errorf("not signed in as operator:\n%s", page)
	}
	res, page := r.browser(t).get("/console/login?once=made-elsewhere")
	if res.StatusCode != http.StatusForbidden || cookieNamed(res, sessionCookie) != nil || !strings.Contains(page, "interlock console link") {
		t.Errorf("second use: status %d\n%s", res.StatusCode, page)
	}
	if res, _ := r.browser(t).get("/console/login?once=store-down"); res.StatusCode != http.StatusServiceUnavailable || cookieNamed(res, sessionCookie) != nil {
		t.Errorf("a link that cannot be checked: status %d", res.StatusCode)
	}
	own, err := c.OneTimeLogin(context.Background(), interlock.Identity{Principal: "operator", Tenant: "local"})
	if err != nil {
		t.Fatal(err)
	}
	if res, _ := r.browser(t).get("/console/login?once=" + own); res.StatusCode != http.StatusSeeOther {
		t.Errorf("the console's own link: status %d", res.StatusCode)
	}
	mu.Lock()
	defer mu.Unlock()
	if strings.Join(asked, " ") != "made-elsewhere made-elsewhere store-down" {
		t.Errorf("Links was asked %q: the console's own links must not be", asked)
	}
}

// TestOneTimeLinkExpires: a link of OneTimeLogin signs in for a day, and
// not a moment more.
func TestOneTimeLinkExpires(t *testing.T) {
	tests := []struct {
		name   string
		after  time.Duration
		status int
	}{
		{"a moment before its day is out", oneTimeTTL - time.Nanosecond, http.StatusSeeOther},
		{"at the end of its day", oneTimeTTL, http.StatusForbidden},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				gate, err := interlock.NewGate(interlock.ByAnnotations{}, &interlock.GateOptions{Logger: quiet, Getenv: func(string) string { return "" }})
				if err != nil {
					t.Fatal(err)
				}
				c := New(Options{Gate: gate, Logger: quiet})
				defer c.Close()
				token, err := c.OneTimeLogin(context.Background(), interlock.Identity{Principal: "operator", Tenant: "local"})
				if err != nil {
					t.Fatal(err)
				}
				time.Sleep(tt.after)
				w := httptest.NewRecorder()
				c.Handler().ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/console/login?once="+token, nil))
				if w.Code != tt.status {
					t.Errorf("status %d, want %d", w.Code, tt.status)
				}
			})
		})
	}
}
