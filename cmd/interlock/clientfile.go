package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	"go.yaml.in/yaml/v4"

	"github.com/interlock-mcp/interlock/config"
	"github.com/interlock-mcp/interlock/redact"
)

// An MCP client's own file, read as the client reads it and written back
// with interlock in front: which of the files a client keeps exist, the
// servers they list, the secrets they carry, and the entry that routes the
// client through interlock.

// inputRE matches VS Code's ${input:id}.
var inputRE = regexp.MustCompile(`\$\{input:([A-Za-z0-9_.-]+)\}`)

// clientOwnVars are the variables VS Code and Cursor fill in themselves
// before they start a server, with the values they would give them for
// the client's file: its workspace is the directory that holds .vscode or
// .cursor.
func clientOwnVars(from string) map[string]string {
	dir := filepath.Dir(from)
	if b := filepath.Base(dir); b == ".vscode" || b == ".cursor" {
		dir = filepath.Dir(dir)
	}
	own := map[string]string{"workspaceFolder": dir, "workspaceFolderBasename": filepath.Base(dir), "pathSeparator": string(filepath.Separator)}
	if home, err := os.UserHomeDir(); err == nil {
		own["userHome"] = home
	}
	return own
}

// clientServers reads the servers of a client's file as written, ${VAR}
// and all (config.Parse expands them, and the starter file must not hold
// what they stand for), and says under which key they are.
func clientServers(sel []member) (map[string]*config.ClientServer, string, error) {
	servers, key := map[string]*config.ClientServer{}, "mcpServers"
	for _, m := range sel {
		var these map[string]*config.ClientServer
		if err := yaml.Load(m.value, &these); err != nil {
			return nil, "", err
		}
		if m.key == "servers" && !slices.ContainsFunc(sel, func(m member) bool { return m.key == "mcpServers" }) {
			key = "servers"
		}
		maps.Copy(servers, these)
	}
	maps.DeleteFunc(servers, func(_ string, s *config.ClientServer) bool { return s == nil })
	return servers, key, nil
}

// serversIn returns the members of a client's file that hold its servers:
// at the top, "mcpServers" and "servers" when path is nil; else the one
// value at path (config.ServersPath), named mcpServers, at its line.
func serversIn(top []member, path []string) ([]member, error) {
	if len(path) == 0 {
		return slices.DeleteFunc(slices.Clone(top), func(m member) bool { return m.key != "mcpServers" && m.key != "servers" }), nil
	}
	members, at := top, 1
	for i, key := range path {
		j := slices.IndexFunc(members, func(m member) bool { return m.key == key })
		if j < 0 {
			return nil, nil
		}
		m := members[j]
		m.line += at - 1
		if i == len(path)-1 {
			return []member{{key: "mcpServers", value: m.value, line: m.line}}, nil
		}
		var err error
		if members, err = jsonObject(m.value); err != nil {
			return nil, fmt.Errorf("%s: %w", strings.Join(path[:i+1], "."), err)
		}
		at = m.line
	}
	return nil, nil
}

// member is one top-level key of a JSON object, its value as written.
type member struct {
	key   string
	value json.RawMessage
	// line is where the value starts, from 1.
	line int
}

// jsonObject reads a JSON object's members in their order, so that the
// client's file can be written back with only its servers changed.
func jsonObject(raw []byte) ([]member, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return nil, errors.New("not a JSON object")
	}
	var out []member
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			return nil, err
		}
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return nil, err
		}
		start := int(dec.InputOffset()) - len(v)
		out = append(out, member{t.(string), v, 1 + bytes.Count(raw[:start], []byte("\n"))})
	}
	if _, err := dec.Token(); err != nil {
		return nil, err
	}
	return out, nil
}

// interlockServer is the one server a client runs once it is routed
// through interlock.
type interlockServer struct {
	Type    string            `json:"type,omitempty"`
	Command string            `json:"command"`
	Args    []string          `json:"args"`
	Env     map[string]string `json:"env"`
}

