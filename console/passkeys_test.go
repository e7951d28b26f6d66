package console

import (
	"context"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/interlock-mcp/interlock/approval"
)

// TestPasskeyApprovalsInTheConsole: without a passkey's signature the
// console neither approves, denies nor grants an approval whose rule
// requires one, and its page sends the approver to register a passkey.
func TestPasskeyApprovalsInTheConsole(t *testing.T) {
	signed := func(r *rig, t *testing.T) {
		a := refund("apr_1", 1)
		a.RequirePasskey = true
		r.keep(t, a)
	}
	t.Run("the page asks for a passkey before offering a decision", func(t *testing.T) {
		r := newRig(t, false, nil)
		signed(r, t)
		b := r.signedIn(t, "key-bob")
		_, page := b.get("/console/approvals/apr_1")
		if strings.Contains(page, `value="approve"`) || strings.Contains(page, "Grant these calls") || !strings.Contains(page, `<a href="/console/passkey">Register a passkey</a>`) {
			t.Errorf("the page of an approval that requires a passkey, for an approver without one:\n%s", page)
		}
	})
	t.Run("the passkey page offers a registration at a host name", func(t *testing.T) {
		r := newRig(t, false, nil)
		r.url = strings.Replace(r.url, "127.0.0.1", "localhost", 1)
		b := r.signedIn(t, "key-bob")
		_, page := b.get("/console/passkey")
		if !strings.Contains(page, "no passkey registered for <strong>localhost</strong>") || !strings.Contains(page, `id="passkey-register"`) ||
			!strings.Contains(page, `&#34;userVerification&#34;:&#34;required&#34;`) {
			t.Errorf("the passkey page:\n%s", page)
		}
	})
	t.Run("the passkey page at an IP address says to open the console by name", func(t *testing.T) {
		r := newRig(t, false, nil)
		b := r.signedIn(t, "key-bob")
		_, page := b.get("/console/passkey")
		if strings.Contains(page, `id="passkey-register"`) || !strings.Contains(page, "this console was opened at the address 127.0.0.1") {
			t.Errorf("the passkey page:\n%s", page)
		}
	})
	tests := []struct {
		name string
		path string
		form url.Values
		says string
	}{
		{"approve without an assertion", "/console/approvals/apr_1/decide", url.Values{"decision": {"approve"}},
			"only when it is signed with your passkey"},
		{"deny without an assertion", "/console/approvals/apr_1/decide", url.Values{"decision": {"deny"}},
			"only when it is signed with your passkey"},
		{"approve with an assertion that is not one", "/console/approvals/apr_1/decide", url.Values{"decision": {"approve"}, "assertion": {`{"id":"x"}`}},
			"only when it is signed with your passkey"},
		{"grant a scope", "/console/approvals/apr_1/grant", url.Values{"ttl": {"1h"}, "uses": {"3"}},
			"no standing scope may be granted"},
	}
	for _, tt := range tests {
		t.Run("refused: "+tt.name, func(t *testing.T) {
			r := newRig(t, false, nil)
			signed(r, t)
			b := r.signedIn(t, "key-bob")
			tt.form.Set("csrf", b.csrf("/console/"))
			res, page := b.post(tt.path, tt.form)
			if res.StatusCode != http.StatusForbidden || !strings.Contains(page, tt.says) {
				t.Errorf("status %d, want 403 saying %q:\n%s", res.StatusCode, tt.says, page)
			}
			a, _ := r.store.Get(context.Background(), "apr_1")
			if a.State(time.Now()) != approval.Pending {
				t.Errorf("state %s after the refusal", a.State(time.Now()))
			}
		})
	}
}
