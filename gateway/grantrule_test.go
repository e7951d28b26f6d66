package gateway

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/interlock-mcp/interlock"
	"github.com/interlock-mcp/interlock/audit"
	"github.com/interlock-mcp/interlock/sqlite"
)

// grantKeys are the keys of the grant tests: alice calls, bob approves
// alone, carol and dave sit on the board, erin is in the finance group.
// The "other" tenant has principals of the same names.
func grantKeys(bobGroups string) string {
	return fmt.Sprintf(`auth:
  keys:
    - {sha256: %s, principal: alice, tenant: acme}
    - {sha256: %s, principal: bob, tenant: acme, groups: [%s]}
    - {sha256: %s, principal: carol, tenant: acme}
    - {sha256: %s, principal: dave, tenant: acme}
    - {sha256: %s, principal: alice, tenant: other}
    - {sha256: %s, principal: bob, tenant: other, groups: [finance]}
`, HashKey("alice-key"), HashKey("bob-key"), bobGroups, HashKey("carol-key"), HashKey("dave-key"),
		HashKey("other-alice-key"), HashKey("other-bob-key"))
}

// wipesRule is the rule the grant is made under: bob alone approves.
const wipesRule = `
  - name: wipes
    match: {tools: [wipe]}
    mode: approval
    approvers: [bob]
`

// boardRule is a stricter rule of the same tool: two of the board.
const boardRule = `
  - name: board
    match: {tools: [wipe]}
    mode: approval
    approvers: [carol, dave]
    quorum: 2
`

// grantRig is a gateway with a standing grant bob made for alice's wipes
// of the cache under rule wipes.
type grantRig struct {
	gw    *Gateway
	srv   *httptest.Server
	log   *sqlite.Audit
	grant string
}

func newGrantRig(t *testing.T) *grantRig {
	t.Helper()
	gw, log := startAudited(t, testConfig(t, grantKeys("")+"rules:"+wipesRule, "fx"), Options{})
	r := &grantRig{gw: gw, srv: httptest.NewServer(gw.Handler(false)), log: log}
	t.Cleanup(r.srv.Close)
	_, body := r.wipe(t, "alice-key", "cache")
	id, _ := body["approval_id"].(string)
	status, sg := post(t, r.srv.URL+"/v1/approvals/"+id+"/grant", "bob-key", `{"when":"args.target == 'cache'","ttl":"1h","uses":10}`)
	if status != http.StatusOK {
		t.Fatalf("grant: %d %v", status, sg)
	}
	r.grant = sg["id"].(string)
	// The waiting call is the grant's first use.
	if status, body := r.wipe(t, "alice-key", "cache"); status != http.StatusOK {
		t.Fatalf("the call the grant was made from: %d %v", status, body)
	}
	return r
}

func (r *grantRig) wipe(t *testing.T, key, target string) (int, map[string]any) {
	t.Helper()
	return post(t, r.srv.URL+"/v1/tools/wipe/call", key, fmt.Sprintf(`{"arguments":{"target":%q}}`, target))
}

func (r *grantRig) reload(t *testing.T, yaml string) {
	t.Helper()
	if err := r.gw.Reload(context.Background(), testConfig(t, yaml, "fx"), "test"); err != nil {
		t.Fatal(err)
	}
}

// used is how many calls the grant confirmed, and whether it is live.
func (r *grantRig) used(t *testing.T) (float64, bool) {
	t.Helper()
	sg, err := r.gw.approvals.Grants().Grant(context.Background(), r.grant)
	if err != nil {
		t.Fatal(err)
	}
	return float64(sg.Used), !sg.Revoked
}

// records returns the audit records of event.
func (r *grantRig) records(t *testing.T, event string) []*audit.Record {
	t.Helper()
	var out []*audit.Record
	for rec, err := range r.log.Records(context.Background(), 1) {
		if err != nil {
			t.Fatal(err)
		}
		if rec.Event == event {
			out = append(out, rec)
		}
	}
	return out
}

