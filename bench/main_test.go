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
	interlockBin := filepath.Join(dir, "interlock")
	if out, err := exec.Command("go", "build", "-o", interlockBin, "./cmd/interlock").CombinedOutput(); err != nil {
		t.Fatalf("building interlock: %v\n%s", err, out)
	}
	var out strings.Builder
	err := run([]string{"-calls", "20", "-interlock", interlockBin, "-rounds", "1", "-clients", "1,2", "-self", self,
		"-only", "direct-stdio,interlock-stdio,direct-http,interlock-http,token-http"}, &out)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"| direct-stdio |", "| interlock-stdio |", "| interlock-http |", "| token-http |", "calls/s, 2 clients", "(1.00×)"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("report lacks %q:\n%s", want, out.String())
		}
	}
	t.Run("soak", func(t *testing.T) {
		var out strings.Builder
		err := run([]string{"-soak", "200", "-clients", "4", "-self", self, "-interlock", interlockBin}, &out)
		if err != nil {
			t.Fatal(err)
		}
		for _, want := range []string{"| interlock-stdio | 4 | 200 | 0 | 0 |", "| interlock-http | 4 | 200 | 0 | 0 |"} {
			if !strings.Contains(out.String(), want) {
				t.Errorf("soak report lacks %q:\n%s", want, out.String())
			}
		}
	})
}
