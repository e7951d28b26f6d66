package config

import (
	"fmt"
	"regexp"
	"strings"
)

// varRE matches a variable as MCP clients write one: ${VAR} and
// ${VAR:-default} (Claude Code), ${env:VAR} and ${input:id} (VS Code).
var varRE = regexp.MustCompile(`\$\{(env:|input:)?([A-Za-z0-9_.-]+)(:-[^}]*)?\}`)

var (
	identRE       = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
	underscoresRE = regexp.MustCompile(`_+`)
)

// unsetVar is a variable a value refers to that is not set: the reference
// as written and the variable interlock reads for it.
type unsetVar struct{ ref, name string }

// message says what is wrong, for a value described by what.
func (u unsetVar) message(what string) string {
	if strings.HasPrefix(u.ref, "${input:") {
		return fmt.Sprintf("%s refers to %s, a value VS Code asks the user for, which interlock cannot: set %s in interlock's environment (interlock init passes it on from the client's file)", what, u.ref, u.name)
	}
	if clientOwn[u.name] {
		return fmt.Sprintf("%s refers to %s, which VS Code and Cursor fill in themselves and interlock cannot: write what it stands for, or set %s in interlock's environment (interlock init passes it on from the client's file)", what, u.ref, u.name)
	}
	return fmt.Sprintf("%s refers to %s, which is not set in interlock's environment", what, u.ref)
}

// clientOwn are the variables VS Code and Cursor fill in themselves before
// they start a server; interlock reads them from its environment.
var clientOwn = map[string]bool{"workspaceFolder": true, "workspaceFolderBasename": true, "userHome": true, "pathSeparator": true}

// expandEnv replaces each variable in s with its value, as the client
// whose file it is would: ${VAR} and ${env:VAR} from the environment,
// ${VAR:-default} the default when VAR is unset or empty, and ${input:id},
// which only VS Code can ask for, from the variable InputVar names. It
// returns the first variable that is not set, and the first that names
// the sealing keys, which are never expanded. Anything else that looks
// like a variable is left as written.
func expandEnv(s string, lookupEnv func(string) (string, bool)) (out string, missing unsetVar, secret string) {
	out = varRE.ReplaceAllStringFunc(s, func(m string) string {
		sub := varRE.FindStringSubmatch(m)
		kind, name, def := sub[1], sub[2], sub[3]
		switch {
		case kind == "input:":
			if def != "" {
				return m
			}
			name = InputVar(name)
		case !identRE.MatchString(name):
			return m
		}
		if isSecretVar(name) {
			if secret == "" {
				secret = name
			}
			return ""
		}
		v, ok := lookupEnv(name)
		if def != "" {
			if !ok || v == "" {
				return def[2:]
			}
			return v
		}
		if !ok && missing.ref == "" {
			missing = unsetVar{m, name}
		}
		return v
	})
	return out, missing, secret
}

// InputVar names the environment variable that stands for VS Code's
// ${input:id}: the id in upper case with words joined by "_", so
// github_token, github-token and githubToken are all GITHUB_TOKEN.
func InputVar(id string) string {
	var b strings.Builder
	lower := false
	for _, r := range id {
		switch {
		case r >= 'A' && r <= 'Z':
			if lower {
				b.WriteByte('_')
			}
			b.WriteRune(r)
			lower = false
		case r >= 'a' && r <= 'z':
			b.WriteRune(r - 'a' + 'A')
			lower = true
		case r >= '0' && r <= '9':
			b.WriteRune(r)
			lower = true
		default:
			b.WriteByte('_')
			lower = false
		}
	}
	name := strings.Trim(underscoresRE.ReplaceAllString(b.String(), "_"), "_")
	if name == "" || name[0] >= '0' && name[0] <= '9' {
		name = "INPUT_" + name
	}
	return name
}

// expandClientFields expands the variables of the fields a client expands
// beside env and headers (Claude Code: command, args and url; VS Code
// every string), for an upstream that is a client's server.
func expandClientFields(u *Upstream, expand expander) {
	for i := range u.Command {
		at := u.At("command")
		if i > 0 {
			at = u.At(fmt.Sprintf("args[%d]", i-1))
		}
		u.Command[i] = expand(at, fmt.Sprintf("upstream %q: %s", u.Name, clientArg(i)), u.Command[i])
	}
	u.URL = expand(u.At("url"), fmt.Sprintf("upstream %q: url", u.Name), u.URL)
	u.Dir = expand(u.At("cwd"), fmt.Sprintf("upstream %q: cwd", u.Name), u.Dir)
}

// clientArg names element i of an upstream's command as a client's file
// writes it.
func clientArg(i int) string {
	if i == 0 {
		return "command"
	}
	return fmt.Sprintf("args[%d]", i-1)
}
