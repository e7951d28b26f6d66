package main

import (
	"database/sql"
	"fmt"
	"maps"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/interlock-mcp/interlock/internal/testdb"
)

// ownPostgres is a PostgreSQL cluster of the test's own, which it may
// crash and start again (the shared server it must not). PostgreSQL
// refuses to run as root: a test run as root runs its programs as the
// user postgres, in a directory that user owns.
type ownPostgres struct {
	t    *testing.T
	dir  string
	port int
}

// postgresProgram finds one of PostgreSQL's server programs: on PATH, or
// where Debian installs them.
func postgresProgram(t *testing.T, name string) string {
	t.Helper()
	if p, err := exec.LookPath(name); err == nil {
		return p
	}
	found, _ := filepath.Glob("/usr/lib/postgresql/*/bin/" + name)
	if len(found) == 0 {
		t.Fatalf("PostgreSQL's %s must be installed (on PATH or in /usr/lib/postgresql/*/bin)", name)
	}
	return found[len(found)-1]
}

// asPostgres prepares a PostgreSQL program, as the user postgres when the
// test runs as root.
func asPostgres(t *testing.T, args ...string) *exec.Cmd {
	t.Helper()
	args[0] = postgresProgram(t, args[0])
	if os.Geteuid() == 0 {
		return exec.Command("runuser", append([]string{"-u", "postgres", "--"}, args...)...)
	}
	return exec.Command(args[0], args[1:]...)
}

