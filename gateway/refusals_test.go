package gateway

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
	"testing/synctest"
	"time"
	"unicode/utf8"

	"github.com/interlock-mcp/interlock"
	"github.com/interlock-mcp/interlock/audit"
	"github.com/interlock-mcp/interlock/internal/rawhttp"
	"github.com/interlock-mcp/interlock/metrics"
)

// TestRefusalsAreFoldedBySource: a source has refusalBurst refusals
// recorded in a window and the rest counted; its next record, in a later
// window, says how many. Sources are told apart by address, IPv6 ones by
// their /64.
func TestRefusalsAreFoldedBySource(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var f refusals
		admit := func(remote string) (bool, string) { return f.admit(remote) }
		for i := range refusalBurst {
			if ok, note := admit(fmt.Sprintf("192.0.2.1:%d", 1000+i)); !ok || note != "" {
				t.Fatalf("refusal %d of a source: recorded %v, note %q", i+1, ok, note)
			}
		}
		for i := range 7 {
			if ok, _ := admit(fmt.Sprintf("192.0.2.1:%d", 2000+i)); ok {
				t.Fatalf("refusal %d of a source past its burst was recorded", refusalBurst+i+1)
			}
		}
		if ok, note := admit("192.0.2.2:1"); !ok || note != "" {
			t.Errorf("another source's first refusal: recorded %v, note %q", ok, note)
		}
		for i := range refusalBurst {
			admit(fmt.Sprintf("[2001:db8:1:2::%x]:443", i+1))
		}
		if ok, _ := admit("[2001:db8:1:2:ffff::1]:443"); ok {
			t.Error("an address of a /64 that used its burst was recorded")
		}
		if ok, _ := admit("[2001:db8:1:3::1]:443"); !ok {
			t.Error("the first refusal of another /64 was not recorded")
		}
		if ok, _ := admit("[::ffff:192.0.2.1]:80"); ok {
			t.Error("an IPv4 address written as IPv6 is another source")
		}

		time.Sleep(refusalWindow - time.Second)
		if ok, _ := admit("192.0.2.1:3000"); ok {
			t.Error("a refusal before the window ended was recorded")
		}
		time.Sleep(time.Second)
		ok, note := admit("192.0.2.1:3001")
		if want := "9 more refusals from 192.0.2.1 since 2000-01-01T00:00:00Z were counted, not recorded"; !ok || note != want {
			t.Errorf("the first refusal of the next window: recorded %v, note %q, want %q", ok, note, want)
		}
		if ok, note := admit("192.0.2.1:3002"); !ok || note != "" {
			t.Errorf("the count is said once: recorded %v, note %q", ok, note)
		}
	})
}

// TestRefusalSourcesAreBounded: the table of sources does not grow past
// maxRefusalSources; a source that finds it full is counted, and the
// count is said by the next record once sources are forgotten.
func TestRefusalSourcesAreBounded(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var f refusals
		for i := range maxRefusalSources {
			if ok, _ := f.admit(fmt.Sprintf("10.%d.%d.%d:1", i>>16, i>>8&0xff, i&0xff)); !ok {
				t.Fatalf("source %d: not recorded", i)
			}
		}
		for range 3 {
			if ok, _ := f.admit("192.0.2.9:1"); ok {
				t.Fatal("a source beyond the table was recorded")
			}
		}
		if len(f.sources) != maxRefusalSources {
			t.Errorf("%d sources tracked", len(f.sources))
		}
		time.Sleep(refusalWindow)
		ok, note := f.admit("192.0.2.9:1")
		if !ok || note != "3 refusals from other sources were counted, not recorded" {
			t.Errorf("after the window: recorded %v, note %q", ok, note)
		}
		if len(f.sources) != 1 {
			t.Errorf("%d sources tracked once the others' windows ended", len(f.sources))
		}
	})
}

