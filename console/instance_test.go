package console

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"
)

// serveConsole serves a console announced as instance, through wrap if
// given.
func serveConsole(t *testing.T, instance string, wrap func(http.Handler) http.Handler) *httptest.Server {
	t.Helper()
	c := New(Options{Logger: quiet, Instance: instance})
	h := c.Handler()
	if wrap != nil {
		h = wrap(h)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(func() { c.Close(); srv.Close() })
	return srv
}

// foreign serves h as a process that took a console's port would.
func foreign(t *testing.T, h http.HandlerFunc) string {
	t.Helper()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv.URL
}

// TestProberNamesOnlyTheAnnouncedConsole: a console counts only where it
// answers a fresh challenge as the gateway that announced it; nothing
// listening, any other server on its port (one that answers 200 to
// everything, one that copies a proof, one that sends the prober on to
// the real console), another gateway's console, or one that announced no
// id, does not.
func TestProberNamesOnlyTheAnnouncedConsole(t *testing.T) {
	real := serveConsole(t, "gw-a1", nil).URL
	dead := httptest.NewServer(http.NotFoundHandler())
	dead.Close()
	// A proof of the real console, to a challenge of its own.
	res, err := http.Get(real + InstancePath + "?challenge=" + randomToken())
	if err != nil {
		t.Fatal(err)
	}
	copied, _ := io.ReadAll(res.Body)
	res.Body.Close()
	tests := []struct {
		name     string
		base     string
		instance string
		want     bool
	}{
		{"the announced console", real, "gw-a1", true},
		{"its base with a slash", real + "/", "gw-a1", true},
		{"nothing listens", dead.URL, "gw-a1", false},
		{"a server answering 200 to everything", foreign(t, func(w http.ResponseWriter, _ *http.Request) {
			_, _ = io.WriteString(w, `{"status":"ok"}`)
		}), "gw-a1", false},
		{"a server copying an earlier proof", foreign(t, func(w http.ResponseWriter, _ *http.Request) {
			_, _ = w.Write(copied)
		}), "gw-a1", false},
		{"a server sending the prober on to the console", foreign(t, func(w http.ResponseWriter, r *http.Request) {
			http.Redirect(w, r, real+r.URL.RequestURI(), http.StatusFound)
		}), "gw-a1", false},
		{"another gateway's console", real, "gw-b2", false},
		{"a console announced under no id", serveConsole(t, "", nil).URL, "", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := NewProber().Answers(context.Background(), tt.base, tt.instance); got != tt.want {
				t.Errorf("answers: %v, want %v", got, tt.want)
			}
		})
	}
}

// TestProberKeepsWhatItLearned: what a prober learned holds for a few
// seconds, so calls waiting for approval do not each ask; then the
// console is asked again, and one gone is no longer named.
func TestProberKeepsWhatItLearned(t *testing.T) {
	var asked atomic.Int32
	srv := serveConsole(t, "gw-a1", func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			asked.Add(1)
			h.ServeHTTP(w, r)
		})
	})
	now := time.Now()
	p := NewProber()
	p.now = func() time.Time { return now }
	ctx := context.Background()
	if !p.Answers(ctx, srv.URL, "gw-a1") || !p.Answers(ctx, srv.URL, "gw-a1") || asked.Load() != 1 {
		t.Fatalf("the live console, asked twice: asked %d times", asked.Load())
	}
	srv.Close()
	if !p.Answers(ctx, srv.URL, "gw-a1") {
		t.Error("what was learned a moment ago was not kept")
	}
	now = now.Add(probeKept)
	if p.Answers(ctx, srv.URL, "gw-a1") {
		t.Error("a console gone is still named once what was learned expired")
	}
}
