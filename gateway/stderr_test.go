package gateway

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/interlock-mcp/interlock/config"
)

// failingUpstream is an upstream that says why on standard error and
// exits before it answers, with the fixture's text or said.
func failingUpstream(t *testing.T, name, said string) *config.Upstream {
	env := map[string]string{"INTERLOCK_FIXTURE": "stderr"}
	if said != "" {
		env["INTERLOCK_FIXTURE_STDERR"] = said
	}
	return &config.Upstream{Name: name, Command: fixtureCommand(t), Env: env, Line: 5}
}

func TestUpstreamThatFailsToStartSaysWhy(t *testing.T) {
	f := testConfig(t, "")
	f.Upstreams = append(f.Upstreams, failingUpstream(t, "github", ""))
	gw := newGateway(t, f, Options{Logger: quiet})
	defer gw.Close()
	err := startError(gw, "github")
	if err == nil {
		t.Fatal("the upstream started")
	}
	for _, want := range []string{
		`command ["` + fixtureCommand(t)[0] + `","-test.run=^$"]`,
		`its stderr ended with ["Error: GITHUB_PERSONAL_ACCESS_TOKEN not set"]`,
		"gateway.yaml:5",
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %s", err, want)
		}
	}
	if got := gw.Unreachable()["github"]; !strings.Contains(got, "GITHUB_PERSONAL_ACCESS_TOKEN not set") {
		t.Errorf("Unreachable()[github] = %q, want the child's stderr", got)
	}
}

func TestServingWithAnUpstreamDownTellsTheClientItsNameOnly(t *testing.T) {
	f := testConfig(t, "", "fx")
	f.Upstreams = append(f.Upstreams, failingUpstream(t, "github", ""))
	var logged bytes.Buffer
	gw := startLogged(t, f, "", slog.New(slog.NewTextHandler(&logged, nil)))
	if !strings.Contains(logged.String(), "GITHUB_PERSONAL_ACCESS_TOKEN not set") {
		t.Errorf("the log does not say why github is down:\n%s", logged.String())
	}
	cs := client(t, gw, nil)
	got := cs.InitializeResult().Instructions
	if !strings.Contains(got, "upstream server github is down") {
		t.Errorf("instructions %q do not say that github is down", got)
	}
	if strings.Contains(got, "GITHUB_PERSONAL_ACCESS_TOKEN") || strings.Contains(got, "fx") {
		t.Errorf("instructions %q say more than which upstream is down", got)
	}
	if _, err := cs.ListTools(context.Background(), nil); err != nil {
		t.Fatal(err)
	}
}

func TestStderrTailIsBounded(t *testing.T) {
	w := (&stderrMemory{}).next(quiet, "u")
	for i := range 50 {
		w.Write([]byte(strings.Repeat("x", 300) + string(rune('a'+i%26)) + "\n"))
	}
	w.Write([]byte("bad \xff byte\nno newline at the end"))
	said := w.said()
	if !utf8.ValidString(said) {
		t.Errorf("said %q is not valid UTF-8", said)
	}
	if len(said) > maxTailBytes+maxTailLines*8 {
		t.Errorf("said %d bytes, want about %d at most", len(said), maxTailBytes)
	}
	if !strings.HasSuffix(said, `"bad \ufffd byte","no newline at the end"]`) && !strings.HasSuffix(said, `"bad � byte","no newline at the end"]`) {
		t.Errorf("said %q does not end with the last lines", said)
	}
}

func TestCrashLoopLogsItsStderrOnce(t *testing.T) {
	var logged bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logged, nil))
	usage := "Usage: server [options]\n  --token string\n  --verbose\n"
	m := &stderrMemory{}
	starts := []string{usage, usage, usage, "another reason\n"}
	var said []string
	for _, text := range starts {
		w := m.next(log, "u")
		w.Write([]byte(text))
		said = append(said, w.said())
	}
	if n := strings.Count(logged.String(), "Usage: server"); n != 1 {
		t.Errorf("the usage text was logged %d times, want once:\n%s", n, logged.String())
	}
	if n := strings.Count(logged.String(), sameAsLastStart); n != 2 {
		t.Errorf("%q logged %d times, want on each repeat:\n%s", sameAsLastStart, n, logged.String())
	}
	if said[0] == sameAsLastStart || said[1] != sameAsLastStart || said[2] != sameAsLastStart {
		t.Errorf("said = %q, want the lines, then %q", said, sameAsLastStart)
	}
	if !strings.Contains(said[3], "another reason") || !strings.Contains(logged.String(), "another reason") {
		t.Errorf("a new text is not said or logged: %q\n%s", said[3], logged.String())
	}
}