func startOwnPostgres(t *testing.T) *ownPostgres {
	t.Helper()
	// Not t.TempDir: its parents are private to the user running the test.
	dir, err := os.MkdirTemp("", "interlock-pg")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		if err != nil {
			t.Fatalf("a test run as root runs PostgreSQL as the user postgres: %v", err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		if err := os.Chown(dir, uid, -1); err != nil {
			t.Fatal(err)
		}
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &ownPostgres{t: t, dir: dir, port: l.Addr().(*net.TCPAddr).Port}
	l.Close()
	if out, err := asPostgres(t, "initdb", "-D", filepath.Join(dir, "data"), "-A", "trust", "-U", "postgres", "--no-sync").CombinedOutput(); err != nil {
		t.Fatalf("initdb: %v\n%s", err, out)
	}
	p.start()
	t.Cleanup(p.kill)
	return p
}

func (p *ownPostgres) url() string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", p.port)
}

func (p *ownPostgres) start() {
	p.t.Helper()
	opts := fmt.Sprintf("-p %d -k %s -c listen_addresses=127.0.0.1", p.port, p.dir)
	if out, err := asPostgres(p.t, "pg_ctl", "-D", filepath.Join(p.dir, "data"), "-o", opts, "-l", filepath.Join(p.dir, "log"), "-w", "start").CombinedOutput(); err != nil {
		p.t.Fatalf("pg_ctl start: %v\n%s", err, out)
	}
}

// kill stops the server as a crash would: no checkpoint, every
// connection cut.
func (p *ownPostgres) kill() {
	_ = asPostgres(p.t, "pg_ctl", "-D", filepath.Join(p.dir, "data"), "-m", "immediate", "-w", "stop").Run()
}

// A gated call's kind, as the load below sends them.
const (
	byToken    = "confirm token"
	byApproval = "approval"
	byBudget   = "budget"
)

// gatedLoad sends gated calls of each kind, one after another per kind,
// until stopped, and keeps what they were answered.
type gatedLoad struct {
	base string
	mu   sync.Mutex
	// ran counts the calls of each kind that ran.
	ran map[string]int
	// refused counts, per kind, the flows that ended on
	// UPSTREAM_UNAVAILABLE, retriable, saying nothing ran (or, for a
	// vote, that nothing was decided).
	refused map[string]int
	// wrong are answers no call should get, store away or not.
	wrong []string
	// away is set while the store is away; ranAway counts the flows of
	// each kind that began and ran while it was.
	away    bool
	ranAway map[string]int
}

// flow runs one gated call of kind to its end: the describe and redeem of
// a confirm token; a request for approval, bob's vote and the re-call; a
// reminder counted against a budget.
func (l *gatedLoad) flow(kind string) {
	l.mu.Lock()
	began := l.away
	l.mu.Unlock()
	call := func(url, key, body string) (int, map[string]any) {
		status, out, err := restDo(http.MethodPost, l.base+url, key, body)
		if err != nil {
			out = map[string]any{"transport": err.Error()}
		}
		return status, out
	}
	var status int
	var out map[string]any
	switch kind {
	case byToken:
		status, out = call("/v1/tools/refund_invoice/call", "agent-key", refundCall("inv_1003", 1))
		if token, ok := out["confirm_token"].(string); ok && status == http.StatusPreconditionRequired {
			status, out = call("/v1/tools/refund_invoice/call", "agent-key", fmt.Sprintf(`{"arguments":{"invoice_id":"inv_1003","amount":1},"confirm_token":%q}`, token))
		}
	case byApproval:
		status, out = call("/v1/tools/refund_invoice/call", "agent-key", refundCall("inv_1005", 1))
		if id, ok := out["approval_id"].(string); ok && status == http.StatusAccepted {
			if status, out = call("/v1/approvals/"+id+"/approve", "bob-key", `{}`); status == http.StatusOK {
				status, out = call("/v1/tools/refund_invoice/call", "agent-key", refundCall("inv_1005", 1))
			}
		}
	case byBudget:
		status, out = call("/v1/tools/send_reminder/call", "agent-key", `{"arguments":{"customer_id":"acct_9931"},"confirm":true}`)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case status == http.StatusOK:
		l.ran[kind]++
		if began && l.away {
			l.ranAway[kind]++
		}
	case out["code"] == "UPSTREAM_UNAVAILABLE" && out["retriable"] == true && strings.Contains(fmt.Sprint(out["message"]), "nothing") &&
		!leaks(fmt.Sprint(out)):
		l.refused[kind]++
	default:
		l.wrong = append(l.wrong, fmt.Sprintf("%s: %d %v", kind, status, out))
	}
}

// leaks reports whether an answer shows a client the text of an error
// inside interlock.
func leaks(answer string) bool {
	for _, s := range []string{"redis", "postgres", "pgx", "dial tcp", "connection refused", "EOF"} {
		if strings.Contains(strings.ToLower(answer), strings.ToLower(s)) {
			return true
		}
	}
	return false
}

func (l *gatedLoad) counts() (ran, refused map[string]int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return maps.Clone(l.ran), maps.Clone(l.refused)
}

// demoCount counts the rows of the demo database that query selects.
func demoCount(t *testing.T, path, query string) int {
	t.Helper()
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var n int
	if err := db.QueryRow(query).Scan(&n); err != nil {
		t.Fatalf("%s: %v", query, err)
	}
	return n
}

// TestGatedCallsWhileTheStoreIsAway: a gateway serves gated calls of
// every kind, one after another per kind, while its store is crashed and
// started again under it: Redis (the test's own redis-server, keeping
// tokens, approvals and budgets) and PostgreSQL (a cluster of the test's
// own, made with initdb and crashed with pg_ctl -m immediate, keeping
// approvals; tokens and budgets are then the process's own). While the
// store is away every call that needs it fails closed with
// UPSTREAM_UNAVAILABLE, retriable, saying nothing ran and naming nothing
// inside interlock, and calls that do not need it run on; nothing runs
// twice (the demo database counts every run); and once the store is back
// every kind runs again, without a restart of the gateway.
func TestGatedCallsWhileTheStoreIsAway(t *testing.T) {
	tests := []struct {
		name string
		// start starts the store and returns the configuration's store
		// section, and how to crash and restart the store.
		start func(t *testing.T) (section string, crash, restart func())
		// needs are the kinds of gated call that need the store.
		needs []string
	}{
		{"redis", func(t *testing.T) (string, func(), func()) {
			rs := testdb.OwnRedis(t)
			return "store:\n  redis: " + rs.URL() + "\n", rs.Kill, rs.Start
		}, []string{byToken, byApproval, byBudget}},
		{"postgres", func(t *testing.T) (string, func(), func()) {
			pg := startOwnPostgres(t)
			return fmt.Sprintf("store:\n  postgres: %q\n", pg.url()), pg.kill, pg.start
		}, []string{byApproval}},
	}
	kinds := []string{byToken, byApproval, byBudget}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			section, crash, restart := tt.start(t)
			config := keyedDemoConfig(t, dir, section, `
  - name: approved-refunds
    match: {tools: [refund_invoice]}
    when: "args.invoice_id == 'inv_1005'"
    mode: approval
    approvers: [bob]
  - name: refunds
    match: {tools: [refund_invoice]}
    mode: token
  - name: reminders
    match: {tools: [send_reminder]}
    mode: flag
budgets:
  - {name: reminders, per: tenant, limit: 100000, window: 1h, rules: [reminders]}
`)
			env := []string{"MCP_DRY_RUN=false", "INTERLOCK_SECRET=" + strings.Repeat("s", 40)}
			load := &gatedLoad{base: strings.TrimSuffix(servedHTTPWith(t, env, "--config", config), "/mcp"),
				ran: map[string]int{}, refused: map[string]int{}, ranAway: map[string]int{}}
			stop := make(chan struct{})
			var wg sync.WaitGroup
			for _, kind := range kinds {
				wg.Go(func() {
					for {
						select {
						case <-stop:
							return
						default:
							load.flow(kind)
						}
					}
				})
			}
			halt := sync.OnceFunc(func() { close(stop); wg.Wait() })
			defer halt()
			// until waits, up to a minute, for each of kinds to be counted
			// more than in before.
			until := func(what string, count func() map[string]int, before map[string]int, kinds []string) {
				t.Helper()
				deadline := time.Now().Add(time.Minute)
				for {
					now, missing := count(), []string(nil)
					for _, k := range kinds {
						if now[k] <= before[k] {
							missing = append(missing, k)
						}
					}
					if missing == nil {
						return
					}
					if time.Now().After(deadline) {
						t.Fatalf("no %s of %v within a minute", what, missing)
					}
					time.Sleep(20 * time.Millisecond)
				}
			}
			ranOf := func() map[string]int { r, _ := load.counts(); return r }
			refusedOf := func() map[string]int { _, r := load.counts(); return r }

			setAway := func(away bool) {
				load.mu.Lock()
				load.away = away
				load.mu.Unlock()
			}
			until("run before the store goes", ranOf, nil, kinds)
			crash()
			setAway(true)
			// A few refusals of each kind: the store stays away under load.
			until("refusals while the store is away", refusedOf, map[string]int{byToken: 2, byApproval: 2, byBudget: 2}, tt.needs)
			// An approver's reads and changes of approvals and grants fail
			// the same way: 503, retriable, saying what was left undone,
			// naming nothing inside interlock.
			for _, req := range []struct{ method, path, undone string }{
				{http.MethodGet, "/v1/approvals", "the approvals cannot be listed now"},
				{http.MethodGet, "/v1/approvals/apr_none", "the approval cannot be shown now"},
				{http.MethodGet, "/v1/grants", "the grants cannot be listed now"},
				{http.MethodPost, "/v1/grants/grt_none/revoke", "nothing was revoked"},
				{http.MethodPost, "/v1/approvals/apr_none/grant", "nothing was decided"},
			} {
				body := ""
				if req.path == "/v1/approvals/apr_none/grant" {
					body = `{"ttl":"1h","uses":1}`
				}
				status, out, err := restDo(req.method, load.base+req.path, "bob-key", body)
				if err != nil || status != http.StatusServiceUnavailable || out["code"] != "UPSTREAM_UNAVAILABLE" || out["retriable"] != true ||
					!strings.Contains(fmt.Sprint(out["message"]), req.undone) || leaks(fmt.Sprint(out)) {
					t.Errorf("%s %s while the store is away: %d %v %v", req.method, req.path, status, out, err)
				}
			}
			awayRan := ranOf()
			var others []string
			for _, k := range kinds {
				if !slices.Contains(tt.needs, k) {
					others = append(others, k)
				}
			}
			until("run of a kind that does not need the store, while it is away", ranOf, awayRan, others)
			atRestart := ranOf()
			setAway(false)
			restart()
			until("run once the store is back", ranOf, atRestart, kinds)
			halt()

			ran, refused := load.counts()
			t.Logf("ran %v, refused while the store was away %v", ran, refused)
			for _, k := range tt.needs {
				if load.ranAway[k] != 0 {
					t.Errorf("%d %s calls began and ran while the store was away", load.ranAway[k], k)
				}
			}
			for _, w := range load.wrong {
				t.Errorf("an answer no call should get: %s", w)
			}
			if got := demoCount(t, filepath.Join(dir, "demo.db"), "SELECT count(*) FROM refunds WHERE invoice_id = 'inv_1003'"); got != ran[byToken] {
				t.Errorf("%d refunds by confirm token in the demo database, %d ran", got, ran[byToken])
			}
			if got := demoCount(t, filepath.Join(dir, "demo.db"), "SELECT count(*) FROM refunds WHERE invoice_id = 'inv_1005'"); got != ran[byApproval] {
				t.Errorf("%d approved refunds in the demo database, %d ran", got, ran[byApproval])
			}
			if got := demoCount(t, filepath.Join(dir, "demo.db"), "SELECT count(*) FROM reminders"); got != ran[byBudget] {
				t.Errorf("%d reminders in the demo database, %d ran", got, ran[byBudget])
			}
		})
	}
}
