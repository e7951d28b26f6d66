package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/cookiejar"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/interlock-mcp/interlock"
	"github.com/interlock-mcp/interlock/consolestate"
	"github.com/interlock-mcp/interlock/gateway"
	"github.com/interlock-mcp/interlock/sqlite"
)

// consoleGet opens url in a browser of its own that keeps cookies and does
// not follow redirects, and returns the status and the page.
func consoleGet(t *testing.T, client *http.Client, url string) (int, string) {
	t.Helper()
	res, err := client.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	page, _ := io.ReadAll(res.Body)
	return res.StatusCode, string(page)
}

func newConsoleBrowser() *http.Client {
	jar, _ := cookiejar.New(nil)
	return &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
}

// consoleLinkOf runs interlock console link on data until a gateway's
// announcement lets it make one, and returns the link.
func consoleLinkOf(t *testing.T, data string) string {
	t.Helper()
	var link, errText string
	waitFor(t, "interlock console link to find the gateway", func() bool {
		var code int
		code, link, errText = runCLI(t, "console", "link", "--data", data)
		return code == 0
	})
	if !strings.Contains(errText, "once, within 15 minutes") {
		t.Errorf("console link does not say what the link does: %q", errText)
	}
	return strings.TrimSpace(link)
}

// TestConsoleLinkSignsInOnce: with the banner's link spent, interlock
// console link makes another; the running gateway signs the operator in
// with it once, and refuses it the second time.
func TestConsoleLinkSignsInOnce(t *testing.T) {
	data := t.TempDir()
	if code, _, errText := runCLI(t, "console", "link", "--data", data); code != 1 ||
		!strings.Contains(errText, "no gateway with a console runs on this store: start interlock serve") {
		t.Errorf("with no gateway: exit %d, %q", code, errText)
	}
	config := filepath.Join(data, "interlock.yaml")
	if err := os.WriteFile(config, reminderConfig(t, data, "flag", false), 0o600); err != nil {
		t.Fatal(err)
	}
	base, logs, _ := serveLogged(t, nil, "--config", config, "--data", data)
	if !strings.Contains(logs.String(), "interlock console link makes another") {
		t.Errorf("the banner does not point to interlock console link:\n%s", logs.String())
	}
	link := consoleLinkOf(t, data)
	if !strings.HasPrefix(link, base+"/console/login?once=") || strings.Contains(logs.String(), link) {
		t.Fatalf("the link %q is not a new one into the console at %s", link, base)
	}

	operator := newConsoleBrowser()
	if status, _ := consoleGet(t, operator, link); status != http.StatusSeeOther {
		t.Fatalf("first use: status %d", status)
	}
	if status, page := consoleGet(t, operator, base+"/console/"); status != http.StatusOK || !strings.Contains(page, "Signed in as <strong>operator</strong>") {
		t.Fatalf("after the link: %d\n%s", status, page)
	}
	if status, page := consoleGet(t, newConsoleBrowser(), link); status != http.StatusForbidden || !strings.Contains(page, "already used") {
		t.Errorf("second use: %d\n%s", status, page)
	}
	if _, tail, _ := runCLI(t, "audit", "tail", "-n", "20", "--data", data, "--config", config); !strings.Contains(tail, "console_login") ||
		!strings.Contains(tail, "with a one-time link") {
		t.Errorf("no console_login record of the link:\n%s", tail)
	}
}

// TestConsoleLinkInTheConfiguredStore: with a store configured, the link
// interlock console link makes is kept there and points at the console a
// gateway announced there, and a gateway sharing that store (on a data
// directory of its own) signs the operator in with it once; a
// configuration with API keys makes none.
func TestConsoleLinkInTheConfiguredStore(t *testing.T) {
	onSharedStores(t, "link", func(t *testing.T, storeOf func(*testing.T) string) {
		dir := t.TempDir()
		config := writeFile(t, dir, "interlock.yaml", fmt.Sprintf("upstreams:\n  - name: demo\n    command: [%q, demo, --db, %q]\n%s",
			binary, filepath.Join(dir, "demo.db"), storeOf(t)))
		base := strings.TrimSuffix(servedHTTP(t, "--config", config), "/mcp")
		// The console is the one the gateway announced in the store: the
		// command's data directory is another, and empty.
		code, out, errText := runCLI(t, "console", "link", "--config", config, "--data", t.TempDir())
		link := strings.TrimSpace(out)
		if code != 0 || !strings.HasPrefix(link, base+"/console/login?once=") {
			t.Fatalf("console link: %d %q %q", code, out, errText)
		}
		operator := newConsoleBrowser()
		if status, _ := consoleGet(t, operator, link); status != http.StatusSeeOther {
			t.Fatalf("first use: status %d", status)
		}
		if status, page := consoleGet(t, operator, base+"/console/"); status != http.StatusOK || !strings.Contains(page, "Signed in as <strong>operator</strong>") {
			t.Errorf("after the link: %d\n%s", status, page)
		}
		if status, _ := consoleGet(t, newConsoleBrowser(), link); status != http.StatusForbidden {
			t.Errorf("second use: status %d", status)
		}

		keyed := writeFile(t, dir, "keyed.yaml", fmt.Sprintf("upstreams:\n  - name: demo\n    command: [%q, demo]\n%sauth:\n  keys:\n    - {sha256: %s, principal: bob}\n",
			binary, storeOf(t), gateway.HashKey("bob-key")))
		if code, out, errText := runCLI(t, "console", "link", "--config", keyed, "--url", base); code != 1 || out != "" || !strings.Contains(errText, "API keys or an OAuth issuer") {
			t.Errorf("console link with keys configured: %d %q %q", code, out, errText)
		}
	})
}

