package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// typo is a rule whose glob misspells the fixture's tool wipe.
const typo = `
rules:
  - name: wipes
    match: {tools: [wpie]}
    mode: deny
`

func TestRuleThatMatchesNoToolIsAWarningAtStartAndReload(t *testing.T) {
	var logged bytes.Buffer
	gw := startLogged(t, testConfig(t, typo, "fx"), "", slog.New(slog.NewTextHandler(&logged, nil)))
	want := `gateway.yaml:4: rule "wipes": tool glob "wpie" matches no tool that the upstreams offer: did you mean wipe?`
	if got := gw.Warnings(); len(got) != 1 || got[0] != want {
		t.Fatalf("Warnings = %q, want [%q]", got, want)
	}
	if !strings.Contains(logged.String(), "level=WARN") || !strings.Contains(logged.String(), `did you mean wipe?`) {
		t.Errorf("the log does not warn of the typo:\n%s", logged.String())
	}

	// /readyz still says ready, and names the warning to a caller who may read it.
	rec := httptest.NewRecorder()
	gw.Handler(false).ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/readyz", nil))
	var ready struct {
		Status   string   `json:"status"`
		Warnings []string `json:"warnings"`
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &ready); err != nil {
		t.Fatal(err)
	}
	if rec.Code != http.StatusOK || ready.Status != "ready" || len(ready.Warnings) != 1 || ready.Warnings[0] != want {
		t.Errorf("/readyz = %d %s", rec.Code, rec.Body)
	}

	// A reload that fixes the typo clears it; one that makes it again logs it again.
	if err := gw.Reload(context.Background(), testConfig(t, strings.Replace(typo, "wpie", "wipe", 1), "fx"), "fixed"); err != nil {
		t.Fatal(err)
	}
	if got := gw.Warnings(); len(got) != 0 {
		t.Errorf("after the fix, Warnings = %q", got)
	}
	logged.Reset()
	if err := gw.Reload(context.Background(), testConfig(t, typo, "fx"), "again"); err != nil {
		t.Fatal(err)
	}
	if got := gw.Warnings(); len(got) != 1 || !strings.Contains(logged.String(), `did you mean wipe?`) {
		t.Errorf("after the reload, Warnings = %q, log:\n%s", got, logged.String())
	}
}

func TestRuleWarningsFollowTheToolsAnUpstreamOffers(t *testing.T) {
	gw := start(t, testConfig(t, `
rules:
  - name: late
    match: {tools: [late_tool]}
    mode: deny
`, "fx"), "")
	if got := gw.Warnings(); len(got) != 1 || !strings.Contains(got[0], `tool glob "late_tool" matches no tool`) {
		t.Fatalf("Warnings = %q, want the glob that matches nothing yet", got)
	}
	call(t, client(t, gw, nil), "grow", map[string]any{})
	deadline := time.Now().Add(10 * time.Second)
	for len(gw.Warnings()) > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("the upstream offers late_tool, and still Warnings = %q", gw.Warnings())
		}
		time.Sleep(20 * time.Millisecond)
	}
}
