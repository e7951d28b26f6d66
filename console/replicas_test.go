package console

import (
	"bufio"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-webauthn/webauthn/webauthn"

	"github.com/interlock-mcp/interlock"
	"github.com/interlock-mcp/interlock/approval"
	"github.com/interlock-mcp/interlock/policy"
	"github.com/interlock-mcp/interlock/sqlite"
)

// replica is one gateway's console on a state file several share.
type replica struct {
	*rig
	state *sqlite.State
}

// newReplica serves a console on its own handle on the state file at
// path, as a gateway process on the data directory would. poll is how
// often it reads the approvals without a signal.
func newReplica(t *testing.T, path string, poll time.Duration) *replica {
	t.Helper()
	st, err := sqlite.OpenState(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	approvals := interlock.NewApprovalService(interlock.ApprovalOptions{Store: st.Approvals(), Grants: st.Approvals(),
		CompileCondition: policy.CompileCondition, Logger: quiet})
	c := New(Options{Approvals: approvals, Logger: quiet, Poll: poll, State: st.Console(), Signal: st.Console(),
		Authenticate: func(_ context.Context, key string) (interlock.Identity, Credential, error) {
			if who, ok := keys[key]; ok {
				return who, Credential{Kind: CredentialKey, Ref: key}, nil
			}
			return interlock.Identity{}, Credential{}, errors.New("unknown key")
		}})
	srv := httptest.NewServer(c.Handler())
	t.Cleanup(func() { c.Close(); srv.Close() })
	return &replica{rig: &rig{srv: srv, url: srv.URL, console: c}, state: st}
}

// on sends b's next requests to r, with the cookies it has.
func (b *browser) on(r *replica) *browser {
	b.base = r.url
	return b
}

// TestAnyReplicaAnswers: an approver signed in on one console is signed
// in on another sharing its store; a form of one page is taken by the
// other; what one leaves for the next page the other shows; signing out
// on one signs out on both.
func TestAnyReplicaAnswers(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state.db")
	a, b := newReplica(t, path, time.Second), newReplica(t, path, time.Second)
	now := time.Now()
	if _, err := a.state.Approvals().Request(context.Background(), refund("apr_1", 1)); err != nil {
		t.Fatal(err)
	}
	bob := a.browser(t)
	bob.login("key-bob", "")
	steps := []struct {
		name  string
		on    *replica
		do    func() (*http.Response, string)
		check func(res *http.Response, page string) bool
	}{
		{"signed in on a, listed on b", b, func() (*http.Response, string) { return bob.get("/console/") },
			func(res *http.Response, page string) bool {
				return res.StatusCode == http.StatusOK && strings.Contains(page, "Signed in as <strong>bob</strong>") && strings.Contains(page, "apr_1")
			}},
		{"a's form decided on b", b, func() (*http.Response, string) {
			csrf := bob.on(a).csrf("/console/approvals/apr_1")
			return bob.on(b).post("/console/approvals/apr_1/decide", url.Values{"csrf": {csrf}, "decision": {"approve"}})
		}, func(res *http.Response, _ string) bool { return res.StatusCode == http.StatusSeeOther }},
		{"b's flash shown on a", a, func() (*http.Response, string) { return bob.get("/console/approvals/apr_1") },
			func(_ *http.Response, page string) bool {
				return strings.Contains(page, "You approved alice&#39;s call of refund_invoice.")
			}},
		{"the flash is shown once", b, func() (*http.Response, string) { return bob.get("/console/approvals/apr_1") },
			func(_ *http.Response, page string) bool {
				return !strings.Contains(page, "You approved") && strings.Contains(page, "Approved: runs when the caller calls again or polls its task")
			}},
		{"signed out on b, signed out on a", a, func() (*http.Response, string) {
			bob.on(b).post("/console/logout", url.Values{"csrf": {bob.on(b).csrf("/console/")}})
			return bob.on(a).get("/console/")
		}, func(res *http.Response, _ string) bool {
			return res.StatusCode == http.StatusSeeOther && strings.HasPrefix(res.Header.Get("Location"), "/console/login")
		}},
	}
	for _, s := range steps {
		t.Run(s.name, func(t *testing.T) {
			bob.t = t
			bob.on(s.on)
			if res, page := s.do(); !s.check(res, page) {
				t.Fatalf("status %d, location %q\n%s", res.StatusCode, res.Header.Get("Location"), page)
			}
		})
	}
	if a, err := a.state.Approvals().Get(context.Background(), "apr_1"); err != nil || a.State(now) != approval.Approved {
		t.Errorf("the approval after bob's decision: %+v %v", a, err)
	}
}

// TestLiveUpdateAcrossReplicas: a page listening on one console hears of
// a decision made on another at once, through the store's signal, long
// before its next poll; and only what its viewer may see.
func TestLiveUpdateAcrossReplicas(t *testing.T) {
	// bob's decision is made on a's gate, as one through REST would be.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	path := filepath.Join(t.TempDir(), "state.db")
	// A poll of an hour: only the signal can bring the news in time.
	a, b := newReplica(t, path, time.Hour), newReplica(t, path, time.Hour)
	bob := a.browser(t)
	bob.login("key-bob", "")
	mallory := a.browser(t)
	mallory.login("key-mallory", "")
	if _, err := a.state.Approvals().Request(ctx, refund("apr_1", 2)); err != nil {
		t.Fatal(err)
	}
	bobs, mallorys := told(bob.on(b).events(ctx)), told(mallory.on(b).events(ctx))
	// b's first read of the stores is what its streams start from: once
	// b tells of an approval made after it, that read was made, with
	// apr_1 in it.
	for i := 0; ; i++ {
		if _, err := a.state.Approvals().Request(ctx, refund(fmt.Sprint("apr_0", i), 1)); err != nil {
			t.Fatal(err)
		}
		a.console.Notify()
		if got := within(t, bobs, time.Second); got != "" {
			if got != "New approval waiting: refund_invoice, called by alice." {
				t.Fatalf("b's stream told %q first", got)
			}
			break
		}
	}
	if _, err := a.console.approvals.Decide(ctx, "apr_1", interlock.Identity{Tenant: "acme", Principal: "bob", Groups: []string{"finance"}}, approval.Approve, ""); err != nil {
		t.Fatal(err)
	}
	a.console.Notify()
	if got := within(t, bobs, 5*time.Second); got != "bob approved refund_invoice (1 of 2)." {
		t.Errorf("b's stream told %q", got)
	}
	// Mallory may not see alice's refund: her stream stays quiet, and
	// then tells of one she may see.
	if _, err := a.state.Approvals().Request(ctx, &approval.Approval{ID: "apr_m", Key: "m", Tenant: "acme", Principal: "alice",
		Tool: "send_reminder", Approvers: []string{"mallory"}, Quorum: 1, CreatedAt: time.Now(), ExpiresAt: time.Now().Add(time.Hour)}); err != nil {
		t.Fatal(err)
	}
	a.console.Notify()
	if got := within(t, mallorys, 5*time.Second); got != "New approval waiting: send_reminder, called by alice." {
		t.Errorf("mallory's stream told %q", got)
	}
}

// told yields the data of each change event rd reads.
func told(rd *bufio.Reader) <-chan string {
	ch := make(chan string, 16)
	go func() {
		defer close(ch)
		for {
			line, err := rd.ReadString('\n')
			if err != nil {
				return
			}
			if data, ok := strings.CutPrefix(strings.TrimRight(line, "\n"), "data: "); ok {
				ch <- data
			}
		}
	}()
	return ch
}

// within returns the next event of ch, or "" when none comes within d.
func within(t *testing.T, ch <-chan string, d time.Duration) string {
	t.Helper()
	select {
	case got := <-ch:
		return got
	case <-time.After(d):
		return ""
	}
}

// TestConsoleFailsClosed: while the console's store cannot be read, a
// signed-in approver's page is a clear error, never a signed-in view,
// and no sign-in starts a session.
func TestConsoleFailsClosed(t *testing.T) {
	r := newReplica(t, filepath.Join(t.TempDir(), "state.db"), time.Second)
	bob := r.browser(t)
	bob.login("key-bob", "")
	loginCSRF := bob.csrf("/console/login")
	if err := r.state.Close(); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		do   func() (*http.Response, string)
	}{
		{"a page", func() (*http.Response, string) { return bob.get("/console/") }},
		{"the event stream", func() (*http.Response, string) { return bob.get("/console/events") }},
		{"a sign-in", func() (*http.Response, string) {
			return bob.post("/console/login", url.Values{"csrf": {loginCSRF}, "key": {"key-bob"}})
		}},
		{"a one-time link", func() (*http.Response, string) { return bob.get("/console/login?once=some-token") }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			bob.t = t
			res, page := tt.do()
			if res.StatusCode != http.StatusServiceUnavailable || strings.Contains(page, "Signed in as") || strings.Contains(page, "sql") ||
				cookieNamed(res, sessionCookie) != nil || !strings.Contains(page, "Try again in a moment") {
				t.Errorf("status %d\n%s", res.StatusCode, page)
			}
		})
	}
}

