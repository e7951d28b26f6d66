// Package config reads interlock's configuration file, in Caddy's order:
// parse (the YAML into types, unknown fields refused at their line),
// validate (every problem found, each at its file:line) and provision
// (durations parsed, ${VAR} expanded, defaults filled in, rules
// compiled). It owns what the gateway runs with: the upstream servers it
// fronts, the API keys and OAuth issuer it accepts, the stores, the HTTP
// limits, the audit log and its checkpoints, the webhooks it notifies, and
// an MCP client's own mcpServers or servers map. The rules that decide
// each call are package policy's; config reads them from the same document
// and checks what they name outside the policy, such as an upstream.
package config

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"

	"go.yaml.in/yaml/v4"

	"github.com/interlock-mcp/interlock"
	"github.com/interlock-mcp/interlock/policy"
)

// File is a loaded configuration file: the policy that decides calls, and
// what the gateway runs with.
type File struct {
	// Policy is the rules the file holds, read inline: their keys (rules,
	// tenants, budgets, default_mode…) sit at the top of the file beside
	// config's own. It decides calls (&f.Policy is the gate's Policy); the
	// file only holds it. Its Path is where the file came from, for
	// messages.
	Policy policy.Policy `yaml:",inline"`
	// Digest is the hex SHA-256 of the bytes the file was parsed from,
	// which names this version of it (in the audit log of a reload, say).
	Digest string `yaml:"-"`
	// Warnings are what is likely wrong with the file but does not stop
	// it: check prints them, and a gateway logs them and shows them on
	// its banner and /readyz.
	Warnings  LoadErrors  `yaml:"-"`
	Upstreams []*Upstream `yaml:"upstreams"`
	// MCPServers and Servers are an MCP client's own list of servers, as
	// Claude Desktop, Claude Code and Cursor ("mcpServers") and VS Code
	// ("servers") write it: each server is an upstream of its name, so a
	// client's configuration file is an interlock configuration as it is.
	MCPServers map[string]*ClientServer `yaml:"mcpServers"`
	Servers    map[string]*ClientServer `yaml:"servers"`
	// Inputs is VS Code's list of values it prompts for; interlock prompts
	// for nothing, so it is read past.
	Inputs yaml.Node `yaml:"inputs"`
	Auth   Auth      `yaml:"auth"`
	Store  Store     `yaml:"store"`
	HTTP   HTTP      `yaml:"http"`
	Audit  Audit     `yaml:"audit"`
	// Notify lists webhooks told of every new pending approval.
	Notify []*Webhook `yaml:"notify"`
	// Shadow names a candidate policy file (rules and default_mode only),
	// relative to this one, that decides every call beside the rules
	// without enforcing anything; ShadowPolicy is that file, loaded.
	Shadow       string `yaml:"shadow"`
	ShadowPolicy *File  `yaml:"-"`
}

// LoadError is one problem in a configuration file, at its file and line.
type LoadError = policy.LoadError

// LoadErrors are all the problems found in one file, in file order.
type LoadErrors = policy.LoadErrors

// Load reads and checks the configuration file at name.
func Load(name string) (*File, error) {
	data, err := os.ReadFile(name)
	if err != nil {
		return nil, fmt.Errorf("reading configuration: %w", err)
	}
	return Parse(name, data, os.LookupEnv)
}

var (
	prefixRE = regexp.MustCompile(`^[A-Za-z0-9_.-]*$`)
	sha256RE = regexp.MustCompile(`^[0-9a-f]{64}$`)
)

// ownKeys are the top-level keys of interlock's configuration, read from
// the yaml tags of File and the policy it holds inline.
var ownKeys = func() []string {
	var keys []string
	var walk func(t reflect.Type)
	walk = func(t reflect.Type) {
		for f := range t.Fields() {
			name, opts, _ := strings.Cut(f.Tag.Get("yaml"), ",")
			switch {
			case opts == "inline":
				walk(f.Type)
			case name != "" && name != "-":
				keys = append(keys, name)
			}
		}
	}
	walk(reflect.TypeFor[File]())
	return keys
}()

