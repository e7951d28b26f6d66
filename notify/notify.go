// Package notify tells approvers that a call waits for them: on every new
// pending approval it POSTs to the configured webhooks, as a generic JSON
// body or in the shape Slack's and Mattermost's incoming webhooks accept,
// with the summary and the approval's link. Deliveries run in the
// background and are retried with backoff; a webhook that stays down
// never holds up a call. The body carries no argument values, only the
// summary, which is rendered over redacted arguments.
package notify

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync/atomic"
	"time"

	"github.com/interlock-mcp/interlock/approval"
)

// Webhook is one place to notify.
type Webhook struct {
	URL string
	// Format is "json" (the default), "slack" or "mattermost".
	Format string
}

// Event is the generic JSON body.
type Event struct {
	Event     string    `json:"event"`
	ID        string    `json:"approval_id"`
	URL       string    `json:"approval_url,omitempty"`
	Tool      string    `json:"tool"`
	Upstream  string    `json:"upstream,omitempty"`
	Rule      string    `json:"rule,omitempty"`
	Tenant    string    `json:"tenant"`
	Principal string    `json:"principal"`
	Summary   string    `json:"summary"`
	Approvers []string  `json:"approvers"`
	Quorum    int       `json:"quorum"`
	ExpiresAt time.Time `json:"expires_at"`
}

// Notifier delivers notifications.
type Notifier struct {
	// hooks are replaced whole when the configuration is reloaded.
	hooks   atomic.Pointer[[]Webhook]
	url     func(id string) string
	client  *http.Client
	log     *slog.Logger
	queue   chan Event
	backoff []time.Duration
}

// queueLength bounds the notifications waiting for delivery; beyond it a
// notification is dropped with a warning rather than delay calls.
const queueLength = 256

// New returns a notifier for hooks; url gives an approval's link. Call
// Run to deliver.
func New(hooks []Webhook, url func(id string) string, log *slog.Logger) *Notifier {
	n := &Notifier{url: url, log: log, queue: make(chan Event, queueLength),
		client:  &http.Client{Timeout: 10 * time.Second},
		backoff: []time.Duration{time.Second, 4 * time.Second, 15 * time.Second}}
	n.SetHooks(hooks)
	return n
}

// SetHooks makes hooks the webhooks of every notification delivered from
// now on, such as after the configuration was reloaded.
func (n *Notifier) SetHooks(hooks []Webhook) { n.hooks.Store(&hooks) }

// Pending queues the notification of a new pending approval; it never
// blocks. It fits [interlock.GateOptions.OnApproval].
func (n *Notifier) Pending(_ context.Context, a *approval.Approval) {
	e := Event{Event: "approval_pending", ID: a.ID, Tool: a.Tool, Upstream: a.Upstream, Rule: a.Rule, Tenant: a.Tenant,
		Principal: a.Principal, Summary: a.Summary, Approvers: a.Approvers, Quorum: a.Quorum, ExpiresAt: a.ExpiresAt}
	if n.url != nil {
		e.URL = n.url(a.ID)
	}
	select {
	case n.queue <- e:
	default:
		n.log.Warn("notification queue full; dropped", "approval", a.ID)
	}
}

// Run delivers queued notifications until ctx ends.
func (n *Notifier) Run(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case e := <-n.queue:
			for _, h := range *n.hooks.Load() {
				n.deliver(ctx, h, e)
			}
		}
	}
}

// deliver POSTs e to h, retrying with backoff on a failure.
func (n *Notifier) deliver(ctx context.Context, h Webhook, e Event) {
	body, err := encode(h.Format, e)
	if err != nil {
		n.log.Error("notification not encoded", "error", err)
		return
	}
	for attempt := 0; ; attempt++ {
		err := n.post(ctx, h.URL, body)
		if err == nil {
			return
		}
		if attempt >= len(n.backoff) {
			n.log.Warn("notification not delivered", "webhook", redact(h.URL), "approval", e.ID, "error", err)
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(n.backoff[attempt]):
		}
	}
}

func (n *Notifier) post(ctx context.Context, url string, body []byte) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "interlock")
	resp, err := n.client.Do(req)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("webhook answered %s", resp.Status)
	}
	return nil
}

// encode writes e in a webhook's format.
func encode(format string, e Event) ([]byte, error) {
	switch format {
	case "", "json":
		return json.Marshal(e)
	case "slack", "mattermost":
		// Both accept {"text": …} with Markdown-style links.
		who := strings.Join(e.Approvers, ", ")
		text := fmt.Sprintf("*%s* (%s/%s) waits for approval by %s: %s", e.Tool, e.Tenant, e.Principal, who, e.Summary)
		if e.URL != "" {
			if format == "slack" {
				text += fmt.Sprintf(" <%s|Open approval %s>", e.URL, e.ID)
			} else {
				text += fmt.Sprintf(" [Open approval %s](%s)", e.ID, e.URL)
			}
		}
		return json.Marshal(map[string]string{"text": text})
	}
	return nil, fmt.Errorf("unknown webhook format %q", format)
}

// redact keeps a webhook's secret path out of the log: Slack and
// Mattermost put the token in it.
func redact(url string) string {
	if i := strings.Index(url, "://"); i >= 0 {
		if j := strings.IndexByte(url[i+3:], '/'); j >= 0 {
			return url[:i+3+j] + "/…"
		}
	}
	return url
}
