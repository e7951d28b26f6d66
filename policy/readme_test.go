package policy

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestReadmeConfigLoads: the configuration file reference in the README,
// with its two placeholders filled in, is a configuration that loads. Every
// key it shows exists and every value it shows is accepted.
func TestReadmeConfigLoads(t *testing.T) {
	readme, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, _ := strings.Cut(string(readme), "\n## The configuration file\n")
	_, block, found := strings.Cut(section, "```yaml\n")
	block, _, closed := strings.Cut(block, "\n```")
	if !found || !closed {
		t.Fatal("the README has no yaml block under \"The configuration file\"")
	}
	if !strings.Contains(block, "sha256: 3f1c…") {
		t.Fatal("the README's example key is no longer written sha256: 3f1c…; update this test")
	}
	block = strings.Replace(block, "3f1c…", strings.Repeat("3f1c", 16), 1)
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "candidate.yaml"), []byte("default_mode: deny\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	everyVariable := func(string) (string, bool) { return "value", true }
	if _, err := Parse(filepath.Join(dir, "interlock.yaml"), []byte(block), everyVariable); err != nil {
		t.Errorf("the README's configuration does not load:\n%v", err)
	}
}