// load decodes data into f, refusing unknown fields. A JSON object that
// holds mcpServers, servers or projects (Claude Code's user file, whose
// servers of the working directory are read, see projectServers) is a
// client's own file: the top-level keys
// that are not interlock's are the client's own settings (Claude
// Desktop's, say) and are read past, so the file is a configuration as it
// is. interlock's own keys are read as always, so none is ever dropped.
func load(name string, data []byte, f *File) error {
	if trimmed := bytes.TrimSpace(data); len(trimmed) == 0 || trimmed[0] != '{' {
		return yaml.Load(data, f, yaml.WithKnownFields())
	}
	var doc yaml.Node
	if err := yaml.Load(data, &doc); err != nil {
		return err
	}
	top := &doc
	if top.Kind == yaml.DocumentNode && len(top.Content) == 1 {
		top = top.Content[0]
	}
	if top.Kind == yaml.MappingNode && slices.ContainsFunc(top.Content, func(n *yaml.Node) bool {
		return n.Value == "mcpServers" || n.Value == "servers" || n.Value == "projects"
	}) {
		// Claude Code's user file keeps servers per project: those of the
		// directory the gateway runs in are the file's mcpServers.
		dir, _ := os.Getwd()
		path, servers, err := projectServers(top, dir)
		if err != nil {
			return LoadErrors{{File: name, Line: valueOf(top, "projects").Line, Msg: err.Error()}}
		}
		var kept []*yaml.Node
		for i := 0; i+1 < len(top.Content); i += 2 {
			if slices.Contains(ownKeys, top.Content[i].Value) {
				kept = append(kept, top.Content[i], top.Content[i+1])
			}
		}
		top.Content = kept
		if len(path) > 1 {
			if v := valueOf(top, "mcpServers"); v != nil {
				*v = *servers
			} else {
				top.Content = append(top.Content, &yaml.Node{Kind: yaml.ScalarNode, Value: "mcpServers", Line: servers.Line}, servers)
			}
		}
	}
	return doc.Load(f, yaml.WithKnownFields())
}

// Parse reads and checks a configuration file's contents; name is used in
// messages and lookupEnv expands ${VAR} in upstream environments and
// headers, and in store and audit URLs.
func Parse(name string, data []byte, lookupEnv func(string) (string, bool)) (*File, error) {
	// A file that sets nothing is a mistake, such as one an editor has
	// truncated before writing it, and never a configuration: in force it
	// would drop every rule.
	if what := nothingSet(data); what != "" {
		return nil, LoadErrors{{File: name, Line: 1, Msg: what + ": a configuration needs at least the upstreams interlock fronts (upstreams:, or an MCP client's mcpServers:) or the rules it applies (rules:)"}}
	}
	sum := sha256.Sum256(data)
	f := &File{Policy: policy.Policy{Path: name}, Digest: hex.EncodeToString(sum[:])}
	// An MCP client's JSON is read as the client reads it, comments and
	// trailing commas allowed, then as the YAML it is a subset of.
	data, err := jsonDocument(name, data)
	if err != nil {
		return nil, err
	}
	if err := load(name, data, f); err != nil {
		if les, ok := err.(LoadErrors); ok {
			return nil, les
		}
		return nil, policy.YAMLErrors(name, data, err)
	}
	var errs LoadErrors
	add := func(line int, format string, args ...any) {
		errs = append(errs, LoadError{File: name, Line: line, Msg: fmt.Sprintf(format, args...)})
	}
	keyLine := topLevelLines(data)
	// Parsed. An empty list item ("-" alone) decodes to nothing; it is an
	// error the file can be told about, not a hole the rest would trip
	// over, so it stops here.
	var empty LoadErrors
	for _, section := range []struct {
		key   string
		empty bool
	}{{"upstreams", slices.Contains(f.Upstreams, nil)}, {"auth", slices.Contains(f.Auth.Keys, nil)}} {
		if section.empty {
			empty = append(empty, LoadError{File: name, Line: keyLine[section.key], Msg: fmt.Sprintf("%s has an empty entry (a lone \"-\"): remove it or fill it in", section.key)})
		}
	}
	if empty = append(empty, f.Policy.EmptyEntries(keyLine)...); len(empty) > 0 {
		return nil, empty
	}
	// expand replaces ${VAR} in a value read from the file; what names the
	// value in messages.
	var expand expander = func(line int, what, value string) string {
		expanded, missing, secret := expandEnv(value, lookupEnv)
		switch {
		case secret != "":
			add(line, "%s refers to ${%s}: the sealing keys stay inside the gateway; use another variable", what, secret)
		case missing.ref != "":
			add(line, "%s", missing.message(what))
		}
		return expanded
	}
	// Validate and provision, section by section: each value is checked
	// where it is derived (a duration parsed, a ${VAR} expanded, a default
	// filled in), and every problem is kept, so that one run of
	// interlock check names them all.
	names := checkUpstreams(f, expand, add)
	checkStore(f, keyLine, expand, add)
	f.HTTP.check(add)
	checkAudit(f, keyLine, expand, add)
	checkNotify(f, keyLine, expand, add)
	checkKeys(f, add)
	checkOAuth(f, keyLine, expand, add)
	// The policy part validates and provisions itself; what it names
	// outside itself is checked here.
	errs = append(errs, f.Policy.Provision(keyLine)...)
	checkUpstreamNames(f, names, add)
	f.Warnings = checkApprovers(f, add)
	f.Warnings = append(f.Warnings, checkArguments(f)...)
	// In file order: a rule's problems are found key by key, not line by
	// line. The shadow file's come after this file's, in their own order.
	slices.SortStableFunc(errs, func(a, b LoadError) int { return a.Line - b.Line })
	errs = append(errs, loadShadow(f, keyLine, lookupEnv)...)
	if len(errs) > 0 {
		return nil, errs
	}
	return f, nil
}

