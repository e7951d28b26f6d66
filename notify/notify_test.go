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
	"unicode"
	"unicode/utf8"

	"github.com/interlock-mcp/interlock/approval"
)

var quiet = slog.New(slog.DiscardHandler)

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
		func(id string) string { return "http://127.0.0.1:8740/console/approvals/" + id }, quiet)
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
	for path, want := range map[string]string{
		"/slack": "*refund_invoice* (local/anonymous) waits for approval by operator, group:" + wj + "finance: " +
			"Refund $5,000.00 on inv_1001. <http://127.0.0.1:8740/console/approvals/apr_1|Open approval apr_1>",
		"/mattermost": `*refund\_invoice* (local/anonymous) waits for approval by operator, group:` + wj + "finance: " +
			`Refund \$5,000.00 on inv\_1001. [Open approval apr_1](http://127.0.0.1:8740/console/approvals/apr_1)`,
	} {
		var m map[string]string
		if len(got[path]) != 1 || json.Unmarshal([]byte(got[path][0]), &m) != nil || m["text"] != want {
			t.Errorf("%s: %q, want the text %q", path, got[path], want)
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
	n := New([]Webhook{{URL: srv.URL + "/old"}}, nil, quiet)
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

// wj is the word joiner that breaks mentions, links and addresses.
const wj = "\u2060"

const approvalURL = "https://interlock.example/console/approvals/apr_1"

// delivered returns the body each format's webhook received for a, by
// format.
func delivered(t *testing.T, a *approval.Approval) map[string]string {
	t.Helper()
	bodies := make(chan [2]string, 3)
	srv := httptest.NewServer(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		bodies <- [2]string{strings.TrimPrefix(r.URL.Path, "/"), string(b)}
	}))
	defer srv.Close()
	n := New([]Webhook{{URL: srv.URL + "/json"}, {URL: srv.URL + "/slack", Format: "slack"},
		{URL: srv.URL + "/mattermost", Format: "mattermost"}},
		func(id string) string { return "https://interlock.example/console/approvals/" + id }, quiet)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go n.Run(ctx)
	n.Pending(ctx, a)
	got := map[string]string{}
	for range 3 {
		select {
		case b := <-bodies:
			got[b[0]] = b[1]
		case <-time.After(5 * time.Second):
			t.Fatalf("delivered %d of 3 notifications", len(got))
		}
	}
	return got
}

// pendingWith is a pending approval whose summary is summary.
func pendingWith(summary string) *approval.Approval {
	return &approval.Approval{ID: "apr_1", Tool: "refund_invoice", Tenant: "local", Principal: "anonymous",
		Summary: summary, Approvers: []string{"operator"}, Quorum: 1, Args: map[string]any{"note": summary},
		ExpiresAt: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)}
}

// The bytes around the summary in each format's body for pendingWith.
const (
	jsonBefore       = `{"event":"approval_pending","approval_id":"apr_1","approval_url":"` + approvalURL + `","tool":"refund_invoice","tenant":"local","principal":"anonymous","summary":`
	jsonAfter        = `,"approvers":["operator"],"quorum":1,"expires_at":"2026-01-02T03:04:05Z"}`
	slackBefore      = `{"text":"*refund_invoice* (local/anonymous) waits for approval by operator: `
	slackAfter       = ` <` + approvalURL + `|Open approval apr_1>"}`
	mattermostBefore = `{"text":"*refund\\_invoice* (local/anonymous) waits for approval by operator: `
	mattermostAfter  = ` [Open approval apr_1](` + approvalURL + `)"}`
)

