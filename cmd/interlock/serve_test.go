package main

import (
	"runtime/debug"
	"testing"
)

func TestRedactURL(t *testing.T) {
	tests := []struct{ in, want string }{
		{"redis://127.0.0.1:6379/0", "redis://127.0.0.1:6379/0"},
		{"redis://user:s3cret@cache.internal:6379/1", "redis://user:xxxxx@cache.internal:6379/1"},
		{"rediss://:s3cret@cache.internal:6380", "rediss://:xxxxx@cache.internal:6380"},
		{"redis://[bad", "(unparsable URL)"},
	}
	for _, tt := range tests {
		if got := redactURL(tt.in); got != tt.want {
			t.Errorf("redactURL(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

func TestTuneGC(t *testing.T) {
	before := debug.SetGCPercent(100)
	t.Cleanup(func() { debug.SetGCPercent(before) })
	for _, tc := range []struct {
		gogc string
		want int
	}{
		{"", gatewayGCPercent},
		{"100", 100},
		{"off", 100},
	} {
		t.Run("GOGC="+tc.gogc, func(t *testing.T) {
			debug.SetGCPercent(100)
			tuneGC(func(k string) string {
				if k == "GOGC" {
					return tc.gogc
				}
				return ""
			})
			if got := debug.SetGCPercent(100); got != tc.want {
				t.Errorf("GC percent = %d, want %d", got, tc.want)
			}
		})
	}
}