// nothingSet says how data sets nothing at all (it is empty, holds only
// comments, or is an empty mapping or null), or "" when it sets something.
func nothingSet(data []byte) string {
	data = bytes.TrimPrefix(data, []byte("\ufeff"))
	if len(bytes.TrimSpace(data)) == 0 {
		return "the file is empty"
	}
	comments := true
	for line := range bytes.Lines(data) {
		if l := bytes.TrimSpace(line); len(l) > 0 && l[0] != '#' {
			comments = false
			break
		}
	}
	if comments {
		return "the file holds only comments"
	}
	var doc yaml.Node
	if yaml.Load(data, &doc) != nil || len(doc.Content) != 1 {
		// What does not parse is told about where it is parsed.
		return ""
	}
	if top := doc.Content[0]; top.Kind == yaml.MappingNode && len(top.Content) == 0 || top.Kind == yaml.ScalarNode && top.Tag == "!!null" {
		return "the file sets nothing"
	}
	return ""
}

// expander replaces ${VAR} in a value read from the file, reporting a
// variable that is not set or that names the sealing keys at line; what
// names the value in messages.
type expander func(line int, what, value string) string

// shadowKeys are the only top-level keys a shadow policy may have: what
// decides, not what runs.
var shadowKeys = []string{"rules", "default_mode"}

// loadShadow loads the shadow policy f names, if any. Its problems carry
// its own name and lines; a key of the live config in it is one.
func loadShadow(f *File, keyLine lines, lookupEnv func(string) (string, bool)) LoadErrors {
	if f.Shadow == "" {
		return nil
	}
	name := f.Shadow
	if !filepath.IsAbs(name) {
		name = filepath.Join(filepath.Dir(f.Policy.Path), name)
	}
	// A device or a pipe would be read for ever.
	if fi, err := os.Stat(name); err == nil && !fi.Mode().IsRegular() {
		return LoadErrors{{File: f.Policy.Path, Line: keyLine.At("shadow", 0), Msg: fmt.Sprintf("shadow policy: %s is not a regular file", name)}}
	}
	data, err := os.ReadFile(name)
	if err != nil {
		return LoadErrors{{File: f.Policy.Path, Line: keyLine.At("shadow", 0), Msg: fmt.Sprintf("shadow policy: %v", err)}}
	}
	if what := nothingSet(data); what != "" {
		return LoadErrors{{File: name, Line: 1, Msg: "shadow policy: " + what + ": a shadow policy holds the rules it tries beside the live ones (rules:)"}}
	}
	if line, ok := topLevelLines(data)["shadow"]; ok {
		// Checked before parsing it, which would follow it.
		return LoadErrors{{File: name, Line: line, Msg: "shadow: a shadow policy cannot name a shadow policy of its own"}}
	}
	shadow, err := Parse(name, data, lookupEnv)
	if err != nil {
		if les, ok := err.(LoadErrors); ok {
			return les
		}
		return LoadErrors{{File: name, Msg: err.Error()}}
	}
	var errs LoadErrors
	for key, line := range topLevelLines(data) {
		if !strings.ContainsAny(key, ".[") && !slices.Contains(shadowKeys, key) {
			errs = append(errs, LoadError{File: name, Line: line, Msg: fmt.Sprintf(
				"%s: a shadow policy holds only rules and default_mode; %s belongs in the live config %s", key, key, f.Policy.Path)})
		}
	}
	if len(errs) > 0 {
		slices.SortFunc(errs, func(a, b LoadError) int { return a.Line - b.Line })
		return errs
	}
	// Which tools a tenant may use is the live config's to say: a shadow
	// decides with the same allowlists and overlays, so that it differs
	// only where its own rules do.
	shadow.Policy.Tenants = f.Policy.Tenants
	f.ShadowPolicy = shadow
	return nil
}

// topLevelLines maps every key of a YAML document, by its path from the
// top ("store.redis", "audit.checkpoint.interval"), to its line.
func topLevelLines(data []byte) lines {
	var doc yaml.Node
	if yaml.Load(data, &doc) != nil {
		return lines{}
	}
	return keyLines(&doc)
}

// SecretFileEnv names the environment variable that may name a file
// holding the sealing keys, instead of INTERLOCK_SECRET holding them.
const SecretFileEnv = "INTERLOCK_SECRET_FILE"

// isSecretVar reports whether an environment variable carries the sealing
// keys or says where they are.
func isSecretVar(name string) bool {
	return name == interlock.SecretEnv || name == SecretFileEnv
}
