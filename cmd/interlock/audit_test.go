package main

import (
	"bufio"
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/interlock-mcp/interlock/audit"
	"github.com/interlock-mcp/interlock/gateway"
	"github.com/interlock-mcp/interlock/internal/rawhttp"
	"github.com/interlock-mcp/interlock/internal/testdb"
)

// runCLI runs the binary to completion and returns its exit code and output.
func runCLI(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	cmd := command("", args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	if ee, ok := err.(*exec.ExitError); ok {
		return ee.ExitCode(), stdout.String(), stderr.String()
	} else if err != nil {
		t.Fatal(err)
	}
	return 0, stdout.String(), stderr.String()
}

// TestAuditThroughServe writes a log with every mode of the demo through
// the real binary, verifies it, then tampers with it.
func TestAuditThroughServe(t *testing.T) {
	data := t.TempDir()
	keyFile := filepath.Join(data, "audit.key")
	if out, err := exec.Command("openssl", "genpkey", "-algorithm", "ed25519", "-out", keyFile).CombinedOutput(); err != nil {
		t.Fatalf("openssl: %v: %s", err, out)
	}
	config := filepath.Join(data, "config.yaml")
	sinkURL := pgSchema(t)
	builtin := strings.Replace(string(builtinConfig), "rules:", fmt.Sprintf("audit:\n  checkpoint: {key_file: %s, interval: 1s, file: %s, postgres: %q, table: audit_anchor}\nrules:",
		keyFile, filepath.Join(data, "checkpoints.jsonl"), sinkURL), 1)
	builtin = strings.Replace(builtin, "command: [interlock, demo]", fmt.Sprintf("command: [%s, demo, --db, %s]", binary, filepath.Join(data, "demo.db")), 1)
	if err := os.WriteFile(config, []byte(builtin), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := command("false", "serve", "--listen", "127.0.0.1:0", "--data", data, "--config", config)
	url, exited := launch(t, cmd)
	f := &formAnswer{action: "accept", content: map[string]any{"confirm": true, "type_back": "acct_2048"}}
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "audit-it", Version: "9.9"}, &mcp.ClientOptions{ElicitationHandler: f.handle}).
		Connect(context.Background(), &mcp.StreamableClientTransport{Endpoint: url}, &mcp.ClientSessionOptions{ProtocolVersion: "2025-11-25"}) // on a session, which the records name
	if err != nil {
		t.Fatal(err)
	}
	callTool(t, cs, "list_customers", map[string]any{})                                                              // allowed
	callTool(t, cs, "send_reminder", map[string]any{"customer_id": "acct_9931"})                                     // previewed
	callTool(t, cs, "send_reminder", map[string]any{"customer_id": "acct_9931", "__confirm": true})                  // confirmed by flag
	asked := structured(t, callTool(t, cs, "upgrade_plan", map[string]any{"customer_id": "acct_2048", "to": "pro"})) // asked
	callTool(t, cs, "upgrade_plan", map[string]any{"customer_id": "acct_2048", "to": "pro", "__confirm_token": asked["confirm_token"]})
	callTool(t, cs, "delete_customer", map[string]any{"id": "acct_2048"}) // confirmed by elicit
	f.action = "decline"
	callTool(t, cs, "delete_customer", map[string]any{"id": "acct_1024"}) // declined
	cs.Close()
	time.Sleep(1500 * time.Millisecond) // a checkpoint is signed
	_ = cmd.Process.Signal(syscall.SIGTERM)
	<-exited

	code, out, errText := runCLI(t, "audit", "verify", "--data", data, "--config", config, "--checkpoints")
	if code != 0 || !strings.HasPrefix(out, "ok: ") || !strings.Contains(out, "checkpoints signed by key") {
		t.Fatalf("verify: %d %q %q", code, out, errText)
	}
	// Every checkpoint reached both sinks: the file and another team's table.
	conn, err := pgx.Connect(context.Background(), sinkURL)
	if err != nil {
		t.Fatal(err)
	}
	var anchored int
	conn.QueryRow(context.Background(), "SELECT count(*) FROM audit_anchor").Scan(&anchored)
	conn.Close(context.Background())
	sunk, _ := os.ReadFile(filepath.Join(data, "checkpoints.jsonl"))
	if anchored == 0 || anchored != strings.Count(string(sunk), "\n") {
		t.Errorf("%d checkpoints in the table, %d lines in the file", anchored, strings.Count(string(sunk), "\n"))
	}
	_, jsonl, _ := runCLI(t, "audit", "export", "--data", data, "--config", config)
	var trail []string
	var declined int64 // the record an edit below changes
	for line := range strings.Lines(jsonl) {
		var r audit.Record
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatalf("export line %q: %v", line, err)
		}
		if r.Event == "call" {
			if r.Decision == "declined" {
				declined = r.Seq
			}
			trail = append(trail, r.Tool+":"+r.Decision+"/"+r.Outcome+"/"+r.ConfirmedBy)
			if r.Client != "audit-it/9.9" || r.Session == "" || r.Principal != "anonymous" {
				t.Errorf("record %d: client %q session %q principal %q", r.Seq, r.Client, r.Session, r.Principal)
			}
		}
	}
	want := []string{
		"list_customers:allowed/ok/",
		"send_reminder:previewed/DRY_RUN_PREVIEW/",
		"send_reminder:confirmed//flag", "send_reminder:confirmed/ok/flag",
		"upgrade_plan:asked/CONFIRMATION_REQUIRED/",
		"upgrade_plan:confirmed//token", "upgrade_plan:confirmed/ok/token",
		"delete_customer:confirmed//elicit", "delete_customer:confirmed/ok/elicit",
		"delete_customer:declined/DECLINED/",
	}
	if strings.Join(trail, " ") != strings.Join(want, " ") {
		t.Errorf("trail:\n%s\nwant:\n%s", strings.Join(trail, "\n"), strings.Join(want, "\n"))
	}
	if _, tail, _ := runCLI(t, "audit", "tail", "-n", "2", "--data", data, "--config", config); strings.Count(tail, "\n") != 2 || !strings.Contains(tail, "decision=declined") {
		t.Errorf("tail -n 2:\n%s", tail)
	}

	db, err := sql.Open("sqlite", filepath.Join(data, "audit.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.Exec(`UPDATE audit SET record = replace(record, '"decision":"declined"', '"decision":"confirmed"') WHERE record LIKE '%"decision":"declined"%'`); err != nil {
		t.Fatal(err)
	}
	code, _, errText = runCLI(t, "audit", "verify", "--data", data, "--config", config)
	if code != 1 || !strings.Contains(errText, fmt.Sprintf("record %d: was edited", declined)) {
		t.Errorf("verify after an edit: %d %q", code, errText)
	}
}

