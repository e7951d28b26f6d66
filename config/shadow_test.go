package config

import (
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestShadowMustBeARegularFile: a shadow policy that names a directory or
// a device is a load error, not a read that never ends.
func TestShadowMustBeARegularFile(t *testing.T) {
	dir := t.TempDir()
	for _, shadow := range []string{".", "/dev/zero"} {
		t.Run(shadow, func(t *testing.T) {
			_, err := Parse(filepath.Join(dir, "live.yaml"), []byte("shadow: "+shadow+"\n"), func(string) (string, bool) { return "", false })
			if err == nil || !strings.Contains(err.Error(), "live.yaml:1: shadow policy:") || !strings.Contains(err.Error(), "not a regular file") {
				t.Errorf("Parse = %v", err)
			}
		})
	}
}

// TestDigestNamesTheBytes: a loaded file, and its shadow policy, carry the
// SHA-256 of the bytes each was read from.
func TestDigestNamesTheBytes(t *testing.T) {
	dir := t.TempDir()
	shadow := []byte("default_mode: deny\n")
	if err := os.WriteFile(filepath.Join(dir, "candidate.yaml"), shadow, 0o600); err != nil {
		t.Fatal(err)
	}
	live := []byte("shadow: candidate.yaml\n")
	f, err := Parse(filepath.Join(dir, "live.yaml"), live, func(string) (string, bool) { return "", false })
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		got  string
		data []byte
	}{{f.Digest, live}, {f.ShadowPolicy.Digest, shadow}} {
		if sum := sha256.Sum256(c.data); c.got != hex.EncodeToString(sum[:]) {
			t.Errorf("digest %s of %q", c.got, c.data)
		}
	}
}
