package config

import (
	"slices"
	"strings"
	"testing"
)

func TestKeepRunning(t *testing.T) {
	const base = "upstreams:\n  - {name: gh, command: [x]}\nstore: {redis: 'redis://a'}\nhttp: {max_connections: 10}\n"
	key := "auth:\n  keys:\n    - {sha256: " + strings.Repeat("a", 64) + ", principal: p}\n"
	tests := []struct {
		name    string
		running string
		next    string
		kept    []string
	}{
		{"rules and redact only", base, base + "redact: [note]\nrules:\n  - {name: r, mode: deny}\n", nil},
		{"an upstream moved down the file", base, "rules:\n  - {name: r, mode: deny}\n" + base, nil},
		{"an upstream changed", base, "upstreams:\n  - {name: gh, command: [y]}\nstore: {redis: 'redis://a'}\nhttp: {max_connections: 10}\n", []string{"upstreams"}},
		{"store and http changed", base, "upstreams:\n  - {name: gh, command: [x]}\nstore: {redis: 'redis://b'}\nhttp: {max_connections: 11}\n", []string{"store", "http"}},
		{"API keys switched on", base, base + key, []string{"auth"}},
		{"API keys switched off", base + key, base, []string{"auth"}},
		{"audit changed", base, base + "audit: {required: false}\n", []string{"audit"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			running, next := parse(t, tt.running), parse(t, tt.next)
			if kept := next.KeepRunning(running); !slices.Equal(kept, tt.kept) {
				t.Errorf("kept %q, want %q", kept, tt.kept)
			}
			if next.Upstreams[0] != running.Upstreams[0] || next.Store != running.Store || next.HTTP.MaxConnections != running.HTTP.MaxConnections ||
				next.Audit.IsRequired() != running.Audit.IsRequired() || len(next.Auth.Keys) != len(running.Auth.Keys) {
				t.Errorf("a section that needs a restart was not kept: %+v", next)
			}
		})
	}
}
