package config

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"github.com/interlock-mcp/interlock/policy"
)

// checkApprovers finds the approvers of rules that nobody can be: with API
// keys as the only way to sign in, an approver that no key's principal is
// (or group:NAME that no key's groups name) waits forever, and a typo such
// as alcie for alice is the likely cause; it is an error when a key's
// name is that close, else a warning (a key removed to revoke it must
// not make the reload that removes it refused). With an OAuth
// issuer any principal may sign in, so the same finding is only a
// warning, returned. Without keys or an issuer the gateway names no
// principals, and nothing is checked.
func checkApprovers(f *File, add func(int, string, ...any)) LoadErrors {
	if len(f.Auth.Keys) == 0 {
		return nil
	}
	var principals, groups []string
	for _, k := range f.Auth.Keys {
		principals = append(principals, k.Principal)
		for _, g := range k.Groups {
			groups = append(groups, "group:"+g)
		}
	}
	var warnings LoadErrors
	for _, rules := range ruleLists(f) {
		for _, r := range rules {
			for i, a := range r.Approvers {
				if slices.Contains(principals, a) || slices.Contains(groups, a) {
					continue
				}
				line := r.At(fmt.Sprintf("approvers[%d]", i))
				known := principals
				what := "no API key names the principal"
				if strings.HasPrefix(a, "group:") {
					known, what = groups, "no API key's groups name the group"
				}
				near := policy.Nearest(a, known)
				switch {
				case f.Auth.OAuth != nil:
					warnings = append(warnings, LoadError{File: f.Policy.Path, Line: line, Msg: fmt.Sprintf(
						"rule %q: approver %q: %s; only a sign-in with the identity provider can approve as it%s", r.Name, a, what, near)})
				case near == "":
					// Far from every key: most likely one removed to revoke
					// it, which a refused reload would leave in force.
					warnings = append(warnings, LoadError{File: f.Policy.Path, Line: line, Msg: fmt.Sprintf(
						"rule %q: approver %q: %s, so nobody can approve as it: remove it from approvers, or give it a key", r.Name, a, what)})
				default:
					add(line, "rule %q: approver %q: %s, so nobody can approve as it%s", r.Name, a, what, near)
				}
			}
		}
	}
	return warnings
}

// ruleLists are the shared rules and each tenant's.
func ruleLists(f *File) [][]*policy.Rule {
	lists := [][]*policy.Rule{f.Policy.Rules}
	for _, t := range f.Policy.Tenants {
		lists = append(lists, t.Rules)
	}
	return lists
}

// checkArguments warns of an upstream's argument that holds a space and
// looks like several arguments, such as "-y @scope/pkg": the program gets
// it as one, and a wrapper such as npx then waits or fails without saying
// why. An argument may hold a space on purpose (a shell's -c script), so it
// is a warning.
func checkArguments(f *File) LoadErrors {
	var warnings LoadErrors
	for _, u := range f.Upstreams {
		for i, arg := range u.Command {
			if i == 0 || !looksLikeSeveral(arg) || slices.Contains(scriptFlags, u.Command[i-1]) {
				continue
			}
			warnings = append(warnings, LoadError{File: f.Policy.Path, Line: u.At(fmt.Sprintf("command[%d]", i)), Msg: fmt.Sprintf(
				"upstream %q: argument %q holds a space, so the program gets it as one argument; if it means several, give each its own: %s",
				u.Name, arg, several(arg))})
		}
	}
	return warnings
}

// scriptFlags are the flags after which an argument is a script that may
// hold spaces (sh -c, node -e, pwsh -Command).
var scriptFlags = []string{"-c", "-e", "--eval", "-Command", "/c"}

// looksLikeSeveral reports whether arg reads as arguments run together: it
// starts with a flag or holds one after a space, and is no script.
func looksLikeSeveral(arg string) bool {
	fields := strings.Fields(arg)
	if len(fields) < 2 || strings.ContainsAny(arg, ";|&$`'\"\n") {
		return false
	}
	return slices.ContainsFunc(fields, func(f string) bool { return strings.HasPrefix(f, "-") })
}

// several is arg split at its spaces, as the JSON list the file would hold.
func several(arg string) string {
	b, _ := json.Marshal(strings.Fields(arg))
	return string(b)
}
