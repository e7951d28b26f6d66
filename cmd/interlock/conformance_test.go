package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// TestConformance runs the official MCP conformance suite's server
// scenarios against go-sdk's everything-server directly, and through
// interlock serve with that server as a stdio upstream, with sessions and
// without: every scenario that passes directly must pass through interlock.
func TestConformance(t *testing.T) {
	dir, err := filepath.Abs(filepath.Join("..", "..", "conformance"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "@modelcontextprotocol", "conformance")); err != nil {
		t.Fatalf("the conformance suite is not installed: run `npm ci --prefix conformance` first (%v)", err)
	}
	everything := filepath.Join(t.TempDir(), "everything-server")
	build := exec.Command("go", "build", "-o", everything, "github.com/modelcontextprotocol/go-sdk/conformance/everything-server")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building the everything-server: %v\n%s", err, out)
	}
	config := filepath.Join(t.TempDir(), "interlock.yaml")
	yaml, err := os.ReadFile(filepath.Join(dir, "interlock.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	yaml = []byte(strings.Replace(string(yaml), "command: [everything-server]", fmt.Sprintf("command: [%q]", everything), 1))
	if err := os.WriteFile(config, yaml, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, mode := range []struct {
		name      string
		stateless bool
	}{{"sessions", false}, {"stateless", true}} {
		t.Run(mode.name, func(t *testing.T) {
			direct := runSuite(t, dir, startEverything(t, everything, mode.stateless))
			args := []string{"--config", config}
			if mode.stateless {
				args = append(args, "--stateless")
			}
			through := runSuite(t, dir, servedHTTPWith(t, []string{"MCP_DRY_RUN=false"}, args...))
			if len(direct) == 0 {
				t.Fatal("no scenario ran directly")
			}
			passed := 0
			for name, ok := range direct {
				if !ok {
					continue
				}
				passed++
				if !through[name] {
					t.Errorf("%s passes directly but not through interlock", name)
				}
			}
			t.Logf("%d of %d scenarios pass directly; all of them through interlock", passed, len(direct))
		})
	}
}

// startEverything runs the everything-server on streamable HTTP and
// returns its MCP endpoint.
func startEverything(t *testing.T, binary string, stateless bool) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	cmd := exec.Command(binary, "-http", addr, fmt.Sprintf("-stateless=%t", stateless))
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if c, err := net.Dial("tcp", addr); err == nil {
			c.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the everything-server did not listen")
		}
	}
	return "http://" + addr + "/mcp"
}

// scenarioLine is one line of the suite's summary: ✓ or ✗, then the name.
var scenarioLine = regexp.MustCompile(`(?m)^([✓✗]) (\S+): \d+ passed, \d+ failed`)

// runSuite runs every server scenario against url and reports which
// passed.
func runSuite(t *testing.T, dir, url string) map[string]bool {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "node", "--import", filepath.Join(dir, "node20.mjs"),
		filepath.Join(dir, "node_modules/@modelcontextprotocol/conformance/dist/index.js"), "server", "--url", url)
	// The suite writes its results into the working directory.
	cmd.Dir = t.TempDir()
	out, _ := cmd.CombinedOutput()
	results := map[string]bool{}
	for _, m := range scenarioLine.FindAllStringSubmatch(string(out), -1) {
		results[m[2]] = m[1] == "✓"
	}
	if len(results) == 0 {
		t.Fatalf("the suite reported no scenario:\n%s", out)
	}
	return results
}
