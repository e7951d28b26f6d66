package main

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the golden outputs in testdata/check, testdata/init and testdata/serve")

// TestCheckGolden runs `interlock check` on every configuration in
// testdata/check and compares its exit status and output with the .golden
// file beside it (see runGoldens). Run with -update to rewrite the golden
// files.
func TestCheckGolden(t *testing.T) {
	runGoldens(t, "check", 10, func(file, tmp string) []string { return []string{"--config", file} })
}

// TestInitGolden runs `interlock init` on every client's file in
// testdata/init and compares its exit status, its output and the
// interlock.yaml it wrote with the .golden file beside it: what it says
// of a server that does not start, the secrets it names as ${NAME}, the
// summaries it drafts.
func TestInitGolden(t *testing.T) {
	runGoldens(t, "init", 3, func(file, tmp string) []string { return []string{"--from", file} })
}

// TestServeGolden runs `interlock serve --stdio` on every configuration in
// testdata/serve with standard input closed, and compares its exit status
// and what it printed (its banner, or why it did not start) with the
// .golden file beside it. Log lines are left out: the banner says what
// they say, and they come in the order the gateway's goroutines reach
// them.
func TestServeGolden(t *testing.T) {
	runGoldens(t, "serve", 3, func(file, tmp string) []string {
		return []string{"--stdio", "--config", file, "--data", filepath.Join(tmp, "data")}
	})
}

var logLineRE = regexp.MustCompile(`(?m)^time=.*\n`)

// runGoldens runs `interlock VERB` on every configuration (*.yaml) and
// client's file (*.json) in testdata/VERB (there must be least or more). The
// first line of each, "# VERB [FLAGS]" ("// VERB [FLAGS]" in a .json
// file), gives the flags; args gives the rest. Each runs in a directory of
// its own, on a copy of the file where BINARY stands for this binary (the
// demo upstream runs it), TMP for that directory and NODE_MODULES for
// interop/node_modules (npm ci --prefix interop, as make test does); the
// output says them back the same way. What it printed, and the
// interlock.yaml it wrote there if any, are compared with the .golden
// file beside it. Run with -update to rewrite the golden files.
func runGoldens(t *testing.T, verb string, least int, args func(file, tmp string) []string) {
	dir := filepath.Join("..", "..", "testdata", verb)
	configs, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	clients, err := filepath.Glob(filepath.Join(dir, "*.json"))
	if err != nil {
		t.Fatal(err)
	}
	configs = append(configs, clients...)
	if len(configs) < least {
		t.Fatalf("found %d configurations in %s, want at least %d", len(configs), dir, least)
	}
	nodeModules := filepath.Join(repoRoot(t), "interop", "node_modules")
	// The environment of a user who set nothing of interlock's, and no
	// token the files name.
	var env []string
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		if !slices.Contains([]string{"MCP_DRY_RUN", "GITHUB_TOKEN", "API_KEY"}, name) && !strings.HasPrefix(name, "INTERLOCK_") {
			env = append(env, kv)
		}
	}
	for _, config := range configs {
		ext := filepath.Ext(config)
		name := strings.TrimSuffix(filepath.Base(config), ext)
		t.Run(name, func(t *testing.T) {
			src, err := os.ReadFile(config)
			if err != nil {
				t.Fatal(err)
			}
			first, _, _ := strings.Cut(string(src), "\n")
			flags, ok := strings.CutPrefix(first, "# "+verb)
			if !ok {
				flags, ok = strings.CutPrefix(first, "// "+verb)
			}
			if !ok {
				t.Fatalf("%s does not start with a line \"# %s [FLAGS]\" or \"// %s [FLAGS]\"", config, verb, verb)
			}
			tmp := t.TempDir()
			body := strings.NewReplacer("BINARY", binary, "TMP", tmp, "NODE_MODULES", nodeModules).Replace(string(src))
			if err := os.WriteFile(filepath.Join(tmp, name+ext), []byte(body), 0o600); err != nil {
				t.Fatal(err)
			}
			cmd := exec.Command(binary, append(append([]string{verb}, strings.Fields(flags)...), args(name+ext, tmp)...)...)
			cmd.Dir, cmd.Env = tmp, env
			var stdout, stderr bytes.Buffer
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			code := 0
			if err := cmd.Run(); err != nil {
				exit, isExit := err.(*exec.ExitError)
				if !isExit {
					t.Fatal(err)
				}
				code = exit.ExitCode()
			}
			got := fmt.Sprintf("exit %d\n-- stdout --\n%s-- stderr --\n%s", code, stdout.String(), logLineRE.ReplaceAllString(stderr.String(), ""))
			if written, err := os.ReadFile(filepath.Join(tmp, "interlock.yaml")); err == nil {
				got += "-- interlock.yaml --\n" + string(written)
			}
			got = strings.NewReplacer(binary, "BINARY", tmp, "TMP", nodeModules, "NODE_MODULES").Replace(got)
			golden := filepath.Join(dir, name+".golden")
			if *update {
				if err := os.WriteFile(golden, []byte(got), 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("%v (run with -update to write it)", err)
			}
			if got != string(want) {
				t.Errorf("interlock %s%s %s:\n--- got ---\n%s--- want ---\n%s", verb, flags, strings.Join(args(name+ext, "TMP"), " "), got, want)
			}
		})
	}
}