// routedClientFile is the client's file with its servers replaced by
// interlock, every other key as it was. passed is what interlock's entry
// gives it in its environment, beside MCP_DRY_RUN: the values of the
// variables its configuration names, as the client's file held them.
// The file is written back as plain JSON: comments are not kept.
func routedClientFile(top []member, path []string, key, exe, config, dataDir string, passed map[string]string) ([]byte, error) {
	s := interlockServer{Command: exe, Args: []string{"serve", "--stdio", "--config", config, "--data", dataDir},
		Env: map[string]string{"MCP_DRY_RUN": "true"}}
	maps.Copy(s.Env, passed)
	if key == "servers" {
		s.Type = "stdio"
	}
	value, err := json.Marshal(map[string]interlockServer{"interlock": s})
	if err != nil {
		return nil, err
	}
	doc, err := replaceServers(top, path, key, value)
	if err != nil {
		return nil, err
	}
	var out bytes.Buffer
	if err := json.Indent(&out, doc, "", "  "); err != nil {
		return nil, err
	}
	out.WriteString("\n")
	return out.Bytes(), nil
}

// replaceServers writes members as an object, with value in place of the
// servers at path (nil: the top's mcpServers and servers).
func replaceServers(members []member, path []string, key string, value json.RawMessage) ([]byte, error) {
	var buf bytes.Buffer
	buf.WriteString("{")
	placed := false
	for i, m := range members {
		v := m.value
		switch {
		case len(path) == 0 && (m.key == "mcpServers" || m.key == "servers"):
			// Both keys in one file is rare; interlock goes in the one
			// chosen and the other is emptied, as both are behind it now.
			v = json.RawMessage("{}")
			if m.key == key && !placed {
				v, placed = value, true
			}
		case len(path) == 1 && m.key == path[0]:
			v = value
		case len(path) > 1 && m.key == path[0]:
			inner, err := jsonObject(m.value)
			if err != nil {
				return nil, err
			}
			if v, err = replaceServers(inner, path[1:], key, value); err != nil {
				return nil, err
			}
		}
		name, _ := json.Marshal(m.key)
		if i > 0 {
			buf.WriteString(",")
		}
		fmt.Fprintf(&buf, "%s:%s", name, v)
	}
	buf.WriteString("}")
	return buf.Bytes(), nil
}

// copyNew copies a file to a path that must not exist yet.
func copyNew(from, to string) error {
	info, err := os.Stat(from)
	if err != nil {
		return err
	}
	data, err := os.ReadFile(from)
	if err != nil {
		return err
	}
	f, err := os.OpenFile(to, os.O_WRONLY|os.O_CREATE|os.O_EXCL, info.Mode().Perm())
	if errors.Is(err, fs.ErrExist) {
		return fmt.Errorf("%s exists, from an earlier --write: move it away, then run again", to)
	}
	if err != nil {
		return fmt.Errorf("backing up the client's file: %w", err)
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return fmt.Errorf("backing up the client's file: %w", err)
	}
	return f.Close()
}

// clientFileNames are where the MCP clients interlock reads keep their
// servers, this project's first: Claude Code's and Cursor's project files
// and VS Code's workspace file in the working directory, then Cursor's
// user file and Claude Desktop's, where goos keeps it.
func clientFileNames(getenv func(string) string, goos string) []string {
	names := []string{".mcp.json", filepath.Join(".cursor", "mcp.json"), filepath.Join(".vscode", "mcp.json")}
	home := getenv("HOME")
	if goos == "windows" {
		home = getenv("USERPROFILE")
	}
	if home == "" {
		return names
	}
	names = append(names, filepath.Join(home, ".cursor", "mcp.json"))
	switch goos {
	case "darwin":
		names = append(names, filepath.Join(home, "Library", "Application Support", "Claude", "claude_desktop_config.json"))
	case "windows":
		if appData := getenv("APPDATA"); appData != "" {
			names = append(names, filepath.Join(appData, "Claude", "claude_desktop_config.json"))
		}
	default:
		config := getenv("XDG_CONFIG_HOME")
		if config == "" {
			config = filepath.Join(home, ".config")
		}
		names = append(names, filepath.Join(config, "Claude", "claude_desktop_config.json"))
	}
	return names
}

// clientFiles returns those of clientFileNames that exist.
func clientFiles(getenv func(string) string, goos string) []string {
	var found []string
	for _, name := range clientFileNames(getenv, goos) {
		if st, err := os.Stat(name); err == nil && st.Mode().IsRegular() {
			found = append(found, name)
		}
	}
	return found
}

// secretNames extend the names of secrets, for an environment variable.
var secretNames = []string{"key", "credential", "credentials"}