// TestAuditSurvivesKill9 kills the gateway in the middle of a stream of
// calls: afterwards the chain verifies, and every call a client saw
// succeed has its record, in SQLite and in PostgreSQL.
func TestAuditSurvivesKill9(t *testing.T) {
	for _, backend := range []string{"sqlite", "postgres"} {
		t.Run(backend, func(t *testing.T) {
			section := ""
			if backend == "postgres" {
				section = "audit:\n  postgres: " + pgSchema(t) + "\n"
			}
			k := killDuringCalls(t, section)
			t.Logf("%s: clients saw %d allowed and %d confirmed calls succeed; the log has %d, %d (and %d confirmations)",
				backend, k.allowed, k.confirmed, k.okAllowed, k.okConfirmed, k.confirmations)
			if k.okAllowed < k.allowed || k.okConfirmed < k.confirmed || k.confirmations < k.okConfirmed {
				t.Errorf("records missing for calls that succeeded")
			}
		})
	}
}

// TestQueuedAllowedCallsSurviveKill9 kills a gateway whose allowed calls
// answer once their record is queued (audit.allowed_calls: queued): the
// chain still verifies and no confirmed call lacks its record; the records
// of allowed calls still queued at the kill are lost, and counted.
func TestQueuedAllowedCallsSurviveKill9(t *testing.T) {
	for _, backend := range []string{"sqlite", "postgres"} {
		t.Run(backend, func(t *testing.T) {
			section := "audit:\n  allowed_calls: queued\n"
			if backend == "postgres" {
				section += "  postgres: " + pgSchema(t) + "\n"
			}
			k := killDuringCalls(t, section)
			t.Logf("%s: clients saw %d allowed and %d confirmed calls succeed; the log has %d, %d (and %d confirmations): %d allowed calls' records lost",
				backend, k.allowed, k.confirmed, k.okAllowed, k.okConfirmed, k.confirmations, max(0, k.allowed-k.okAllowed))
			if k.confirmations < k.confirmed {
				t.Errorf("%d confirmed calls succeeded, and only %d confirmations are on record", k.confirmed, k.confirmations)
			}
			if k.okAllowed == 0 {
				t.Error("no allowed call's record was written")
			}
		})
	}
}

