package gateway

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/interlock-mcp/interlock"
)

// wipeIn is a configuration in which the fixture's wipe has mode.
func wipeIn(t *testing.T, mode string, more string) string {
	t.Helper()
	return fmt.Sprintf(`
rules:
  - name: wipe-%s
    match: {tools: [wipe]}
    mode: %s
%s`, mode, mode, more)
}

// TestReloadUnderLoad: calls made while the policy is swapped back and
// forth all complete, each decided by one of the two policies, and both
// policies decide some of them.
func TestReloadUnderLoad(t *testing.T) {
	allow, deny := wipeIn(t, "allow", ""), wipeIn(t, "deny", "")
	gw := start(t, testConfig(t, allow, "fx"), "false")
	cs := client(t, gw, nil)

	// Each worker makes at least calls calls, and goes on (up to most)
	// until the policy has been swapped a few times and each policy has
	// decided a call: a fast machine could otherwise finish every call
	// before the first reload.
	const workers, calls, most = 8, 40, 5000
	var made, ran, denied, reloads atomic.Int64
	enough := func() bool { return reloads.Load() >= 4 && ran.Load() > 0 && denied.Load() > 0 }
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for i := 0; i < most && (i < calls || !enough()); i++ {
				made.Add(1)
				res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "wipe", Arguments: map[string]any{"target": "x"}})
				switch {
				case err != nil:
					t.Errorf("call failed: %v", err)
				case !res.IsError:
					ran.Add(1)
				case interlock.BodyOfResult(res).Code == interlock.CodeToolNotAllowed:
					denied.Add(1)
				default:
					t.Errorf("neither policy's answer: %+v", interlock.BodyOfResult(res))
				}
			}
		})
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	for next := deny; ; {
		select {
		case <-done:
		default:
			if err := gw.Reload(context.Background(), testConfig(t, next, "fx"), "test"); err != nil {
				t.Fatal(err)
			}
			reloads.Add(1)
			next = map[string]string{allow: deny, deny: allow}[next]
			continue
		}
		break
	}
	t.Logf("%d reloads; %d calls ran, %d denied", reloads.Load(), ran.Load(), denied.Load())
	if got := ran.Load() + denied.Load(); got != made.Load() {
		t.Errorf("%d calls completed (%d ran, %d denied), want %d", got, ran.Load(), denied.Load(), made.Load())
	}
	if !enough() {
		t.Errorf("in %d calls, %d reloads; %d calls ran, %d denied: want reloads during the calls and calls decided by each policy",
			made.Load(), reloads.Load(), ran.Load(), denied.Load())
	}
	if err := gw.Reload(context.Background(), testConfig(t, deny, "fx"), "test"); err != nil {
		t.Fatal(err)
	}
	if b := body(t, call(t, cs, "wipe", map[string]any{"target": "x"})); b.Code != interlock.CodeToolNotAllowed {
		t.Errorf("after the last reload: %s, want the new policy's %s", b.Code, interlock.CodeToolNotAllowed)
	}
}

// TestReloadKeepsConfirmations: a reload that leaves a tool as it was
// shown keeps its confirm tokens good and tells clients nothing; one that
// changes how the tool is advertised tells them.
func TestReloadKeepsConfirmations(t *testing.T) {
	changed := make(chan struct{}, 16)
	gw := start(t, testConfig(t, wipeIn(t, "token", ""), "fx"), "false")
	cs := client(t, gw, &mcp.ClientOptions{ToolListChangedHandler: func(context.Context, *mcp.ToolListChangedRequest) {
		changed <- struct{}{}
	}})
	asked := body(t, call(t, cs, "wipe", map[string]any{"target": "x"}))
	if asked.Code != interlock.CodeConfirmationRequired || asked.ConfirmToken == "" {
		t.Fatalf("describe: %+v", asked)
	}

	// Another tool's rule changes; wipe is shown as before.
	other := "  - name: no-echo\n    match: {tools: [echo]}\n    mode: deny\n"
	shown := gw.advertisedTools()
	if err := gw.Reload(context.Background(), testConfig(t, wipeIn(t, "token", other), "fx"), "test"); err != nil {
		t.Fatal(err)
	}
	if b := body(t, call(t, cs, "echo", map[string]any{})); b.Code != interlock.CodeToolNotAllowed {
		t.Errorf("echo after the reload: %s, want %s", b.Code, interlock.CodeToolNotAllowed)
	}
	res := call(t, cs, "wipe", map[string]any{"target": "x", interlock.MetaConfirmToken: asked.ConfirmToken})
	if res.IsError {
		t.Fatalf("redeeming a token minted before the reload: %+v", interlock.BodyOfResult(res))
	}
	for i, tool := range gw.advertisedTools() {
		if tool != shown[i] {
			t.Errorf("%s was registered again, and clients told of a change, though it is advertised as before", tool.Name)
		}
	}

	// wipe moves to mode flag: it now accepts __confirm instead of a token.
	if err := gw.Reload(context.Background(), testConfig(t, wipeIn(t, "flag", other), "fx"), "test"); err != nil {
		t.Fatal(err)
	}
	<-changed
	props := listTools(t, cs)["wipe"].InputSchema.(map[string]any)["properties"].(map[string]any)
	if props[interlock.MetaConfirm] == nil || props[interlock.MetaConfirmToken] != nil {
		t.Errorf("wipe after the reload accepts %v, want __confirm and no token", props)
	}
	if res := call(t, cs, "wipe", map[string]any{"target": "x", interlock.MetaConfirm: true}); res.IsError {
		t.Errorf("wipe with __confirm after the reload: %+v", interlock.BodyOfResult(res))
	}
}

