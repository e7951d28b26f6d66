package console

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/interlock-mcp/interlock"
)

// TestLinkWhoseCredentialNoLongerStands: a one-time link signs in only
// while Recheck takes a link's credential; one presented after the
// gateway began to authenticate its approvers signs nobody in, and is
// spent all the same.
func TestLinkWhoseCredentialNoLongerStands(t *testing.T) {
	var authenticates atomic.Bool
	c := New(Options{Logger: quiet, Poll: 20 * time.Millisecond,
		Recheck: func(_ context.Context, who interlock.Identity, cred Credential) (interlock.Identity, error) {
			if cred.Kind == CredentialLink && authenticates.Load() {
				return interlock.Identity{}, errors.New("the gateway now authenticates its callers")
			}
			return who, nil
		}})
	srv := httptest.NewServer(c.Handler())
	t.Cleanup(func() { c.Close(); srv.Close() })
	r := &rig{srv: srv, url: srv.URL, console: c}
	operator := interlock.Identity{Principal: "operator", Tenant: "local"}

	taken, err := c.OneTimeLogin(context.Background(), operator)
	if err != nil {
		t.Fatal(err)
	}
	refused, err := c.OneTimeLogin(context.Background(), operator)
	if err != nil {
		t.Fatal(err)
	}
	if res, _ := r.browser(t).get("/console/login?once=" + taken); res.StatusCode != http.StatusSeeOther || cookieNamed(res, sessionCookie) == nil {
		t.Errorf("a link while links sign in: status %d", res.StatusCode)
	}
	for _, attempt := range []string{"first", "second"} {
		authenticates.Store(attempt == "first")
		res, page := r.browser(t).get("/console/login?once=" + refused)
		if res.StatusCode != http.StatusForbidden || cookieNamed(res, sessionCookie) != nil || !strings.Contains(page, "interlock console link") {
			t.Errorf("%s use of a link the gateway no longer takes: status %d\n%s", attempt, res.StatusCode, page)
		}
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
				c := New(Options{Logger: quiet})
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
