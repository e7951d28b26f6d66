package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/interlock-mcp/interlock/gateway"
)

// crashable is an `interlock serve` the test may kill as a crash would
// (SIGKILL: no drain, no last checkpoint, no departure).
type crashable struct {
	base   string
	cmd    *exec.Cmd
	exited <-chan error
}

// startCrashable starts `interlock serve` on a free port with env and
// args; it is killed at the end of the test if it still runs.
func startCrashable(t *testing.T, env []string, args ...string) *crashable {
	t.Helper()
	cmd := command("", append([]string{"serve", "--listen", "127.0.0.1:0"}, args...)...)
	cmd.Env = append(cmd.Env, env...)
	url, exited := launch(t, cmd)
	g := &crashable{base: strings.TrimSuffix(url, "/mcp"), cmd: cmd, exited: exited}
	t.Cleanup(g.kill)
	return g
}

// kill sends SIGKILL and waits for the process to be gone.
func (g *crashable) kill() {
	if g.cmd != nil {
		_ = g.cmd.Process.Kill()
		<-g.exited
		g.cmd = nil
	}
}

// restClient asks the REST face without failing the test on a transport
// error: a request to a gateway being killed may get no answer.
var restClient = &http.Client{Timeout: 30 * time.Second,
	Transport: &http.Transport{MaxConnsPerHost: 64, MaxIdleConnsPerHost: 64}}

func restDo(method, url, key, body string) (int, map[string]any, error) {
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+key)
	resp, err := restClient.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	var out map[string]any
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		return resp.StatusCode, nil, err
	}
	return resp.StatusCode, out, nil
}

// refundCall is the REST body of refund_invoice.
func refundCall(invoice string, amount int) string {
	return fmt.Sprintf(`{"arguments":{"invoice_id":%q,"amount":%d}}`, invoice, amount)
}

// refunded returns what the demo database says was refunded of each
// invoice, in dollars: the count of runs of the refunds the test made.
func refunded(t *testing.T, base string) map[string]float64 {
	t.Helper()
	out := map[string]float64{}
	for _, customer := range []string{"acct_9931", "acct_1024"} {
		status, body, err := restDo(http.MethodPost, base+"/v1/tools/list_invoices/call", "agent-key", fmt.Sprintf(`{"arguments":{"customer_id":%q}}`, customer))
		if err != nil || status != http.StatusOK {
			t.Fatalf("list_invoices: %d %v %v", status, body, err)
		}
		for _, inv := range body["structuredContent"].(map[string]any)["invoices"].([]any) {
			m := inv.(map[string]any)
			out[m["id"].(string)], _ = m["refunded"].(float64)
		}
	}
	return out
}

// votersOf returns the state of approval id as bob sees it on base, and
// who approved it, in order.
func votersOf(t *testing.T, base, id string) (string, []string) {
	t.Helper()
	status, body, err := restDo(http.MethodGet, base+"/v1/approvals/"+id, "bob-key", "")
	if err != nil || status != http.StatusOK {
		t.Fatalf("approval %s on %s: %d %v %v", id, base, status, body, err)
	}
	var voters []string
	votes, _ := body["approvals"].([]any)
	for _, v := range votes {
		voters = append(voters, v.(map[string]any)["principal"].(string))
	}
	return body["state"].(string), voters
}

// keyedDemoConfig writes a configuration of the demo, its database in
// dir, with the store section given, the API keys of agent, bob and carol
// (agent-key, bob-key, carol-key) and the rules given, if any, and
// returns its path.
func keyedDemoConfig(t *testing.T, dir, store, rules string) string {
	t.Helper()
	if rules != "" {
		rules = "rules:" + rules
	}
	return writeFile(t, dir, "interlock.yaml", fmt.Sprintf(`
upstreams:
  - name: demo
    command: [%q, demo, --db, %q]
%s
auth:
  keys:
    - {sha256: %s, principal: agent}
    - {sha256: %s, principal: bob}
    - {sha256: %s, principal: carol}
%s`, binary, filepath.Join(dir, "demo.db"), store, gateway.HashKey("agent-key"), gateway.HashKey("bob-key"), gateway.HashKey("carol-key"), rules))
}

// grantUsed returns how many times the grant id was used, as bob sees it
// on base; it must be the one grant there.
func grantUsed(t *testing.T, base, id string) int {
	t.Helper()
	status, body, err := restDo(http.MethodGet, base+"/v1/grants", "bob-key", "")
	if err != nil || status != http.StatusOK {
		t.Fatalf("the grants: %d %v %v", status, body, err)
	}
	grants, _ := body["grants"].([]any)
	if len(grants) != 1 || grants[0].(map[string]any)["id"] != id {
		t.Fatalf("the grants on %s: %v, want %s alone", base, grants, id)
	}
	return int(grants[0].(map[string]any)["used"].(float64))
}

