package main

import (
	"os"
	"testing"
)

// TestConsoleInBrowser runs the console's browser suite (console/e2e:
// headless Chromium driven by playwright-core) against this binary: a call
// waits, an approver decides in the page, the agent's next call runs once
// or not at all. SCREENSHOTS names a directory to keep the screenshots of
// each state in; they go to a temporary one otherwise.
func TestConsoleInBrowser(t *testing.T) {
	shots := os.Getenv("SCREENSHOTS")
	if shots == "" {
		shots = t.TempDir()
	}
	runNodeSuite(t, "console/e2e", "playwright-core", "SCREENSHOTS="+shots)
}