// TestHostileSummaries: a summary carries text from outside. Each
// webhook receives it bounded and valid UTF-8; Slack and Mattermost
// receive it on one line, escaped for their markup, with every mention,
// link and address broken, so that the approval's link is the only link
// and no one is notified but the channel's readers. The want fields are
// the summary's bytes in each body.
func TestHostileSummaries(t *testing.T) {
	tests := []struct {
		name, summary           string
		json, slack, mattermost string
	}{
		{"a plain summary", "Refund $5,000.00 on inv_1001.",
			`"Refund $5,000.00 on inv_1001."`,
			`Refund $5,000.00 on inv_1001.`,
			`Refund \\$5,000.00 on inv\\_1001.`},
		{"Slack's channel-wide mentions", "<!channel> <!here> <!everyone>",
			`"\u003c!channel\u003e \u003c!here\u003e \u003c!everyone\u003e"`,
			`&lt;!channel&gt; &lt;!here&gt; &lt;!everyone&gt;`,
			`&lt;!channel&gt; &lt;!here&gt; &lt;!everyone&gt;`},
		{"Slack's user, channel and group mentions", "<@U123ABC> <#C123|general> <!subteam^S123|@oncall>",
			`"\u003c@U123ABC\u003e \u003c#C123|general\u003e \u003c!subteam^S123|@oncall\u003e"`,
			`&lt;@` + wj + `U123ABC&gt; &lt;#` + wj + `C123|general&gt; &lt;!subteam^S123|@` + wj + `oncall&gt;`,
			`&lt;@` + wj + `U123ABC&gt; &lt;#` + wj + `C123\\|general&gt; &lt;!subteam^S123\\|@` + wj + `oncall&gt;`},
		{"a forged Slack link", "<https://evil.example/approve|Open approval apr_1>",
			`"\u003chttps://evil.example/approve|Open approval apr_1\u003e"`,
			`&lt;https:` + wj + `//evil.` + wj + `example/approve|Open approval apr_1&gt;`,
			`&lt;https:` + wj + `//evil.` + wj + `example/approve\\|Open approval apr\\_1&gt;`},
		{"mentions in plain text", "@here @channel @everyone @all @HERE @alice",
			`"@here @channel @everyone @all @HERE @alice"`,
			`@` + wj + `here @` + wj + `channel @` + wj + `everyone @` + wj + `all @` + wj + `HERE @` + wj + `alice`,
			`@` + wj + `here @` + wj + `channel @` + wj + `everyone @` + wj + `all @` + wj + `HERE @` + wj + `alice`},
		{"a mention at the end of a sentence", "ask @here.",
			`"ask @here."`,
			`ask @` + wj + `here.`,
			`ask @` + wj + `here.`},
		{"a mention the summary already broke", "@" + wj + "here",
			`"@` + wj + `here"`,
			`@` + wj + wj + `here`,
			`@` + wj + wj + `here`},
		{"an e-mail address", "ops@evil.example",
			`"ops@evil.example"`,
			`ops@` + wj + `evil.` + wj + `example`,
			`ops@` + wj + `evil.` + wj + `example`},
		{"channel links and hashtags", "~town-square #general #1234",
			`"~town-square #general #1234"`,
			`~` + wj + `town-square #` + wj + `general #` + wj + `1234`,
			`\\~` + wj + `town-square #` + wj + `general #` + wj + `1234`},
		{"a Markdown link and image", "[Open approval apr_1](https://evil.example) ![x](https://evil.example/p.png)",
			`"[Open approval apr_1](https://evil.example) ![x](https://evil.example/p.png)"`,
			`[Open approval apr_1](https:` + wj + `//evil.` + wj + `example) ![x](https:` + wj + `//evil.` + wj + `example/p.` + wj + `png)`,
			`\\[Open approval apr\\_1\\](https:` + wj + `//evil.` + wj + `example) !\\[x\\](https:` + wj + `//evil.` + wj + `example/p.` + wj + `png)`},
		{"a Markdown link with a reference", "[approve][1] [1]: https://evil.example",
			`"[approve][1] [1]: https://evil.example"`,
			`[approve][1] [1]: https:` + wj + `//evil.` + wj + `example`,
			`\\[approve\\]\\[1\\] \\[1\\]: https:` + wj + `//evil.` + wj + `example`},
		{"bare URLs, host names and addresses", "https://evil.example/a?b=c www.evil.example evil.example/approve http://10.0.0.1:8080/x",
			`"https://evil.example/a?b=c www.evil.example evil.example/approve http://10.0.0.1:8080/x"`,
			`https:` + wj + `//evil.` + wj + `example/a?b=c www.` + wj + `evil.` + wj + `example evil.` + wj + `example/approve http:` + wj + `//10.0.0.1:` + wj + `8080/x`,
			`https:` + wj + `//evil.` + wj + `example/a?b=c www.` + wj + `evil.` + wj + `example evil.` + wj + `example/approve http:` + wj + `//10.0.0.1:` + wj + `8080/x`},
		{"URLs of other schemes", "mailto:ops@evil.example javascript:alert(1) slack://open",
			`"mailto:ops@evil.example javascript:alert(1) slack://open"`,
			`mailto:` + wj + `ops@` + wj + `evil.` + wj + `example javascript:` + wj + `alert(1) slack:` + wj + `//open`,
			`mailto:` + wj + `ops@` + wj + `evil.` + wj + `example javascript:` + wj + `alert(1) slack:` + wj + `//open`},
		{"an autolink", "<https://evil.example>",
			`"\u003chttps://evil.example\u003e"`,
			`&lt;https:` + wj + `//evil.` + wj + `example&gt;`,
			`&lt;https:` + wj + `//evil.` + wj + `example&gt;`},
		{"HTML", `<a href="https://evil.example">approve</a><img src=x onerror=alert(1)>`,
			`"\u003ca href=\"https://evil.example\"\u003eapprove\u003c/a\u003e\u003cimg src=x onerror=alert(1)\u003e"`,
			`&lt;a href=\"https:` + wj + `//evil.` + wj + `example\"&gt;approve&lt;/a&gt;&lt;img src=x onerror=alert(1)&gt;`,
			`&lt;a href=\"https:` + wj + `//evil.` + wj + `example\"&gt;approve&lt;/a&gt;&lt;img src=x onerror=alert(1)&gt;`},
		{"text already escaped", "&lt;!channel&gt; &amp; &#64;here",
			`"\u0026lt;!channel\u0026gt; \u0026amp; \u0026#64;here"`,
			`&amp;lt;!channel&amp;gt; &amp;amp; &amp;#` + wj + `64;here`,
			`&amp;lt;!channel&amp;gt; &amp;amp; &amp;#` + wj + `64;here`},
		{"Markdown emphasis, code, strikethrough, tables and LaTeX", "**Approved by security** _now_ `code` ~~no~~ a|b $x$ \\[x\\]",
			`"**Approved by security** _now_ ` + "`code`" + ` ~~no~~ a|b $x$ \\[x\\]"`,
			`**Approved by security** _now_ ` + "`code`" + ` ~` + wj + `~` + wj + `no~` + wj + `~` + wj + ` a|b $x$ \\[x\\]`,
			`\\*\\*Approved by security\\*\\* \\_now\\_ \\` + "`" + `code\\` + "`" + ` \\~` + wj + `\\~` + wj + `no\\~` + wj + `\\~` + wj + ` a\\|b \\$x\\$ \\\\\\[x\\\\\\]`},
		{"line breaks before block Markdown", "Refund.\n\n# Approved\r\n> by security\n- ok\u2028\u2029done\t.",
			`"Refund.\n\n# Approved\r\n\u003e by security\n- ok\u2028\u2029done\t."`,
			`Refund. #` + wj + ` Approved &gt; by security - ok done .`,
			`Refund. #` + wj + ` Approved &gt; by security - ok done .`},
		{"a mention split by a line break", "@\nhere",
			`"@\nhere"`,
			`@` + wj + ` here`,
			`@` + wj + ` here`},
		{"directional overrides", "Pay \u202eexe.txt\u202c to \u2066bob\u2069",
			"\"Pay \u202eexe.txt\u202c to \u2066bob\u2069\"",
			`Pay exe.` + wj + `txt to bob`,
			`Pay exe.` + wj + `txt to bob`},
		{"control characters", "a\x00b\x1bc\x7fd\u0085e",
			"\"a\\u0000b\\u001bc\x7fd\u0085e\"",
			`a b c d e`,
			`a b c d e`},
		{"invalid UTF-8", "Refund \xff\xfe on inv_1 \xe2\x82",
			"\"Refund \ufffd on inv_1 \ufffd\"",
			"Refund \ufffd on inv_1 \ufffd",
			"Refund \ufffd on inv\\\\_1 \ufffd"},
		{"white space only", " \n\t ",
			`" \n\t "`,
			``,
			``},
		{"very long text", strings.Repeat("a", 600),
			`"` + strings.Repeat("a", 499) + `…"`,
			strings.Repeat("a", 499) + `…`,
			strings.Repeat("a", 499) + `…`},
		{"very long text of wide characters", strings.Repeat("€", 600),
			`"` + strings.Repeat("€", 499) + `…"`,
			strings.Repeat("€", 499) + `…`,
			strings.Repeat("€", 499) + `…`},
		{"very long text cut at a mention", strings.Repeat("x", 498) + "@here",
			`"` + strings.Repeat("x", 498) + `@…"`,
			strings.Repeat("x", 498) + `@` + wj + `…`,
			strings.Repeat("x", 498) + `@` + wj + `…`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := delivered(t, pendingWith(tt.summary))
			for _, f := range []struct{ format, before, summary, after string }{
				{"json", jsonBefore, tt.json, jsonAfter},
				{"slack", slackBefore, tt.slack, slackAfter},
				{"mattermost", mattermostBefore, tt.mattermost, mattermostAfter},
			} {
				if want := f.before + f.summary + f.after; got[f.format] != want {
					t.Errorf("%s body:\n got %s\nwant %s", f.format, got[f.format], want)
				}
				if !utf8.ValidString(got[f.format]) || !json.Valid([]byte(got[f.format])) {
					t.Errorf("%s body is not valid UTF-8 JSON: %q", f.format, got[f.format])
				}
			}
			for format, before := range map[string]string{"slack": slackBefore, "mattermost": mattermostBefore} {
				var m map[string]string
				if err := json.Unmarshal([]byte(got[format]), &m); err != nil {
					t.Fatal(err)
				}
				var head map[string]string
				if err := json.Unmarshal([]byte(before+`"}`), &head); err != nil {
					t.Fatal(err)
				}
				summary, ok := strings.CutPrefix(m["text"], head["text"])
				if ok {
					summary, ok = strings.CutSuffix(summary, map[string]string{
						"slack":      " <" + approvalURL + "|Open approval apr_1>",
						"mattermost": " [Open approval apr_1](" + approvalURL + ")"}[format])
				}
				if !ok {
					t.Fatalf("%s text: %q", format, m["text"])
				}
				inert(t, format, summary)
			}
		})
	}
}

