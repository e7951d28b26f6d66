package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/interlock-mcp/interlock/gateway"
	"github.com/interlock-mcp/interlock/internal/rawhttp"
)

// TestHostileRequestsThroughServe: requests without a credential whose
// path or header holds bytes that are not UTF-8, control characters or
// 60 KB, sent to `interlock serve` with API keys, leave a log that `audit
// verify` accepts; `audit tail` shows what was sent without handing a
// terminal its control characters, and `--json` prints valid UTF-8.
func TestHostileRequestsThroughServe(t *testing.T) {
	data := t.TempDir()
	cfg := strings.Replace(string(builtinConfig), "rules:", fmt.Sprintf("auth:\n  keys:\n    - {sha256: %s, principal: agent}\nrules:",
		gateway.HashKey("agent-key")), 1)
	cfg = strings.Replace(cfg, "command: [interlock, demo]", fmt.Sprintf("command: [%s, demo, --db, %s]", binary, filepath.Join(data, "demo.db")), 1)
	config := filepath.Join(data, "config.yaml")
	if err := os.WriteFile(config, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	addr := strings.TrimSuffix(strings.TrimPrefix(servedHTTPWith(t, nil, "--config", config, "--data", data), "http://"), "/mcp")
	requests := []string{
		"GET /v1/tools/%FF HTTP/1.1\r\n",
		"GET /v1/tools/%C0%AF HTTP/1.1\r\n",
		"GET /v1/%1B%5B2J%00%E2%80%AE HTTP/1.1\r\n",
		"GET /v1/" + strings.Repeat("%FE", 20_000) + " HTTP/1.1\r\n",
		"POST /mcp HTTP/1.1\r\nAuthorization: Bearer \xff\xfe\r\nX-Client: \xc3\x28\r\nContent-Length: 0\r\n",
	}
	for _, req := range requests {
		if status := rawhttp.Status(t, addr, req); status != http.StatusUnauthorized {
			t.Errorf("%.40q: status %d, want 401", req, status)
		}
	}

	code, out, errText := runCLI(t, "audit", "verify", "--data", data, "--config", config)
	if code != 0 || !strings.HasPrefix(out, "ok: ") {
		t.Fatalf("audit verify: %d %q %q", code, out, errText)
	}
	_, tail, _ := runCLI(t, "audit", "tail", "-n", "20", "--data", data, "--config", config)
	if strings.ContainsFunc(tail, func(r rune) bool { return r != '\n' && actsOnTerminal(r) }) ||
		!strings.Contains(tail, `GET /v1/tools/\xff`) || !strings.Contains(tail, `GET /v1/tools/\xc0\xaf`) ||
		!strings.Contains(tail, `GET /v1/\x1b[2J\x00\u202e`) || !strings.Contains(tail, "…[cut ") {
		t.Errorf("audit tail:\n%q", tail)
	}
	_, js, _ := runCLI(t, "audit", "tail", "--json", "-n", "20", "--data", data, "--config", config)
	refused := 0
	for line := range strings.Lines(js) {
		var r struct{ Event, Detail string }
		if err := json.Unmarshal([]byte(line), &r); err != nil || !utf8.ValidString(line) || len(line) > 2<<10 {
			t.Errorf("audit tail --json: %d bytes, %v: %.200q", len(line), err, line)
		}
		if r.Event == "auth_refused" {
			refused++
		}
	}
	if refused != len(requests) {
		t.Errorf("%d auth_refused records, want %d", refused, len(requests))
	}
}

// TestTerminalText: what a terminal acts on is escaped, the rest kept.
func TestTerminalText(t *testing.T) {
	for _, tt := range []struct{ in, want string }{
		{"GET /v1/tools", "GET /v1/tools"},
		{"naïve €, 😀", "naïve €, 😀"},
		{"\x1b[2J\x00\x07\x7f", `\x1b[2J\x00\x07\x7f`},
		{"a\u0085b\u009bc", `a\x85b\x9bc`},
		{"abc\u202edef\u2066\u200f", `abc\u202edef\u2066\u200f`},
		{"one\ntwo\rthree\u2028four", `one\x0atwo\x0dthree\u2028four`},
	} {
		t.Run(tt.want, func(t *testing.T) {
			if got := terminalText(tt.in); got != tt.want {
				t.Errorf("terminalText(%q) = %q, want %q", tt.in, got, tt.want)
			}
		})
	}
}