// TestStateOutlivesKill9: gateways sharing a store are killed (SIGKILL)
// between the first vote of a quorum-2 approval and its decision, right
// after a decision and a standing grant, and in the middle of a burst of
// gated calls. On the gateways left, and on one started again, every
// approval with its votes, the grant with its uses, and an approver's
// console session are there as they were acknowledged; the approved call
// runs exactly once on the client's re-calls (counted in the demo
// database); and the audit chain the killed gateways wrote verifies.
func TestStateOutlivesKill9(t *testing.T) {
	tests := []struct {
		name string
		// store is the configuration's store section; shared names the
		// data directory every gateway runs on, or "" for one each.
		store func(t *testing.T) (section string, shared bool)
	}{
		{"sqlite: one data directory", func(*testing.T) (string, bool) { return "", true }},
		{"redis and postgres", func(t *testing.T) (string, bool) {
			pg := pgSchema(t)
			return fmt.Sprintf("store:\n  redis: redis://127.0.0.1:6379/0\n  prefix: \"interlock-test:kill9:%d:\"\n  postgres: %q\naudit:\n  postgres: %q\n",
				time.Now().UnixNano(), pg, pg), false
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			section, shared := tt.store(t)
			config := keyedDemoConfig(t, dir, section, `
  - name: large-refunds
    match: {tools: [refund_invoice]}
    when: "num(args.amount) >= 100"
    mode: approval
    approvers: [bob, carol]
    quorum: 2
  - name: refunds
    match: {tools: [refund_invoice]}
    mode: approval
    approvers: [bob]
`)
			env := []string{"MCP_DRY_RUN=false", "INTERLOCK_SECRET=" + strings.Repeat("k", 40)}
			data := func() string {
				if shared {
					return filepath.Join(dir, "data")
				}
				return t.TempDir()
			}
			dataA := data()
			start := func(data string) *crashable { return startCrashable(t, env, "--config", config, "--data", data) }
			a, b := start(dataA), start(data())

			bob := &approverClient{t: t, client: newConsoleBrowser(), base: a.base}
			if status := bob.signIn("bob-key"); status != http.StatusSeeOther {
				t.Fatalf("bob signing in on the first gateway: %d", status)
			}
			status, body, err := restDo(http.MethodPost, a.base+"/v1/tools/refund_invoice/call", "agent-key", refundCall("inv_1001", 100))
			large, _ := body["approval_id"].(string)
			if err != nil || status != http.StatusAccepted || large == "" {
				t.Fatalf("the large refund: %d %v %v", status, body, err)
			}
			if status, body, err := restDo(http.MethodPost, a.base+"/v1/approvals/"+large+"/approve", "bob-key", `{"reason":"first of two"}`); err != nil || status != http.StatusOK {
				t.Fatalf("bob's vote: %d %v %v", status, body, err)
			}

			// Between the first vote and the decision.
			a.kill()
			if state, voters := votersOf(t, b.base, large); state != "pending" || strings.Join(voters, ",") != "bob" {
				t.Errorf("after the kill between the votes: %s, voted by %v", state, voters)
			}
			bob.base = b.base
			if status, page := bob.do(http.MethodGet, "/console/", nil); status != http.StatusOK || !strings.Contains(page, "Signed in as <strong>bob</strong>") {
				t.Errorf("bob's session on the second gateway: %d", status)
			}
			if status, body, err := restDo(http.MethodPost, b.base+"/v1/approvals/"+large+"/approve", "carol-key", `{}`); err != nil || status != http.StatusOK {
				t.Fatalf("carol's vote: %d %v %v", status, body, err)
			}
			status, body, err = restDo(http.MethodPost, b.base+"/v1/tools/refund_invoice/call", "agent-key", refundCall("inv_1002", 1))
			small, _ := body["approval_id"].(string)
			if err != nil || status != http.StatusAccepted || small == "" {
				t.Fatalf("the small refund: %d %v %v", status, body, err)
			}
			status, body, err = restDo(http.MethodPost, b.base+"/v1/approvals/"+small+"/grant", "bob-key", `{"when":"num(args.amount) <= 5","ttl":"1h","uses":1000}`)
			grant, _ := body["id"].(string)
			if err != nil || status != http.StatusOK || grant == "" {
				t.Fatalf("the grant: %d %v %v", status, body, err)
			}

			// Right after a decision and a grant.
			b.kill()
			restarted, c := start(dataA), start(data())
			for _, g := range []*crashable{restarted, c} {
				if state, voters := votersOf(t, g.base, large); state != "approved" || strings.Join(voters, ",") != "bob,carol" {
					t.Errorf("the large refund on %s: %s, voted by %v", g.base, state, voters)
				}
				// The grant approved the waiting call and stands in for it.
				if state, voters := votersOf(t, g.base, small); state != "consumed" || strings.Join(voters, ",") != "bob" {
					t.Errorf("the small refund on %s: %s, voted by %v", g.base, state, voters)
				}
				bob.base = g.base
				if status, page := bob.do(http.MethodGet, "/console/", nil); status != http.StatusOK || !strings.Contains(page, "Signed in as <strong>bob</strong>") {
					t.Errorf("bob's session on %s: %d", g.base, status)
				}
			}
			// The client's re-calls, many at once on both: each approved
			// refund runs once.
			var wg sync.WaitGroup
			var mu sync.Mutex
			ran := map[string]int{}
			for i := range 20 {
				g := []*crashable{restarted, c}[i%2]
				invoice, amount := "inv_1001", 100
				if i%4 >= 2 {
					invoice, amount = "inv_1002", 1
				}
				wg.Go(func() {
					status, body, err := restDo(http.MethodPost, g.base+"/v1/tools/refund_invoice/call", "agent-key", refundCall(invoice, amount))
					switch {
					case err != nil:
						t.Errorf("re-call: %v", err)
					case status == http.StatusOK:
						mu.Lock()
						ran[invoice]++
						mu.Unlock()
					case invoice == "inv_1001" && (status == http.StatusAccepted || body["code"] == "CONSENT_TOKEN_INVALID"):
						// Another re-call consumed the approval first.
					default:
						t.Errorf("re-call of %s: %d %v", invoice, status, body)
					}
				})
			}
			wg.Wait()
			// The small refund's re-calls run on the grant.
			if ran["inv_1001"] != 1 || ran["inv_1002"] != 10 {
				t.Errorf("the approved large refund ran %d times, the small one %d times (want 1 and 10)", ran["inv_1001"], ran["inv_1002"])
			}
			if got := refunded(t, c.base); got["inv_1001"] != 100 || got["inv_1002"] != 10 {
				t.Errorf("refunded %v", got)
			}
			usedBefore := grantUsed(t, c.base, grant)

			// During a burst: refunds the grant covers run, the others ask
			// for approval; the gateway dies while they are under way.
			burst := start(data())
			type answer struct {
				status int
				id     string
			}
			const calls, killAfter = 200, 12
			answers := make(chan answer, calls)
			var answered atomic.Int32
			enough := make(chan struct{})
			for i := range calls {
				wg.Go(func() {
					call := refundCall("inv_1003", 2)
					if i%2 == 1 {
						call = refundCall("inv_1005", 6+i)
					}
					status, body, err := restDo(http.MethodPost, burst.base+"/v1/tools/refund_invoice/call", "agent-key", call)
					if err == nil {
						id, _ := body["approval_id"].(string)
						answers <- answer{status, id}
						if answered.Add(1) == killAfter {
							close(enough)
						}
					}
				})
			}
			select {
			case <-enough:
			case <-time.After(time.Minute):
				t.Fatalf("%d calls of the burst answered within a minute", answered.Load())
			}
			burst.kill()
			wg.Wait()
			close(answers)
			ranInBurst, pending := 0, 0
			for a := range answers {
				switch {
				case a.status == http.StatusOK:
					ranInBurst++
				case a.status == http.StatusAccepted:
					pending++
					if state, _ := votersOf(t, c.base, a.id); state != "pending" {
						t.Errorf("approval %s, acknowledged in the burst: %s", a.id, state)
					}
				}
			}
			if ranInBurst+pending == calls {
				t.Errorf("every call of the burst was answered: the kill came after it")
			}
			used := grantUsed(t, c.base, grant) - usedBefore
			runs := int(refunded(t, c.base)["inv_1003"]) / 2
			// A use is counted before the call runs: a gateway killed
			// between the two leaves a use that ran nothing, never a run
			// that was not counted.
			if runs < ranInBurst || used < runs {
				t.Errorf("the burst: %d runs acknowledged, %d in the demo database, %d uses of the grant", ranInBurst, runs, used)
			}
			t.Logf("burst: %d runs and %d pending approvals acknowledged before the kill; %d runs in the database", ranInBurst, pending, runs)

			verify := []string{"audit", "verify", "--config", config}
			if shared {
				verify = append(verify, "--data", dataA)
			}
			if code, out, errText := runCLI(t, verify...); code != 0 || !strings.HasPrefix(out, "ok: ") {
				t.Errorf("audit verify after the kills: %d %q %q", code, out, errText)
			}
		})
	}
}
