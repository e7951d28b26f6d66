package notify

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/interlock-mcp/interlock/approval"
)

func TestWebhooks(t *testing.T) {
	var mu sync.Mutex
	got := map[string][]string{}
	var failures atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/flaky" && failures.Add(1) <= 2 {
			w.WriteHeader(http.StatusBadGateway)
			return
		}
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		got[r.URL.Path] = append(got[r.URL.Path], string(b))
		mu.Unlock()
	}))
	defer srv.Close()
	n := New([]Webhook{{URL: srv.URL + "/json"}, {URL: srv.URL + "/slack", Format: "slack"},
		{URL: srv.URL + "/mattermost", Format: "mattermost"}, {URL: srv.URL + "/flaky"}},
		func(id string) string { return "http://127.0.0.1:8740/console/approvals/" + id }, slog.New(slog.DiscardHandler))
	n.backoff = []time.Duration{10 * time.Millisecond, 10 * time.Millisecond, 10 * time.Millisecond}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go n.Run(ctx)

	n.Pending(ctx, &approval.Approval{ID: "apr_1", Tool: "refund_invoice", Tenant: "local", Principal: "anonymous",
		Summary: "Refund $5,000.00 on inv_1001.", Approvers: []string{"operator", "group:finance"}, Quorum: 1,
		Args: map[string]any{"card_token": "tok_secret"}, ExpiresAt: time.Now().Add(time.Hour)})

	deadline := time.Now().Add(5 * time.Second)
	for {
		mu.Lock()
		n := len(got)
		mu.Unlock()
		if n == 4 || time.Now().After(deadline) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	mu.Lock()
	defer mu.Unlock()
	var e Event
	if err := json.Unmarshal([]byte(got["/json"][0]), &e); err != nil || e.ID != "apr_1" || e.Event != "approval_pending" ||
		e.URL != "http://127.0.0.1:8740/console/approvals/apr_1" || e.Summary != "Refund $5,000.00 on inv_1001." {
		t.Errorf("json body: %v %+v", err, e)
	}
	for path, want := range map[string]string{"/slack": "<http://127.0.0.1:8740/console/approvals/apr_1|Open approval apr_1>",
		"/mattermost": "[Open approval apr_1](http://127.0.0.1:8740/console/approvals/apr_1)"} {
		var m map[string]string
		if len(got[path]) != 1 || json.Unmarshal([]byte(got[path][0]), &m) != nil || !strings.Contains(m["text"], want) || !strings.Contains(m["text"], "refund_invoice") {
			t.Errorf("%s: %v", path, got[path])
		}
	}
	if len(got["/flaky"]) != 1 {
		t.Errorf("the flaky webhook got %d deliveries after two failures", len(got["/flaky"]))
	}
	for path, bodies := range got {
		for _, b := range bodies {
			if strings.Contains(b, "tok_secret") {
				t.Errorf("%s carried an argument value: %s", path, b)
			}
		}
	}
	if redact("https://hooks.slack.com/services/T0/B0/secret") != "https://hooks.slack.com/…" {
		t.Errorf("redact = %q", redact("https://hooks.slack.com/services/T0/B0/secret"))
	}
}

// TestSetHooks: a notification queued after the webhooks were replaced
// goes to the new ones only.
func TestSetHooks(t *testing.T) {
	paths := make(chan string, 4)
	srv := httptest.NewServer(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) { paths <- r.URL.Path }))
	defer srv.Close()
	n := New([]Webhook{{URL: srv.URL + "/old"}}, nil, slog.New(slog.DiscardHandler))
	n.SetHooks([]Webhook{{URL: srv.URL + "/new"}})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go n.Run(ctx)
	n.Pending(ctx, &approval.Approval{ID: "apr_1"})
	n.Pending(ctx, &approval.Approval{ID: "apr_2"})
	for range 2 {
		if p := <-paths; p != "/new" {
			t.Errorf("delivered to %s, want /new", p)
		}
	}
}
