package main

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the golden outputs in testdata/check")

// TestCheckGolden runs `interlock check` on every configuration in
// testdata/check and compares its exit status and output with the .golden
// file beside it. The first line of a configuration, "# check [FLAGS]"
// ("// check [FLAGS]" in an MCP client's .json file), gives the flags. BINARY in a configuration stands for this binary (the
// demo upstream runs it) and TMP for the directory the check runs in; the
// output says them back the same way. Run with -update to rewrite the
// golden files.
func TestCheckGolden(t *testing.T) {
	dir := filepath.Join("..", "..", "testdata", "check")
	configs, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	clients, err := filepath.Glob(filepath.Join(dir, "*.json"))
	if err != nil {
		t.Fatal(err)
	}
	configs = append(configs, clients...)
	if len(configs) < 10 {
		t.Fatalf("found %d configurations in %s, want at least 10", len(configs), dir)
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
			flags, ok := strings.CutPrefix(first, "# check")
			if !ok {
				flags, ok = strings.CutPrefix(first, "// check")
			}
			if !ok {
				t.Fatalf("%s does not start with a line \"# check [FLAGS]\" or \"// check [FLAGS]\"", config)
			}
			tmp := t.TempDir()
			body := strings.NewReplacer("BINARY", binary, "TMP", tmp).Replace(string(src))
			if err := os.WriteFile(filepath.Join(tmp, name+ext), []byte(body), 0o600); err != nil {
				t.Fatal(err)
			}
			cmd := exec.Command(binary, append(append([]string{"check"}, strings.Fields(flags)...), "--config", name+ext)...)
			cmd.Dir = tmp
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
			got := fmt.Sprintf("exit %d\n-- stdout --\n%s-- stderr --\n%s", code, stdout.String(), stderr.String())
			got = strings.NewReplacer(binary, "BINARY", tmp, "TMP").Replace(got)
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
				t.Errorf("interlock check%s --config %s%s:\n--- got ---\n%s--- want ---\n%s", flags, name, ext, got, want)
			}
		})
	}
}
