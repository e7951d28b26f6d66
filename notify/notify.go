// Package notify tells approvers that a call waits for them: on every new
// pending approval it POSTs to the configured webhooks, as a generic JSON
// body or in the shape Slack's and Mattermost's incoming webhooks accept,
// with the summary and the approval's link. Deliveries run in the
// background and are retried with backoff; a webhook that stays down
// never holds up a call.
//
// The body carries no arguments, but the summary is rendered over them
// (redacted) and the preview's result, so it quotes whatever values its
// template names. It, and the names of the tool, tenant and caller, are
// text from outside: each is made valid UTF-8 and cut to a bound, and in
// a chat message escaped for the chat's markup, so that no mention or
// link in it (nor, in Mattermost, any Markdown) takes effect and the
// approval's link is the only link in the message.
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
	"unicode"
	"unicode/utf8"

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
	approvers := make([]string, len(a.Approvers))
	for i, name := range a.Approvers {
		approvers[i] = bound(name, maxName)
	}
	e := Event{Event: "approval_pending", ID: a.ID, Tool: bound(a.Tool, maxName), Upstream: bound(a.Upstream, maxName),
		Rule: bound(a.Rule, maxName), Tenant: bound(a.Tenant, maxName), Principal: bound(a.Principal, maxName),
		Summary: bound(a.Summary, maxSummary), Approvers: approvers, Quorum: a.Quorum, ExpiresAt: a.ExpiresAt}
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
		esc := func(s string) string { return escape(format, s) }
		who := make([]string, len(e.Approvers))
		for i, name := range e.Approvers {
			who[i] = esc(name)
		}
		text := fmt.Sprintf("*%s* (%s/%s) waits for approval by %s: %s", esc(e.Tool), esc(e.Tenant), esc(e.Principal),
			strings.Join(who, ", "), esc(e.Summary))
		if e.URL != "" {
			if format == "slack" {
				text += fmt.Sprintf(" <%s|Open approval %s>", e.URL, e.ID)
			} else {
				text += fmt.Sprintf(" [Open approval %s](%s)", e.ID, e.URL)
			}
		}
		// Without JSON's \u003c for <: it decodes alike, and the escapes
		// above read better in a webhook's log as they are.
		var b bytes.Buffer
		enc := json.NewEncoder(&b)
		enc.SetEscapeHTML(false)
		if err := enc.Encode(map[string]string{"text": text}); err != nil {
			return nil, fmt.Errorf("encoding a %s message: %w", format, err)
		}
		return bytes.TrimSuffix(b.Bytes(), []byte("\n")), nil
	}
	return nil, fmt.Errorf("unknown webhook format %q", format)
}

// Bounds, in characters, of the text from outside in a notification.
const (
	maxSummary = 500
	maxName    = 100
)

// bound makes s valid UTF-8 and cuts it to at most limit characters,
// the last of them an ellipsis when it was cut.
func bound(s string, limit int) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	if utf8.RuneCountInString(s) <= limit {
		return s
	}
	return string([]rune(s)[:limit-1]) + "…"
}

// joiner is U+2060 WORD JOINER: invisible, and not a letter, digit or
// punctuation to any chat's parser, so one placed after the "@" of
// "@here" or the "." of "evil.example" leaves the text as it reads and
// makes it no mention and no address.
const joiner = '\u2060'

// escape writes text from outside for a chat's message, on one line, so
// that none of it is markup. Both chats read &, < and > as control
// characters: Slack's mrkdwn for <!channel>, <@U…>, <#C…>, <!subteam^…>
// and <url|text>, and Mattermost's incoming webhooks too, which turn
// <!channel> into @channel and <url|text> into a link before reading the
// rest as Markdown, so both get the HTML escapes, which each shows as the
// character. Mattermost's Markdown delimiters are escaped with a
// backslash. What neither's markup covers, the mentions, channel links,
// hashtags, URLs, domain names and e-mail addresses each finds in plain
// text, is broken with a word joiner: after every @, # and ~, after a
// : that something follows, and after a . that a letter follows.
// Slack's *, _, ~ and ` have no escape; they can only change how the
// summary looks.
func escape(format, s string) string {
	runes := []rune(oneLine(s))
	var b strings.Builder
	b.Grow(len(s) + len(s)/4)
	for i, r := range runes {
		var next rune
		if i+1 < len(runes) {
			next = runes[i+1]
		}
		switch {
		case r == '&':
			b.WriteString("&amp;")
		case r == '<':
			b.WriteString("&lt;")
		case r == '>':
			b.WriteString("&gt;")
		case format == "mattermost" && strings.ContainsRune(markdownDelimiters, r):
			b.WriteByte('\\')
			b.WriteRune(r)
		default:
			b.WriteRune(r)
		}
		switch {
		case r == '@', r == '#', r == '~',
			r == ':' && next != 0 && next != ' ',
			r == '.' && unicode.IsLetter(next):
			b.WriteRune(joiner)
		}
	}
	return b.String()
}

// markdownDelimiters are the characters that start or end Markdown's
// inline markup: emphasis, strikethrough, code, links and images (the
// brackets), table cells, LaTeX and escapes. Block markup starts a line,
// which text from outside never does here.
const markdownDelimiters = "\\`*_~[]|$"

// oneLine turns every run of white space, control characters and
// directional formatting characters in s into one space, and trims it:
// a line break could start a line that looks like the chat's own, and
// directional overrides could show the text in another order than it is.
func oneLine(s string) string {
	var b strings.Builder
	space := false
	for _, r := range s {
		if unicode.IsSpace(r) || unicode.IsControl(r) || unicode.Is(unicode.Bidi_Control, r) ||
			r == '\u2028' || r == '\u2029' {
			space = true
			continue
		}
		if space && b.Len() > 0 {
			b.WriteByte(' ')
		}
		space = false
		b.WriteRune(r)
	}
	return b.String()
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