// TestHostileRequestsKeepTheChainWhole: requests without a credential
// whose path or header holds bytes that are not UTF-8, control characters
// or 60 KB, and a flood of them, leave an audit log that verifies, with
// records of bounded size that say what was sent; the flood is counted at
// /metrics, and recorded ten at a time.
func TestHostileRequestsKeepTheChainWhole(t *testing.T) {
	m := metrics.New()
	f := testConfig(t, fmt.Sprintf("auth:\n  keys:\n    - {sha256: %s, principal: alice}\nrules:\n  - {name: wipes, match: {tools: [wipe]}, mode: deny}\n",
		HashKey("alice-key")), "fx")
	gw, log := startAudited(t, f, Options{Metrics: m})
	srv := httptest.NewServer(gw.Handler(false))
	defer srv.Close()

	long := strings.Repeat("a", 60_000)
	tests := []struct {
		name, request string
		// detail is what the record's detail must hold.
		detail string
	}{
		{"a byte that is not UTF-8", "GET /v1/tools/%FF HTTP/1.1\r\n", `GET /v1/tools/\xff`},
		{"an overlong slash", "GET /v1/tools/%C0%AF HTTP/1.1\r\n", `GET /v1/tools/\xc0\xaf`},
		{"a surrogate in UTF-8", "DELETE /v1/%ED%A0%80 HTTP/1.1\r\n", `DELETE /v1/\xed\xa0\x80`},
		{"NUL and escape", "GET /v1/%00%1B%5B2J HTTP/1.1\r\n", "GET /v1/\x00\x1b[2J"},
		{"a 60 KB path", "GET /v1/" + long + " HTTP/1.1\r\n", "GET /v1/aaaa"},
		{"a 60 KB path of bad bytes", "GET /v1/" + strings.Repeat("%FF", 20_000) + " HTTP/1.1\r\n", `GET /v1/\xff\xff`},
		{"a bad credential", "GET /v1/tools HTTP/1.1\r\nAuthorization: Bearer \xff\xfe\x80" + long + "\r\n", "an unknown API key: GET /v1/tools"},
		{"a bad header", "POST /mcp HTTP/1.1\r\nX-Client: \xc3\x28\r\nContent-Length: 0\r\n", "POST /mcp"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if status := rawhttp.Status(t, srv.Listener.Addr().String(), tt.request); status != http.StatusUnauthorized {
				t.Errorf("status %d, want 401", status)
			}
		})
	}

	var details []string
	for r, err := range log.Records(context.Background(), 1) {
		if err != nil {
			t.Fatal(err)
		}
		if r.Event != "auth_refused" {
			continue
		}
		details = append(details, r.Detail)
		if len(r.Raw) > 2<<10 || !utf8.Valid(r.Raw) {
			t.Errorf("record %d: %d bytes, UTF-8 %v", r.Seq, len(r.Raw), utf8.Valid(r.Raw))
		}
	}
	if len(details) != len(tests) {
		t.Fatalf("%d auth_refused records, want %d: %q", len(details), len(tests), details)
	}
	for i, tt := range tests {
		if !strings.Contains(details[i], tt.detail) || !strings.HasPrefix(details[i], "from 127.0.0.1:") {
			t.Errorf("%s: detail %q lacks %q", tt.name, details[i], tt.detail)
		}
	}
	if cut := regexp.MustCompile(`…\[cut (\d+) bytes\]$`); !cut.MatchString(details[4]) || !cut.MatchString(details[5]) {
		t.Errorf("the long paths' details do not say they were cut: %q, %q", details[4][len(details[4])-40:], details[5][len(details[5])-40:])
	}
	if n, err := audit.Verify(log.Records(context.Background(), 1)); err != nil || n != int64(len(tests)) {
		t.Fatalf("verify: %d, %v", n, err)
	}

	// A flood: only refusalBurst refusals of the source are recorded in a
	// window (the hostile ones above among them), and all are counted.
	const flood = 25
	for range flood {
		rawhttp.Status(t, srv.Listener.Addr().String(), "GET /v1/tools/%FF HTTP/1.1\r\n")
	}
	refused := 0
	for r, err := range log.Records(context.Background(), 1) {
		if err != nil {
			t.Fatal(err)
		}
		if r.Event == "auth_refused" {
			refused++
		}
	}
	if refused != refusalBurst {
		t.Errorf("%d refusals recorded, want %d", refused, refusalBurst)
	}

	// A call of alice's that no rule matched names the default rule.
	cs := dial(t, nil, srv.URL+MCPPath, "alice-key", nil)
	call(t, cs, "echo", map[string]any{"\xff": "\xc0\xaf", "s": strings.Repeat("é", 10_000)})
	call(t, cs, "wipe", map[string]any{"target": "\xff"})
	rules := map[string]string{}
	for r, err := range log.Records(context.Background(), 1) {
		if err != nil {
			t.Fatal(err)
		}
		if r.Event == "call" {
			rules[r.Tool] = r.Rule
			if s, _ := r.Args["s"].(string); r.Tool == "echo" && (len(s) > 4<<10 || !strings.HasSuffix(s, "…[cut 15938 bytes]")) {
				t.Errorf("a 20 KB argument is recorded as %d bytes ending %q", len(s), s[max(len(s)-30, 0):])
			}
		}
	}
	if rules["echo"] != interlock.DefaultRule || rules["wipe"] != "wipes" {
		t.Errorf("rules of the calls' records: %v, want echo: %s, wipe: wipes", rules, interlock.DefaultRule)
	}
	if n, err := audit.Verify(log.Records(context.Background(), 1)); err != nil {
		t.Errorf("verify: %d, %v", n, err)
	}

	req, _ := http.NewRequest("GET", srv.URL+"/metrics", nil)
	req.Header.Set("Authorization", "Bearer alice-key")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	if want := fmt.Sprintf(`interlock_events_total{event="auth_refused"} %d`, len(tests)+flood); !strings.Contains(string(b), want) {
		t.Errorf("/metrics lacks %s", want)
	}
}