// inert fails t unless the escaped text s can be no mention, link or
// markup in format, whatever the table says it should be.
func inert(t *testing.T, format, s string) {
	t.Helper()
	if utf8.RuneCountInString(s) > 3*maxSummary {
		t.Errorf("%s: %d characters", format, utf8.RuneCountInString(s))
	}
	if strings.ContainsAny(s, "<>\n\r\u2028\u2029\u202e") {
		t.Errorf("%s: a control character in %q", format, s)
	}
	runes := []rune(s)
	for i, r := range runes {
		next := ' '
		if i+1 < len(runes) {
			next = runes[i+1]
		}
		if strings.ContainsRune("@#~", r) && next != '\u2060' || r == ':' && next != ' ' && next != '\u2060' ||
			r == '.' && unicode.IsLetter(next) {
			t.Errorf("%s: %q at %d is not broken: %q", format, r, i, s)
		}
		if format == "mattermost" && strings.ContainsRune("`*_~[]|$", r) && (i == 0 || runes[i-1] != '\\') {
			t.Errorf("%s: %q at %d is not escaped: %q", format, r, i, s)
		}
	}
}

// TestHostileNames: the tool's, tenant's and caller's names are text from
// outside as well, and the approvers' names are escaped alike.
func TestHostileNames(t *testing.T) {
	a := pendingWith("ok")
	a.Tool, a.Tenant, a.Principal = "[x](https://evil.example)", "<!here>", "@channel"
	a.Approvers = []string{"group:ops", "<!channel>"}
	long := pendingWith("ok")
	long.Tool, long.Principal = strings.Repeat("t", 150), strings.Repeat("p", 101)
	tests := []struct {
		name                    string
		a                       *approval.Approval
		json, slack, mattermost string
	}{
		{"mentions and links", a,
			`{"event":"approval_pending","approval_id":"apr_1","approval_url":"` + approvalURL + `","tool":"[x](https://evil.example)","tenant":"\u003c!here\u003e","principal":"@channel","summary":"ok","approvers":["group:ops","\u003c!channel\u003e"],"quorum":1,"expires_at":"2026-01-02T03:04:05Z"}`,
			`{"text":"*[x](https:` + wj + `//evil.` + wj + `example)* (&lt;!here&gt;/@` + wj + `channel) waits for approval by group:` + wj + `ops, &lt;!channel&gt;: ok <` + approvalURL + `|Open approval apr_1>"}`,
			`{"text":"*\\[x\\](https:` + wj + `//evil.` + wj + `example)* (&lt;!here&gt;/@` + wj + `channel) waits for approval by group:` + wj + `ops, &lt;!channel&gt;: ok [Open approval apr_1](` + approvalURL + `)"}`},
		{"long names", long,
			`{"event":"approval_pending","approval_id":"apr_1","approval_url":"` + approvalURL + `","tool":"` + strings.Repeat("t", 99) + `…","tenant":"local","principal":"` + strings.Repeat("p", 99) + `…","summary":"ok","approvers":["operator"],"quorum":1,"expires_at":"2026-01-02T03:04:05Z"}`,
			`{"text":"*` + strings.Repeat("t", 99) + `…* (local/` + strings.Repeat("p", 99) + `…) waits for approval by operator: ok <` + approvalURL + `|Open approval apr_1>"}`,
			`{"text":"*` + strings.Repeat("t", 99) + `…* (local/` + strings.Repeat("p", 99) + `…) waits for approval by operator: ok [Open approval apr_1](` + approvalURL + `)"}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := delivered(t, tt.a)
			for format, want := range map[string]string{"json": tt.json, "slack": tt.slack, "mattermost": tt.mattermost} {
				if got[format] != want {
					t.Errorf("%s body:\n got %s\nwant %s", format, got[format], want)
				}
			}
		})
	}
}

// TestWithoutLink: with no public address there is no link, and so none
// at all in the message.
func TestWithoutLink(t *testing.T) {
	for format, want := range map[string]string{
		"slack":      `{"text":"*refund_invoice* (local/anonymous) waits for approval by operator: see https:` + wj + `//evil.` + wj + `example"}`,
		"mattermost": `{"text":"*refund\\_invoice* (local/anonymous) waits for approval by operator: see https:` + wj + `//evil.` + wj + `example"}`,
	} {
		got, err := encode(format, Event{ID: "apr_1", Tool: "refund_invoice", Tenant: "local", Principal: "anonymous",
			Summary: "see https://evil.example", Approvers: []string{"operator"}})
		if err != nil || string(got) != want {
			t.Errorf("%s: %s, %v\nwant %s", format, got, err, want)
		}
	}
	if _, err := encode("teams", Event{}); err == nil {
		t.Error("an unknown format was encoded")
	}
}