// TestGrantStandsForItsRule: a grant made under one rule covers a call
// only while that same rule, unchanged, decides it. Every way another rule
// can come to decide the call leaves the grant unused, and the call waits
// for the approvers of the rule that decides it; a reload that changes or
// removes the grant's rule voids it for good.
func TestGrantStandsForItsRule(t *testing.T) {
	tests := []struct {
		name string
		// config is the configuration the gateway reloads.
		config string
		// target is what alice's call wipes.
		target string
		// covers says the grant confirms the call; voided that the
		// reload voided it.
		covers, voided bool
	}{
		{"the same rule, unchanged", grantKeys("") + "rules:" + wipesRule, "cache", true, false},
		{"the same rule, moved after another tool's", grantKeys("") + "rules:\n  - {name: echoes, match: {tools: [echo]}, mode: allow}" + wipesRule, "cache", true, false},
		{"another rule bob approves alone, put first", grantKeys("") + "rules:" + strings.Replace(wipesRule, "name: wipes", "name: quick-wipes", 1) + "    timeout: 1m\n" + wipesRule, "cache", false, false},
		{"a stricter rule put first", grantKeys("") + "rules:" + boardRule + wipesRule, "cache", false, false},
		{"a stricter rule whose condition holds", grantKeys("") + "rules:" + strings.Replace(boardRule, "quorum: 2", "quorum: 2\n    when: \"args.target == 'cache'\"", 1) + wipesRule, "cache", false, false},
		{"a stricter rule whose condition does not hold", grantKeys("") + "rules:" + strings.Replace(boardRule, "quorum: 2", "quorum: 2\n    when: \"args.target == 'all'\"", 1) + wipesRule, "cache", true, false},
		{"a tenant's overlay rule", grantKeys("") + "tenants:\n  - name: acme\n    rules:" + strings.ReplaceAll(boardRule, "\n  ", "\n      ") + "rules:" + wipesRule, "cache", false, false},
		{"another tenant's overlay rule", grantKeys("") + "tenants:\n  - name: other\n    rules:" + strings.ReplaceAll(boardRule, "\n  ", "\n      ") + "rules:" + wipesRule, "cache", true, false},
		{"a hint override that makes a stricter rule match",
			grantKeys("") + "rules:" + strings.Replace(boardRule, "match: {tools: [wipe]}", "match: {annotations: {idempotentHint: true}}", 1) + wipesRule +
				"  - {name: idempotent-wipes, match: {tools: [wipe]}, annotations: {idempotentHint: true}, mode: deny}\n", "cache", false, false},
		{"the rule's quorum raised", grantKeys("") + "rules:" + strings.Replace(wipesRule, "approvers: [bob]", "approvers: [bob, carol]\n    quorum: 2", 1), "cache", false, true},
		{"the rule's approvers changed", grantKeys("") + "rules:" + strings.Replace(wipesRule, "approvers: [bob]", "approvers: [carol]", 1), "cache", false, true},
		{"the rule's summary changed", grantKeys("") + "rules:" + wipesRule + "    summary: Wipe {{.args.target}}.\n", "cache", false, true},
		{"the rule removed", grantKeys("") + "rules:\n  - {name: wipes-by-token, match: {tools: [wipe]}, mode: token}\n", "cache", false, true},
		{"the rule renamed", grantKeys("") + "rules:" + strings.Replace(wipesRule, "name: wipes", "name: wipes-v2", 1), "cache", false, true},
		{"the granter's key given to another tenant", strings.Replace(grantKeys(""), "principal: bob, tenant: acme", "principal: bob, tenant: elsewhere", 1) + "rules:" + wipesRule, "cache", false, false},
		{"the granter's key removed", strings.Replace(grantKeys(""), "    - {sha256: "+HashKey("bob-key")+", principal: bob, tenant: acme, groups: []}\n", "", 1) + "rules:" + wipesRule, "cache", false, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := newGrantRig(t)
			r.reload(t, tt.config)
			before, _ := r.used(t)
			status, body := r.wipe(t, "alice-key", tt.target)
			after, live := r.used(t)
			if covered := after == before+1; covered != tt.covers {
				t.Errorf("the grant covered the call: %t, want %t (status %d %v)", covered, tt.covers, status, body)
			}
			if !tt.covers && status == http.StatusOK {
				t.Errorf("the call ran without its rule's approvers: %v", body)
			}
			if live == tt.voided {
				t.Errorf("the grant is live: %t, want %t", live, !tt.voided)
			}
			voids := r.records(t, "grant_voided")
			if (len(voids) == 1) != tt.voided {
				t.Errorf("grant_voided records: %d", len(voids))
			} else if tt.voided && (voids[0].Grant != r.grant || voids[0].Tenant != "acme" || voids[0].Rule != "wipes") {
				t.Errorf("the record of the voided grant: %+v", voids[0])
			}
			// No call is ever recorded as confirmed by a grant under a
			// rule other than the grant's.
			for _, rec := range r.records(t, "call") {
				if rec.ConfirmedBy == interlock.ConfirmedByGrant && rec.Rule != "wipes" {
					t.Errorf("rule %q confirmed by grant %s", rec.Rule, rec.Grant)
				}
			}
		})
	}
	t.Run("a voided grant stays void when its rule comes back", func(t *testing.T) {
		r := newGrantRig(t)
		r.reload(t, grantKeys("")+"rules:"+strings.Replace(wipesRule, "[bob]", "[carol]", 1))
		r.reload(t, grantKeys("")+"rules:"+wipesRule)
		if status, _ := r.wipe(t, "alice-key", "cache"); status != http.StatusAccepted {
			t.Errorf("a call after the rule came back: %d, want 202 (a new approval)", status)
		}
	})
	t.Run("the same names in another tenant", func(t *testing.T) {
		r := newGrantRig(t)
		if status, _ := r.wipe(t, "other-alice-key", "cache"); status != http.StatusAccepted {
			t.Errorf("alice of tenant other used acme's grant: %d", status)
		}
		if n, _ := r.used(t); n != 1 {
			t.Errorf("uses: %v", n)
		}
	})
}
