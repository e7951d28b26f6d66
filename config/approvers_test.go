package config

import (
	"strings"
	"testing"
)

func TestApproversNobodyCanBe(t *testing.T) {
	file := func(approver string) string {
		return "auth:\n  keys:\n    - sha256: " + strings.Repeat("1", 64) + "\n      principal: alice\n" +
			"rules:\n  - name: refunds\n    match: {tools: [refund]}\n    mode: approval\n    approvers: [" + approver + "]\n"
	}
	noEnv := func(string) (string, bool) { return "", false }
	// A typo of a key's principal is refused.
	if _, err := Parse("a.yaml", []byte(file("alcie")), noEnv); err == nil || !strings.Contains(err.Error(), "did you mean alice?") {
		t.Errorf("alcie: err = %v, want a refusal that suggests alice", err)
	}
	// A name far from every key (one whose key was removed to revoke it) is
	// a warning, so that the reload that revokes it is not refused.
	f, err := Parse("a.yaml", []byte(file("zed")), noEnv)
	if err != nil {
		t.Fatalf("zed: %v", err)
	}
	if len(f.Warnings) != 1 || !strings.Contains(f.Warnings[0].Error(), `approver "zed": no API key names the principal`) {
		t.Errorf("zed: Warnings = %v", f.Warnings)
	}
}