// TestConsoleLinkOnAGatewayWithKeys: approvers of a gateway with API keys
// sign in with their key: interlock console link says so, and the console
// refuses a link kept in the state all the same.
func TestConsoleLinkOnAGatewayWithKeys(t *testing.T) {
	data := t.TempDir()
	config := filepath.Join(data, "interlock.yaml")
	cfg := fmt.Sprintf("%sauth:\n  keys:\n    - {sha256: %s, principal: bob, tenant: local}\n",
		reminderConfig(t, data, "flag", false), gateway.HashKey("bob-key"))
	if err := os.WriteFile(config, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	base, _, _ := serveLogged(t, nil, "--config", config, "--data", data)
	var errText string
	waitFor(t, "interlock console link to find the gateway", func() bool {
		var code int
		code, _, errText = runCLI(t, "console", "link", "--data", data)
		return code == 1 && !strings.Contains(errText, "no gateway")
	})
	if !strings.Contains(errText, "API keys or an OAuth issuer") || !strings.Contains(errText, base+"/console/") {
		t.Errorf("console link on a gateway with keys: %q", errText)
	}

	state, err := sqlite.OpenState(context.Background(), filepath.Join(data, "state.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer state.Close()
	operator := interlock.Identity{Principal: gateway.Operator, Tenant: interlock.TenantLocal}
	if err := state.Console().AddLink(context.Background(), consolestate.Key("kept-anyway"), operator, time.Now().Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	if status, _ := consoleGet(t, newConsoleBrowser(), base+"/console/login?once=kept-anyway"); status != http.StatusForbidden {
		t.Errorf("a link on a gateway with keys: status %d", status)
	}
}

// serveStdio starts interlock serve --stdio with no client yet, and stops
// it at the end of the test by closing its standard input.
func serveStdio(t *testing.T, args ...string) {
	t.Helper()
	cmd := command("", append([]string{"serve", "--stdio"}, args...)...)
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = &lockedBuffer{}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		in.Close()
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			t.Error("interlock serve --stdio did not stop when its input closed")
		}
	})
}

// statusOf runs interlock status on data until it lists n gateways.
func statusOf(t *testing.T, data string, n int) (int, string, string) {
	t.Helper()
	var code int
	var out, errText string
	waitFor(t, fmt.Sprintf("interlock status to list %d gateways", n), func() bool {
		code, out, errText = runCLI(t, "status", "--data", data)
		return strings.Count(out, "\n") >= n+2
	})
	return code, out, errText
}

// rowOf is the line of status's table that holds s.
func rowOf(out, s string) string {
	for line := range strings.Lines(out) {
		if strings.Contains(line, s) {
			return line
		}
	}
	return ""
}

// TestStatusListsTheGateways: an HTTP and a stdio gateway on one data
// directory are listed and agree; a stdio gateway started with another
// configuration makes status say the digests differ, and a reload shows
// the HTTP gateway's new digest.
func TestStatusListsTheGateways(t *testing.T) {
	data := t.TempDir()
	if code, _, errText := runCLI(t, "status", "--data", data); code != 1 || !strings.Contains(errText, "no gateway runs on the data directory") {
		t.Errorf("with no gateway: exit %d, %q", code, errText)
	}
	flag, deny := reminderConfig(t, data, "flag", false), reminderConfig(t, data, "deny", false)
	digest := func(b []byte) string { sum := sha256.Sum256(b); return hex.EncodeToString(sum[:])[:12] }
	configA, configB := filepath.Join(data, "a.yaml"), filepath.Join(data, "b.yaml")
	if err := os.WriteFile(configA, flag, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(configB, deny, 0o600); err != nil {
		t.Fatal(err)
	}
	base, _, httpGateway := serveLogged(t, nil, "--config", configA, "--data", data)
	serveStdio(t, "--config", configA, "--data", data)

	code, out, errText := statusOf(t, data, 2)
	if code != 0 || !strings.Contains(out, "2 gateways agree: version "+version+", config "+digest(flag)) {
		t.Errorf("two gateways on one config: exit %d\n%s%s", code, out, errText)
	}
	if row := rowOf(out, base); !strings.Contains(row, digest(flag)) || !strings.Contains(row, version) {
		t.Errorf("the HTTP gateway's row: %q\n%s", row, out)
	}
	if row := rowOf(out, " stdio "); !strings.Contains(row, digest(flag)) {
		t.Errorf("no stdio gateway's row:\n%s", out)
	}

	serveStdio(t, "--config", configB, "--data", data)
	code, out, errText = statusOf(t, data, 3)
	if code != 1 || !strings.Contains(out, "config digests differ: ") || !strings.Contains(out, digest(deny)+" (") ||
		strings.Contains(out, "versions differ") || !strings.Contains(errText, "differ") {
		t.Errorf("a gateway on another config: exit %d\n%s%s", code, out, errText)
	}

	if err := os.WriteFile(configA, deny, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := httpGateway.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "status to show the reloaded digest", func() bool {
		_, out, _ = runCLI(t, "status", "--data", data)
		return strings.Contains(rowOf(out, base), digest(deny))
	})

	// A rule whose tool has a typo weakens the gate without a word where
	// the file is read: status names the gateway that runs it and why.
	typo := strings.Replace(string(deny), "[refund_invoice]", "[refund_invoce]", 1)
	if err := os.WriteFile(configA, []byte(typo), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := httpGateway.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	var warning string
	waitFor(t, "status to show the reloaded gateway's warning", func() bool {
		_, out, _ = runCLI(t, "status", "--data", data)
		warning = rowOf(out, "warning (")
		return warning != ""
	})
	if !strings.Contains(warning, `tool glob "refund_invoce" matches no tool`) || !strings.Contains(warning, "refund_invoice") ||
		strings.Count(out, "warning (") != 1 {
		t.Errorf("the warning of the gateway with the typo: %q\n%s", warning, out)
	}
}

// TestStatusOnASharedStore: replicas on Redis or PostgreSQL, each with a
// data directory of its own, announce themselves in the store: interlock
// status --config lists them and says when their configurations differ,
// and so do /readyz (drift, the replica staying ready) and the metrics.
func TestStatusOnASharedStore(t *testing.T) {
	digest := func(b []byte) string { sum := sha256.Sum256(b); return hex.EncodeToString(sum[:])[:12] }
	onSharedStores(t, "status", func(t *testing.T, storeOf func(*testing.T) string) {
		dir := t.TempDir()
		store := storeOf(t)
		flag := append(reminderConfig(t, dir, "flag", false), store...)
		deny := append(reminderConfig(t, dir, "deny", false), store...)
		configA, configB := writeFile(t, dir, "a.yaml", string(flag)), writeFile(t, dir, "b.yaml", string(deny))
		if code, _, errText := runCLI(t, "status", "--config", configA); code != 1 || !strings.Contains(errText, "no gateway runs on the store") {
			t.Errorf("with no gateway: exit %d, %q", code, errText)
		}
		baseA, _, _ := serveLogged(t, nil, "--config", configA, "--data", t.TempDir())
		baseB, _, _ := serveLogged(t, nil, "--config", configA, "--data", t.TempDir())
		var code int
		var out, errText string
		waitFor(t, "interlock status to list 2 gateways", func() bool {
			code, out, errText = runCLI(t, "status", "--config", configA)
			return strings.Count(out, "\n") >= 4
		})
		if code != 0 || !strings.Contains(out, "2 gateways agree: version "+version+", config "+digest(flag)) ||
			rowOf(out, baseA) == "" || rowOf(out, baseB) == "" {
			t.Errorf("two replicas on one config: exit %d\n%s%s", code, out, errText)
		}

		baseC, _, _ := serveLogged(t, nil, "--config", configB, "--data", t.TempDir())
		waitFor(t, "interlock status to list 3 gateways", func() bool {
			code, out, errText = runCLI(t, "status", "--config", configB)
			return strings.Count(out, "\n") >= 5
		})
		if code != 1 || !strings.Contains(out, "config digests differ: ") || !strings.Contains(out, digest(deny)+" (") ||
			!strings.Contains(errText, "the gateways on the store of "+configB+" differ") || rowOf(out, baseC) == "" {
			t.Errorf("a replica on another config: exit %d\n%s%s", code, out, errText)
		}

		// Every replica tells of the drift, and stays ready.
		for _, base := range []string{baseA, baseC} {
			res, err := http.Get(base + "/readyz")
			if err != nil {
				t.Fatal(err)
			}
			var ready struct{ Status, Drift string }
			err = json.NewDecoder(res.Body).Decode(&ready)
			res.Body.Close()
			if err != nil || res.StatusCode != http.StatusOK || ready.Status != "ready" ||
				!strings.Contains(ready.Drift, "config digests differ: ") || !strings.Contains(ready.Drift, digest(deny)) {
				t.Errorf("%s/readyz: %d %+v %v", base, res.StatusCode, ready, err)
			}
		}
		// The metrics count the replicas of each configuration; each
		// replica counts at its own announcement, so this waits for one.
		waitFor(t, "the metrics to count both configurations", func() bool {
			res, err := http.Get(baseC + "/metrics")
			if err != nil {
				return false
			}
			defer res.Body.Close()
			body, _ := io.ReadAll(res.Body)
			return strings.Contains(string(body), `interlock_gateways{config="`+digest(flag)+`",version="`+version+`"} 2`) &&
				strings.Contains(string(body), `interlock_gateways{config="`+digest(deny)+`",version="`+version+`"} 1`)
		})
	})
}
