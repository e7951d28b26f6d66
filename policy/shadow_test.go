package policy

import (
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
