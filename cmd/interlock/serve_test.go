package main

import "testing"

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