// TestSignOutEndsStreams: signing out ends the session's event streams
// on the replica at once, and a stream that ends leaves nothing behind.
func TestSignOutEndsStreams(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	r := newReplica(t, filepath.Join(t.TempDir(), "state.db"), time.Second)
	bob := r.browser(t)
	bob.login("key-bob", "")
	stream := bob.events(ctx)
	waitUntil := func(what string, cond func() bool) {
		t.Helper()
		for !cond() {
			if ctx.Err() != nil {
				t.Fatalf("timed out waiting for %s", what)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	streams := func() int {
		r.console.endings.mu.Lock()
		defer r.console.endings.mu.Unlock()
		return len(r.console.endings.m)
	}
	waitUntil("the stream to wait on its session", func() bool { return streams() == 1 })
	bob.post("/console/logout", url.Values{"csrf": {bob.csrf("/console/")}})
	done := make(chan error, 1)
	go func() {
		for {
			if _, err := stream.ReadString('\n'); err != nil {
				done <- err
				return
			}
		}
	}()
	select {
	case <-done:
	case <-time.After(2 * time.Second):
		t.Fatal("the stream is still open after signing out")
	}
	waitUntil("the stream's entry to go", func() bool { return streams() == 0 })
}

// TestSignedOutElsewhereHearsNothing: a stream open on one replica tells
// nothing more once its session is signed out on another.
func TestSignedOutElsewhereHearsNothing(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	path := filepath.Join(t.TempDir(), "state.db")
	a, b := newReplica(t, path, 20*time.Millisecond), newReplica(t, path, 20*time.Millisecond)
	bob := a.browser(t)
	bob.login("key-bob", "")
	stream := bob.events(ctx)
	time.Sleep(100 * time.Millisecond)
	bob.on(b).post("/console/logout", url.Values{"csrf": {bob.on(b).csrf("/console/")}})
	if _, err := a.state.Approvals().Request(ctx, refund("apr_1", 1)); err != nil {
		t.Fatal(err)
	}
	for {
		line, err := stream.ReadString('\n')
		if err != nil {
			return // the stream ended, telling nothing
		}
		if strings.HasPrefix(line, "data: ") {
			t.Fatalf("a stream signed out elsewhere told %q", line)
		}
	}
}

// TestClonedPasskeyAcrossReplicas: a passkey's signature counter is one
// counter for every replica sharing the store. An assertion with a
// counter another replica already accepted is refused as replayed (a
// cloned authenticator), and of two with one counter made at once on two
// replicas, one counts.
func TestClonedPasskeyAcrossReplicas(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "state.db")
	a, b := newReplica(t, path, time.Second), newReplica(t, path, time.Second)
	pa, pb := a.console.passkeys, b.console.passkeys
	bob := keys["key-bob"]
	id := []byte("bobs-credential")
	if err := pa.add(ctx, bob, registered{credential: webauthn.Credential{ID: id, Authenticator: webauthn.Authenticator{SignCount: 5}}, rpID: "localhost"}); err != nil {
		t.Fatal(err)
	}
	signed := func(n byte) [sha256.Size]byte { return sha256.Sum256([]byte{n}) }
	steps := []struct {
		name    string
		on      *passkeys
		signed  byte
		counter uint32
		ok      bool
	}{
		{"a growing counter on a", pa, 1, 6, true},
		{"the same counter from a clone on b", pb, 2, 6, false},
		{"a lower counter on b", pb, 3, 4, false},
		{"the next counter on b", pb, 4, 7, true},
		{"the assertion a accepted, verified again on b", pb, 1, 6, true},
	}
	for _, s := range steps {
		t.Run(s.name, func(t *testing.T) {
			err := s.on.accept(ctx, bob, id, signed(s.signed), s.counter)
			if s.ok != (err == nil) || (!s.ok && !errors.Is(err, interlock.ErrPasskeyReplayed)) {
				t.Fatalf("accept: %v, want ok %v", err, s.ok)
			}
		})
	}
	t.Run("one counter at once on two replicas", func(t *testing.T) {
		errs := make([]error, 2)
		var wg sync.WaitGroup
		for i, p := range []*passkeys{pa, pb} {
			wg.Go(func() { errs[i] = p.accept(ctx, bob, id, signed(byte(10+i)), 8) })
		}
		wg.Wait()
		if (errs[0] == nil) == (errs[1] == nil) || !errors.Is(errors.Join(errs...), interlock.ErrPasskeyReplayed) {
			t.Errorf("two assertions with counter 8: %v", errs)
		}
	})
}
