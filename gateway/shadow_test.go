package gateway

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/interlock-mcp/interlock"
	"github.com/interlock-mcp/interlock/audit"
	"github.com/interlock-mcp/interlock/config"
	"github.com/interlock-mcp/interlock/metrics"
)

const liveRules = `rules:
  - name: large-refunds
    match: {tools: [refund_invoice]}
    when: "num(args.amount) > 1000"
    mode: approval
    approvers: [operator]
  - name: refunds
    match: {tools: [refund_invoice]}
    mode: token
`

func parsePolicy(t testing.TB, src string) *config.File {
	t.Helper()
	f, err := config.Parse("policy.yaml", []byte(src), func(string) (string, bool) { return "", false })
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// TestShadowedDecidesWithTheLivePolicy: whatever the shadow policy says,
// the decision is the live one, and only a difference is reported.
func TestShadowedDecidesWithTheLivePolicy(t *testing.T) {
	tests := []struct {
		name, shadow string
		amount       float64
		differs      string
	}{
		{"the same rules", liveRules, 20, ""},
		{"a stricter shadow", "rules:\n  - name: no-refunds\n    match: {tools: [refund_invoice]}\n    mode: deny\n", 20, "refunds/token -> no-refunds/deny"},
		{"a shadow whose condition fails", "rules:\n  - name: odd\n    match: {tools: [refund_invoice]}\n    when: \"args.missing > 1\"\n    mode: deny\n", 5000,
			"large-refunds/approval -> odd/deny"},
		{"a shadow with only a default", "default_mode: deny\n", 20, "refunds/token -> /deny"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got []string
			s := &shadowed{Policy: &parsePolicy(t, liveRules).Policy, shadow: parsePolicy(t, tt.shadow), differ: func(_ context.Context, r *audit.Record) {
				got = append(got, r.Rule+"/"+r.Mode+" -> "+r.ShadowRule+"/"+r.ShadowMode)
				if r.Event != "shadow_differs" || r.Tool != "refund_invoice" || r.Tenant != "acme" || r.Principal != "alice" || r.Args != nil {
					t.Errorf("record %+v", r)
				}
			}}
			c := &interlock.Call{Tool: "refund_invoice", Hints: interlock.HintsOf(nil), Identity: interlock.Identity{Principal: "alice", Tenant: "acme"},
				Args: map[string]any{"invoice_id": "inv_1", "amount": tt.amount}}
			d, err := s.Decide(context.Background(), c)
			live, _ := s.Policy.Decide(context.Background(), c)
			if err != nil || d.Rule != live.Rule || d.Mode != live.Mode {
				t.Errorf("decided %s/%s (%v), the live policy %s/%s", d.Rule, d.Mode, err, live.Rule, live.Mode)
			}
			want := []string{}
			if tt.differs != "" {
				want = append(want, tt.differs)
			}
			if len(got) != len(want) || (len(want) == 1 && got[0] != want[0]) {
				t.Errorf("reported %q, want %q", got, want)
			}
		})
	}
}

// TestShadowDifferencesAreAuditedAndCounted: through the gateway, a call
// the shadow policy would deny runs, and the difference is one audit record
// and one count at /metrics.
func TestShadowDifferencesAreAuditedAndCounted(t *testing.T) {
	m := metrics.New()
	f := testConfig(t, "", "fx")
	f.ShadowPolicy = parsePolicy(t, "rules:\n  - name: no-echo\n    match: {tools: [echo]}\n    mode: deny\n")
	gw, log := startAudited(t, f, Options{Metrics: m, Getenv: func(k string) string {
		if k == interlock.SecretEnv {
			return testSecret
		}
		return ""
	}})
	cs := client(t, gw, nil)
	if res := call(t, cs, "echo", map[string]any{"x": 1}); res.IsError {
		t.Fatalf("echo did not run: %+v", res)
	}
	srv := httptest.NewServer(m.Handler())
	defer srv.Close()
	eventually(t, "the difference counted", func() bool {
		res, err := http.Get(srv.URL)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return strings.Contains(string(b), `interlock_events_total{event="shadow_differs"} 1`)
	})
	gw.Close() // waits for the record
	var differs []string
	for r, err := range log.Records(context.Background(), 1) {
		if err != nil {
			t.Fatal(err)
		}
		if r.Event == "shadow_differs" {
			differs = append(differs, r.Upstream+" "+r.Tool+" "+r.Rule+"/"+r.Mode+" -> "+r.ShadowRule+"/"+r.ShadowMode)
		}
	}
	if strings.Join(differs, "\n") != "fx echo /allow -> no-echo/deny" {
		t.Errorf("shadow_differs records: %q", differs)
	}
}

// BenchmarkShadowed measures what a shadow policy adds to a decision:
// run with -bench Shadowed and compare live with the shadow variants.
func BenchmarkShadowed(b *testing.B) {
	live := parsePolicy(b, liveRules)
	var differences atomic.Int64
	count := func(context.Context, *audit.Record) { differences.Add(1) }
	for _, bc := range []struct {
		name   string
		policy interlock.Policy
	}{
		{"live", &live.Policy},
		{"shadow agrees", &shadowed{Policy: &live.Policy, shadow: parsePolicy(b, liveRules), differ: count}},
		{"shadow differs", &shadowed{Policy: &live.Policy, shadow: parsePolicy(b, "default_mode: deny\n"), differ: count}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			c := &interlock.Call{Tool: "refund_invoice", Hints: interlock.HintsOf(nil), Args: map[string]any{"invoice_id": "inv_1", "amount": 20.0}}
			for b.Loop() {
				if _, err := bc.policy.Decide(context.Background(), c); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
