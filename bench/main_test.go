package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestBenchRuns keeps the harness working: a tiny run of a direct and a
// gated variant on each transport produces its table. It asserts the
// shape of the report, never a timing.
func TestBenchRuns(t *testing.T) {
	dir := t.TempDir()
	self := filepath.Join(dir, "bench")
	if out, err := exec.Command("go", "build", "-o", self, ".").CombinedOutput(); err != nil {
		t.Fatalf("building bench: %v\n%s", err, out)
	}
	if err := os.Chdir(".."); err != nil { // ./cmd/interlock is built from the module root
		t.Fatal(err)
	}
	var out strings.Builder
	err := run([]string{"-calls", "20", "-rounds", "1", "-clients", "1,2", "-self", self,
		"-only", "direct-stdio,interlock-stdio,direct-http,interlock-http,token-http"}, &out)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"| direct-stdio |", "| interlock-stdio |", "| interlock-http |", "| token-http |", "calls/s, 2 clients", "(1.00×)"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("report lacks %q:\n%s", want, out.String())
		}
	}
}
