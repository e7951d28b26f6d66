// Package redact keeps secret argument values out of everything interlock
// shows or keeps: previews, summaries, logs and audit records. A name is
// secret when, compared without case, dashes or underscores, it equals or
// ends with one of the default names or a name the policy adds, so
// "githubToken", "X-Api-Key" and "client_secret" are all secret.
package redact

import "strings"

// Value is what stands in for a secret.
const Value = "[REDACTED]"

// DefaultNames are the argument names whose values never appear in
// previews or logs, whatever the policy adds.
var DefaultNames = []string{"password", "token", "secret", "api_key", "authorization"}

// IsSecret reports whether an argument name is secret under the default
// names plus extra.
func IsSecret(name string, extra []string) bool {
	n := normalize(name)
	for _, lists := range [2][]string{DefaultNames, extra} {
		for _, s := range lists {
			if strings.HasSuffix(n, normalize(s)) {
				return true
			}
		}
	}
	return false
}

func normalize(s string) string {
	return strings.Map(func(r rune) rune {
		if r == '_' || r == '-' {
			return -1
		}
		if 'A' <= r && r <= 'Z' {
			return r + 'a' - 'A'
		}
		return r
	}, s)
}

// Args returns a deep copy of args in which the value of every argument
// whose name isSecret reports is replaced by [Value], at any depth.
func Args(args map[string]any, isSecret func(string) bool) map[string]any {
	out := make(map[string]any, len(args))
	for k, v := range args {
		if isSecret(k) {
			out[k] = Value
			continue
		}
		out[k] = value(v, isSecret)
	}
	return out
}

func value(v any, isSecret func(string) bool) any {
	switch v := v.(type) {
	case map[string]any:
		return Args(v, isSecret)
	case []any:
		out := make([]any, len(v))
		for i, e := range v {
			out[i] = value(e, isSecret)
		}
		return out
	}
	return v
}