// secretRefs has interlock's configuration name what the client gives a
// server, rather than hold it: a literal secret in a server's env or
// headers becomes ${NAME}, and VS Code's ${input:id} and ${env:VAR}, which
// only VS Code expands, become ${NAME} and ${VAR} wherever they are. It
// returns what interlock's own entry in the client's file passes in its
// environment for each NAME: the value as the client's file held it.
func secretRefs(servers map[string]*config.ClientServer) map[string]string {
	passed := map[string]string{}
	// name picks the variable for a value: the one asked for, or the
	// server's name before it when another value has it.
	name := func(server, want, value string) string {
		if v, ok := passed[want]; ok && v != value {
			want = config.InputVar(server + "_" + want)
		}
		passed[want] = value
		return want
	}
	vscode := func(server, v string) string {
		return vscodeVarRE.ReplaceAllStringFunc(v, func(m string) string {
			sub := vscodeVarRE.FindStringSubmatch(m)
			want := sub[2] + sub[3]
			if sub[1] != "env" {
				want = config.InputVar(want)
			}
			return "${" + name(server, want, m) + "}"
		})
	}
	for _, srv := range slices.Sorted(maps.Keys(servers)) {
		s := servers[srv]
		s.Command, s.URL, s.Cwd = vscode(srv, s.Command), vscode(srv, s.URL), vscode(srv, s.Cwd)
		for i := range s.Args {
			s.Args[i] = vscode(srv, s.Args[i])
		}
		for i, field := range []map[string]string{s.Env, s.Headers} {
			for _, k := range slices.Sorted(maps.Keys(field)) {
				v := vscode(srv, field[k])
				if !strings.Contains(v, "${") && isSecretValue(k, v) {
					// A header's scheme (Bearer) is no secret.
					scheme, token, found := strings.Cut(v, " ")
					if header := i == 1; !found || !header || !isHeaderScheme(scheme) {
						scheme, token = "", v
					} else {
						scheme += " "
					}
					v = scheme + "${" + name(srv, config.InputVar(k), token) + "}"
				}
				field[k] = v
			}
		}
	}
	return passed
}

// vscodeVarRE matches the variables only VS Code (and Cursor) expand:
// ${input:id}, ${env:VAR}, and their own, such as ${workspaceFolder}.
var vscodeVarRE = regexp.MustCompile(`\$\{(?:(input|env):([A-Za-z0-9_.-]+)|(workspaceFolder|workspaceFolderBasename|userHome|pathSeparator))\}`)

// isSecretValue reports whether a value named k is a secret: by its name,
// or a URL that holds a password.
func isSecretValue(k, v string) bool {
	if redact.IsSecret(k, secretNames) {
		return true
	}
	u, err := url.Parse(v)
	if err != nil || u.User == nil {
		return false
	}
	_, has := u.User.Password()
	return has
}

// isHeaderScheme reports whether s is the scheme of an Authorization value.
func isHeaderScheme(s string) bool {
	return strings.EqualFold(s, "Bearer") || strings.EqualFold(s, "Basic") || strings.EqualFold(s, "Token")
}

// clientExecutable is the program the client is to run. Under go run it
// is a temporary build that is gone once go run exits, so it is the
// interlock on PATH instead, or none.
func clientExecutable() (string, error) {
	exe, err := os.Executable()
	if err != nil {
		return "", fmt.Errorf("finding this program for the client to run: %w", err)
	}
	if !temporaryBuild(exe) {
		return exe, nil
	}
	if found, err := exec.LookPath("interlock"); err == nil && !temporaryBuild(found) {
		if abs, err := filepath.Abs(found); err == nil {
			return abs, nil
		}
	}
	return "", errors.New("init runs from a temporary build (go run), which the client could not start later, and no interlock is on PATH: install it first with go install ./cmd/interlock (it goes to $(go env GOPATH)/bin, which must be on PATH), then run interlock init")
}

// temporaryBuild reports whether exe is one go run built: in a go-build
// directory (a temporary one, or the build cache where go run keeps
// executables).
func temporaryBuild(exe string) bool {
	for _, part := range strings.Split(filepath.ToSlash(exe), "/") {
		if strings.HasPrefix(part, "go-build") {
			return true
		}
	}
	if cache := os.Getenv("GOCACHE"); cache != "" && strings.HasPrefix(exe, filepath.Clean(cache)+string(filepath.Separator)) {
		return true
	}
	return false
}
