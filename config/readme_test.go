package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestReadmeConfigLoads: the configuration file reference in
// docs/configuration.md, with its placeholders filled in, is a
// configuration that loads. Every key it shows exists and every value it
// shows is accepted.
func TestReadmeConfigLoads(t *testing.T) {
	page, err := os.ReadFile("../docs/configuration.md")
	if err != nil {
		t.Fatal(err)
	}
	section := string(page)
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "candidate.yaml"), []byte("default_mode: deny\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	everyVariable := func(string) (string, bool) { return "value", true }
	// Every yaml block of the section loads; one of them is the whole
	// reference, with its example key.
	reference := false
	for rest := section; ; {
		var block string
		var found, closed bool
		_, rest, found = strings.Cut(rest, "```yaml\n")
		if !found {
			break
		}
		block, rest, closed = strings.Cut(rest, "\n```")
		if !closed {
			t.Fatal("a yaml block of docs/configuration.md is not closed")
		}
		if strings.Contains(block, "sha256: 3f1c9a0e") {
			reference = true
		}
		if _, err := Parse(filepath.Join(dir, "interlock.yaml"), []byte(block), everyVariable); err != nil {
			t.Errorf("a configuration of docs/configuration.md does not load:\n%v\n%s", err, block)
		}
	}
	if !reference {
		t.Fatal("docs/configuration.md's reference configuration is no longer written with sha256: 3f1c9a0e…; update this test")
	}
}