// killed is what clients saw succeed before a gateway was killed, and what
// its audit log holds afterwards.
type killed struct {
	allowed, confirmed                    int64
	okAllowed, okConfirmed, confirmations int64
}

// killDuringCalls serves the demo with the audit section given, has four
// clients call an allowed and a confirmed tool in turn, kills the gateway
// with SIGKILL, and checks that the audit chain verifies.
func killDuringCalls(t *testing.T, section string) killed {
	t.Helper()
	data := t.TempDir()
	config := filepath.Join(data, "config.yaml")
	cfg := strings.Replace(string(builtinConfig), "rules:", section+"rules:", 1)
	cfg = strings.Replace(cfg, "command: [interlock, demo]", fmt.Sprintf("command: [%s, demo, --db, %s]", binary, filepath.Join(data, "demo.db")), 1)
	if err := os.WriteFile(config, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := command("false", "serve", "--listen", "127.0.0.1:0", "--data", data, "--config", config)
	url, exited := launch(t, cmd)

	var allowed, confirmed atomic.Int64
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for range 4 {
		wg.Go(func() {
			cs, err := mcp.NewClient(&mcp.Implementation{Name: "crash"}, nil).Connect(context.Background(), &mcp.StreamableClientTransport{Endpoint: url}, nil)
			if err != nil {
				return
			}
			defer cs.Close()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				name, args, counter := "get_customer", map[string]any{"id": "acct_9931"}, &allowed
				if i%2 == 1 {
					name, args, counter = "send_reminder", map[string]any{"customer_id": "acct_9931", "__confirm": true}, &confirmed
				}
				res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: name, Arguments: args})
				if err != nil {
					return
				}
				if !res.IsError {
					counter.Add(1)
				}
			}
		})
	}
	time.Sleep(1500 * time.Millisecond)
	_ = cmd.Process.Signal(syscall.SIGKILL)
	<-exited
	close(stop)
	wg.Wait()
	k := killed{allowed: allowed.Load(), confirmed: confirmed.Load()}
	if k.allowed == 0 || k.confirmed == 0 {
		t.Fatalf("no calls succeeded before the kill (%d, %d)", k.allowed, k.confirmed)
	}

	code, out, errText := runCLI(t, "audit", "verify", "--data", data, "--config", config)
	if code != 0 {
		t.Fatalf("verify after kill -9: %d %q %q", code, out, errText)
	}
	_, jsonl, _ := runCLI(t, "audit", "export", "--data", data, "--config", config)
	sc := bufio.NewScanner(strings.NewReader(jsonl))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var r audit.Record
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatal(err)
		}
		switch {
		case r.Tool == "get_customer" && r.Outcome == "ok":
			k.okAllowed++
		case r.Tool == "send_reminder" && r.Decision == "confirmed" && r.Outcome == "":
			k.confirmations++
		case r.Tool == "send_reminder" && r.Outcome == "ok":
			k.okConfirmed++
		}
	}
	return k
}

// pgStore is a configuration's store section on a fresh schema of the
// test PostgreSQL server (see pgSchema).
func pgStore(t *testing.T) string { return fmt.Sprintf("store:\n  postgres: %q\n", pgSchema(t)) }

// redisStore is a configuration's store section on the test Redis, under
// a prefix no other run shares (its name, then the time).
func redisStore(name string) string {
	return fmt.Sprintf("store:\n  redis: redis://127.0.0.1:6379/0\n  prefix: \"interlock-test:%s:%d:\"\n", name, time.Now().UnixNano())
}

// onSharedStores runs test as a subtest on each store gateways share,
// PostgreSQL and Redis; storeOf makes a configuration's store section on
// a fresh schema or prefix, the Redis one named for what.
func onSharedStores(t *testing.T, what string, test func(t *testing.T, storeOf func(*testing.T) string)) {
	stores := []struct {
		name    string
		storeOf func(t *testing.T) string
	}{
		{"postgres", pgStore},
		{"redis", func(*testing.T) string { return redisStore(what) }},
	}
	for _, s := range stores {
		t.Run(s.name, func(t *testing.T) { test(t, s.storeOf) })
	}
}

// pgSchema makes a fresh schema on the test PostgreSQL server and returns
// a URL that uses it.
func pgSchema(t *testing.T) string {
	t.Helper()
	return testdb.Schema(t, "interlock_it_")
}

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