// TestReloadResetsPinnedHints: hints an upstream loosened are kept
// stricter until a reload, which takes them as the upstream now states
// them.
func TestReloadResetsPinnedHints(t *testing.T) {
	yes := true
	f := testConfig(t, "", "fx")
	gw := start(t, f, "false")
	cs := client(t, gw, nil)
	call(t, cs, "relabel", map[string]any{"name": "echo", "annotations": &mcp.ToolAnnotations{DestructiveHint: &yes}})
	eventually(t, "echo destructive", func() bool { return *listTools(t, cs)["echo"].Annotations.DestructiveHint })
	call(t, cs, "relabel", map[string]any{"name": "echo", "annotations": &mcp.ToolAnnotations{ReadOnlyHint: true}})
	if b := body(t, call(t, cs, "echo", map[string]any{})); b.Code != interlock.CodeDryRunPreview {
		t.Fatalf("echo before the reload: %s, want the pinned stricter hints to gate it", b.Code)
	}
	if err := gw.Reload(context.Background(), testConfig(t, "", "fx"), "test"); err != nil {
		t.Fatal(err)
	}
	if a := listTools(t, cs)["echo"].Annotations; !a.ReadOnlyHint {
		t.Errorf("echo after the reload: %+v, want read-only as the upstream states it", a)
	}
	if res := call(t, cs, "echo", map[string]any{}); res.IsError {
		t.Errorf("echo after the reload: %+v, want it to run", interlock.BodyOfResult(res))
	}
}

// TestReloadSwapsAPIKeys: keys added by a reload are accepted at once and
// removed ones refused, while a reload that would switch keys off keeps
// them.
func TestReloadSwapsAPIKeys(t *testing.T) {
	keys := func(names ...string) string {
		yaml := "auth:\n  keys:\n"
		for _, n := range names {
			yaml += fmt.Sprintf("    - {sha256: %s, principal: %s}\n", HashKey(n+"-key"), n)
		}
		return yaml
	}
	gw := start(t, testConfig(t, keys("alice"), "fx"), "false")
	srv := httptest.NewServer(gw.Handler(false))
	defer srv.Close()
	status := func(key string) int {
		t.Helper()
		req, _ := http.NewRequest(http.MethodGet, srv.URL+"/v1/tools", nil)
		req.Header.Set("Authorization", "Bearer "+key)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	steps := []struct {
		name       string
		yaml       string
		alice, bob int
	}{
		{"before", keys("alice"), http.StatusOK, http.StatusUnauthorized},
		{"bob replaces alice", keys("bob"), http.StatusUnauthorized, http.StatusOK},
		{"no keys at all keeps bob's", "", http.StatusUnauthorized, http.StatusOK},
	}
	for _, st := range steps {
		t.Run(st.name, func(t *testing.T) {
			if err := gw.Reload(context.Background(), testConfig(t, st.yaml, "fx"), "test"); err != nil {
				t.Fatal(err)
			}
			if got := status("alice-key"); got != st.alice {
				t.Errorf("alice: %d, want %d", got, st.alice)
			}
			if got := status("bob-key"); got != st.bob {
				t.Errorf("bob: %d, want %d", got, st.bob)
			}
		})
	}
}
