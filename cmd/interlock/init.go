package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"maps"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"unicode"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.yaml.in/yaml/v4"

	"github.com/interlock-mcp/interlock/config"
	"github.com/interlock-mcp/interlock/gateway"
	"github.com/interlock-mcp/interlock/policy"
	"github.com/interlock-mcp/interlock/redact"
)

// initConfig writes a starter configuration from an MCP client's own file:
// the client's servers as they are, and a rule proposed for every tool that
// is not read-only, from the annotations its server lists. It prints the
// client's file routed through interlock, and with --write puts it in
// place after a backup. Its steps: the command line is read, the client's
// file is read, init makes sure it may write what it will, the client's
// servers are read and started or reached for their tools, the
// configuration is drafted and written, and the client is routed through
// it.
func initConfig(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	flags, err := initFlagsOf(args, stderr)
	if err != nil {
		return err
	}
	in := &initializing{initFlags: flags, stderr: stderr}
	if err := in.resolvePaths(); err != nil {
		return err
	}
	if err := in.readClientFile(); err != nil {
		return err
	}
	// Everything that can refuse does so before a server is started or a
	// file written.
	if err := in.mayWrite(); err != nil {
		return err
	}
	if err := in.readServers(); err != nil {
		return err
	}
	if err := in.reachServers(ctx); err != nil {
		return err
	}
	counts, err := in.writeConfig()
	if err != nil {
		return err
	}
	in.tellWritten(counts)
	return in.routeClient(stdout)
}

// initFlags are init's command line.
type initFlags struct {
	from, out, data, project string
	force, write             bool
}

// initFlagsOf reads init's command line. Without --from, the client's
// file is the one found where the clients keep theirs, and there must be
// exactly one.
func initFlagsOf(args []string, stderr io.Writer) (initFlags, error) {
	var o initFlags
	fs := newFlags("init", stderr)
	fs.StringVar(&o.from, "from", "", "the MCP client's configuration `file` (claude_desktop_config.json, .mcp.json, .cursor/mcp.json, .vscode/mcp.json); default: the one client file found where Claude Desktop, Claude Code, Cursor and VS Code keep theirs")
	fs.StringVar(&o.out, "out", "interlock.yaml", "the interlock configuration `file` to write")
	fs.StringVar(&o.data, "data", "", "state `directory` the client's interlock uses (default: .interlock beside --out)")
	fs.BoolVar(&o.force, "force", false, "overwrite --out if it exists")
	fs.BoolVar(&o.write, "write", false, "also rewrite --from to route the client through interlock, after copying it to FILE.bak")
	fs.StringVar(&o.project, "project", "", "for Claude Code's ~/.claude.json, the project `directory` whose servers to front (default: the working directory)")
	if err := parseFlags(fs, args); err != nil {
		return o, err
	}
	if o.from != "" {
		return o, nil
	}
	found := clientFiles(os.Getenv, runtime.GOOS)
	switch len(found) {
	case 0:
		fmt.Fprintf(stderr, "interlock init: no MCP client's file found (looked for %s): give one with --from\n", strings.Join(clientFileNames(os.Getenv, runtime.GOOS), ", "))
		return o, errUsage
	case 1:
		o.from = found[0]
		fmt.Fprintf(stderr, "Reading %s\n", o.from)
		return o, nil
	default:
		fmt.Fprintf(stderr, "interlock init: several MCP clients' files found; choose one with --from:\n  %s\n", strings.Join(found, "\n  "))
		return o, errUsage
	}
}

// initializing is one run of init: the files it reads and writes, and
// what each step finds for the next.
type initializing struct {
	initFlags
	stderr io.Writer

	fromPath, outPath, dataDir string
	backup                     string // where --write keeps the client's file as it was

	raw  []byte   // the client's file, read as the client reads it
	path []string // where its servers are (config.ServersPath); nil: at its top
	top  []member // the client's file, key by key

	f       *config.File                    // the servers, as interlock would serve them
	servers map[string]*config.ClientServer // the servers, as the client's file writes them
	key     string                          // the key they are under: mcpServers or servers
	exe     string                          // the interlock the client is to run

	tools  []policy.OfferedTool
	listed map[string]*mcp.Tool
	failed map[string]string // why each server whose tools were not listed failed
	passed map[string]string // what the client's entry passes in interlock's environment
}

// resolvePaths makes the files init reads and writes, and the data
// directory the client's interlock uses, absolute.
func (in *initializing) resolvePaths() error {
	var err error
	if in.outPath, err = filepath.Abs(in.out); err != nil {
		return err
	}
	in.dataDir = in.data
	if in.dataDir == "" {
		in.dataDir = filepath.Join(filepath.Dir(in.outPath), ".interlock")
	}
	if in.dataDir, err = filepath.Abs(in.dataDir); err != nil {
		return err
	}
	if in.fromPath, err = filepath.Abs(in.from); err != nil {
		return err
	}
	in.backup = in.fromPath + ".bak"
	return nil
}

// readClientFile reads the client's file, and finds where its servers are:
// at its top, or under the --project of Claude Code's ~/.claude.json.
func (in *initializing) readClientFile() error {
	raw, err := os.ReadFile(in.fromPath)
	if err != nil {
		return fmt.Errorf("reading the client's file: %w", err)
	}
	// Read as the client reads it, and as check and serve do.
	var errs policy.LoadErrors
	if raw, err = config.JSONC(in.fromPath, raw); errors.As(err, &errs) {
		return report(in.stderr, errs)
	}
	in.raw = raw
	dir := in.project
	if dir == "" {
		if dir, err = os.Getwd(); err != nil {
			return err
		}
	} else if dir, err = filepath.Abs(dir); err != nil {
		return err
	}
	path, err := config.ServersPath(in.fromPath, raw, dir)
	if errors.As(err, &errs) {
		return report(in.stderr, errs)
	}
	in.path = path
	return nil
}

// mayWrite refuses to write over the client's file, a configuration
// already there (unless --force), or the backup of an earlier --write.
func (in *initializing) mayWrite() error {
	if in.fromPath == in.outPath {
		return fmt.Errorf("--out is the client's own file %s: give another --out", in.from)
	}
	if _, err := os.Stat(in.outPath); err == nil && !in.force {
		return fmt.Errorf("%s exists: give another --out, or --force to overwrite it", in.out)
	}
	if in.write {
		if _, err := os.Stat(in.backup); err == nil {
			return fmt.Errorf("%s exists, from an earlier --write: move it away (it may be the only copy of the client's servers), then run again", in.backup)
		}
	}
	return nil
}

// readServers reads the client's servers, both as interlock would serve
// them and as the client's file writes them, and refuses a file with none
// or one already routed through interlock.
func (in *initializing) readServers() error {
	var err error
	if in.top, err = jsonObject(in.raw); err != nil {
		return fmt.Errorf("%s: %w: init reads a client's JSON file", in.from, err)
	}
	sel, err := serversIn(in.top, in.path)
	if err != nil {
		return fmt.Errorf("%s: %w", in.from, err)
	}
	if len(in.path) > 1 {
		fmt.Fprintf(in.stderr, "Reading the servers of project %s\n", in.path[1])
	}
	var errs policy.LoadErrors
	in.f, err = loadServers(in.fromPath, sel)
	if errors.As(err, &errs) {
		return report(in.stderr, errs)
	}
	if err != nil {
		return err
	}
	if in.servers, in.key, err = clientServers(sel); err != nil {
		return fmt.Errorf("%s: %w", in.from, err)
	}
	if len(in.servers) == 0 {
		return fmt.Errorf("%s has no servers under \"mcpServers\" or \"servers\": nothing to put behind interlock", in.from)
	}
	if in.exe, err = clientExecutable(); err != nil {
		return err
	}
	for name, s := range in.servers {
		if len(s.Args) > 0 && s.Args[0] == "serve" && (s.Command == in.exe || filepath.Base(s.Command) == "interlock") {
			return fmt.Errorf("%s already routes through interlock (server %q); its servers are in the configuration that server names", in.from, name)
		}
	}
	return nil
}

// reachServers starts or reaches every server for the tools it lists, and
// says of each that failed that it is kept with no rules; when none could,
// nothing could be proposed, and init ends there.
func (in *initializing) reachServers(ctx context.Context) error {
	var err error
	if in.tools, in.listed, in.failed, err = listTools(ctx, in.f); err != nil {
		return err
	}
	for _, u := range in.f.Upstreams {
		if why, ok := in.failed[u.Name]; ok {
			fmt.Fprintf(in.stderr, "%s: %s; its entry is kept, with no rules\n", u.Name, why)
		}
	}
	if len(in.f.Upstreams) > 0 && len(in.failed) == len(in.f.Upstreams) {
		return errors.New("no server could be started or reached, so no rule could be proposed; nothing was written: fix them (interlock check --config FILE --connect says more) and run init again")
	}
	return nil
}

// writeConfig drafts the starter configuration, with the secrets of the
// client's servers turned into references, checks that it loads, and
// writes it. It returns, for each upstream, how many of its tools are
// read-only, destructive and other writes.
func (in *initializing) writeConfig() (map[string][3]int, error) {
	in.passed = secretRefs(in.servers)
	doc, counts, err := starterYAML(in.fromPath, in.outPath, in.servers, in.f.Upstreams, in.tools, in.listed, in.failed)
	if err != nil {
		return nil, err
	}
	// What init writes must load as it is: anything else is init's bug,
	// and the user is told so rather than handed a file that fails later.
	// The values it names are the client's to pass.
	lookup := func(k string) (string, bool) {
		if v, ok := os.LookupEnv(k); ok {
			return v, true
		}
		v, ok := in.passed[k]
		return v, ok
	}
	if _, err := config.Parse(in.outPath, doc, lookup); err != nil {
		return nil, fmt.Errorf("the configuration init proposes does not load, so it was not written; this is a bug in interlock init, please report it with the client's file:\n%v\n\n%s", err, doc)
	}
	if err := os.WriteFile(in.outPath, doc, 0o600); err != nil {
		return nil, fmt.Errorf("writing the configuration: %w", err)
	}
	return counts, nil
}

// tellWritten says what the configuration written proposes for each
// upstream, how to check it, and what it reads from its environment.
func (in *initializing) tellWritten(counts map[string][3]int) {
	for _, u := range in.f.Upstreams {
		if c, ok := counts[u.Name]; ok {
			fmt.Fprintf(in.stderr, "%s: %d tools: %d read-only (no rule), %d destructive (token), %d other writes (flag)\n", u.Name, c[0]+c[1]+c[2], c[0], c[1], c[2])
		}
	}
	fmt.Fprintf(in.stderr, "Wrote %s. Review its rules; check it with: interlock check --config %s --connect\n", in.outPath, in.outPath)
	if len(in.passed) == 0 {
		return
	}
	names := slices.Sorted(maps.Keys(in.passed))
	fmt.Fprintf(in.stderr, "It reads %s from its environment, which the client's file passes to interlock (values stay there, not in %s)",
		strings.Join(names, ", "), filepath.Base(in.outPath))
	// Only what this shell lacks needs setting before a check from it.
	unset := slices.DeleteFunc(names, func(n string) bool { _, ok := os.LookupEnv(n); return ok })
	if len(unset) > 0 {
		fmt.Fprintf(in.stderr, "; set %s in your shell before checking it from there", strings.Join(unset, ", "))
	}
	fmt.Fprintln(in.stderr, ".")
}

// routeClient prints the client's file routed through interlock, and
// with --write puts it in place of the client's, after a backup.
func (in *initializing) routeClient(stdout io.Writer) error {
	snippet, err := routedClientFile(in.top, in.path, in.key, in.exe, in.outPath, in.dataDir, in.passed)
	if err != nil {
		return err
	}
	if !in.write {
		fmt.Fprintf(in.stderr, "Put this in %s (or run init again with --write --force, which writes %s again and keeps a backup of the client's file), then restart the client:\n", in.fromPath, filepath.Base(in.outPath))
		_, err := stdout.Write(snippet)
		return err
	}
	if err := copyNew(in.fromPath, in.backup); err != nil {
		return err
	}
	info, err := os.Stat(in.fromPath)
	if err != nil {
		return err
	}
	if err := os.WriteFile(in.fromPath, snippet, info.Mode().Perm()); err != nil {
		return fmt.Errorf("rewriting %s (the original is in %s): %w", in.fromPath, in.backup, err)
	}
	fmt.Fprintf(in.stderr, "Rewrote %s to route the client through interlock; the original is in %s. Restart the client.\n", in.fromPath, in.backup)
	_, err = stdout.Write(snippet)
	return err
}

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

// loadServers loads the servers of a client's file as interlock would
// serve it. The client's other keys (Claude Desktop's globalShortcut, say)
// are none of interlock's, so only the servers are parsed, each at its own
// line so that problems are reported where they are.
func loadServers(name string, sel []member) (*config.File, error) {
	var doc bytes.Buffer
	doc.WriteString("{")
	line, sep := 1, ""
	for _, m := range sel {
		for ; line < m.line; line++ {
			doc.WriteString("\n")
		}
		key, _ := json.Marshal(m.key)
		fmt.Fprintf(&doc, "%s%s: %s", sep, key, m.value)
		line += bytes.Count(m.value, []byte("\n"))
		sep = ", "
	}
	doc.WriteString("}")
	// VS Code asks its user for an ${input:id}; init cannot. Unless its
	// variable is set here, the server starts without it, and one that
	// cannot is kept without rules, saying why; the client's entry passes
	// the value on to interlock.
	inputs := map[string]bool{}
	for _, m := range inputRE.FindAllSubmatch(doc.Bytes(), -1) {
		inputs[config.InputVar(string(m[1]))] = true
	}
	own := clientOwnVars(name)
	lookup := func(k string) (string, bool) {
		if v, ok := os.LookupEnv(k); ok {
			return v, true
		}
		if v, ok := own[k]; ok {
			return v, true
		}
		return "", inputs[k]
	}
	f, err := config.Parse(name, doc.Bytes(), lookup)
	if err != nil {
		return nil, err
	}
	// An upstream command "interlock" is this program, as serve runs it.
	for _, u := range f.Upstreams {
		if len(u.Command) > 0 && u.Command[0] == "interlock" {
			exe, err := os.Executable()
			if err != nil {
				return nil, fmt.Errorf("finding this program to run upstream %q: %w", u.Name, err)
			}
			u.Command[0] = exe
		}
	}
	return f, nil
}

// listTools starts or reaches every upstream, as check --connect does, and
// returns the tools they offer as the policy sees them, the tools as the
// upstreams list them, and why each one that failed did.
func listTools(ctx context.Context, f *config.File) ([]policy.OfferedTool, map[string]*mcp.Tool, map[string]string, error) {
	errs, missing := missingCommands(f)
	failed := map[string]string{}
	for _, e := range errs {
		// Each is worded "upstream NAME: why"; the name is said apart.
		for name := range missing {
			if why, ok := strings.CutPrefix(e.Msg, fmt.Sprintf("upstream %q: ", name)); ok {
				failed[name] = why
			}
		}
	}
	gw, err := gateway.New(f, gateway.Options{Version: version, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		return nil, nil, nil, fmt.Errorf("preparing the gateway: %w", err)
	}
	defer gw.Close()
	down := gw.StartEach(ctx, func(u *config.Upstream) bool { return !missing[u.Name] })
	for _, u := range f.Upstreams {
		if err := down[u.Name]; err != nil {
			failed[u.Name] = strings.TrimPrefix(upstreamFailure(u, err), fmt.Sprintf("upstream %q: ", u.Name))
		}
	}
	listed, err := gw.ListedTools(ctx)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("listing the tools again: %w", err)
	}
	return gw.OfferedTools(), listed, failed, nil
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

// str is a YAML string scalar, quoted when it would otherwise read as
// something else (true, 12, @scope/pkg).
func str(v string) *yaml.Node { return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: v} }

func mapping(flow bool, kv ...*yaml.Node) *yaml.Node {
	n := &yaml.Node{Kind: yaml.MappingNode, Content: kv}
	if flow {
		n.Style = yaml.FlowStyle
	}
	return n
}

func sequence(values ...string) *yaml.Node {
	n := &yaml.Node{Kind: yaml.SequenceNode, Style: yaml.FlowStyle}
	for _, v := range values {
		n.Content = append(n.Content, str(v))
	}
	return n
}

func stringMap(m map[string]string) *yaml.Node {
	n := mapping(false)
	for _, k := range slices.Sorted(maps.Keys(m)) {
		n.Content = append(n.Content, str(k), str(m[k]))
	}
	return n
}

// serverNode is a client's server entry as interlock's YAML holds it.
func serverNode(s *config.ClientServer) *yaml.Node {
	n := mapping(false)
	add := func(k string, v *yaml.Node) { n.Content = append(n.Content, str(k), v) }
	if s.Type != "" {
		add("type", str(s.Type))
	}
	if s.Command != "" {
		add("command", str(s.Command))
	}
	if len(s.Args) > 0 {
		add("args", sequence(s.Args...))
	}
	if len(s.Env) > 0 {
		add("env", stringMap(s.Env))
	}
	if s.Cwd != "" {
		add("cwd", str(s.Cwd))
	}
	if s.URL != "" {
		add("url", str(s.URL))
	}
	if len(s.Headers) > 0 {
		add("headers", stringMap(s.Headers))
	}
	if s.Disabled {
		add("disabled", &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!bool", Value: "true"})
	}
	return n
}

// starterYAML is the starter configuration, and for each upstream listed
// how many of its tools are read-only, destructive and other writes: a
// head that says what the file is, the client's servers, and the rules
// drafted for the tools of each upstream that listed them.
func starterYAML(from, out string, servers map[string]*config.ClientServer, upstreams []*config.Upstream,
	tools []policy.OfferedTool, listed map[string]*mcp.Tool, failed map[string]string) ([]byte, map[string][3]int, error) {
	var doc bytes.Buffer
	fmt.Fprintf(&doc, `# interlock's configuration, proposed by interlock init from %s: the client's
# servers as they were, and a rule for each tool that is not read-only, from the annotations its server
# lists. Read-only tools need no rule: they run. Change what does not fit, then check the file with
#   interlock check --config %s --connect

# Tools no rule matches: read-only ones run, every other one needs both keys (MCP_DRY_RUN=false in
# interlock's environment, and the argument "__confirm": true in the call).
default_mode: flag

`, from, out)
	part, err := serversYAML(servers, failed)
	if err != nil {
		return nil, nil, err
	}
	doc.Write(part)

	d := &ruleDraft{rules: &yaml.Node{Kind: yaml.SequenceNode}, names: map[string]bool{}, counts: map[string][3]int{}, listed: listed}
	for _, u := range upstreams {
		if _, down := failed[u.Name]; down {
			continue
		}
		own := slices.DeleteFunc(slices.Clone(tools), func(t policy.OfferedTool) bool { return t.Upstream != u.Name })
		// An upstream none of whose tools has a rule is named by a
		// comment of its own.
		if drafted := d.draftUpstream(u.Name, own); !drafted.named && len(own) > 0 {
			doc.WriteString("\n# " + strings.ReplaceAll(serverComment(u.Name, own, drafted.readOnly), "\n", "\n# ") + "\n")
		}
	}
	if len(d.rules.Content) > 0 {
		part, err := yaml.Dump(mapping(false, str("rules"), d.rules), yamlStyle...)
		if err != nil {
			return nil, nil, err
		}
		doc.WriteString("\n# Rules are tried in order; the first that matches decides.\n")
		doc.Write(part)
	}
	return doc.Bytes(), d.counts, nil
}

// serversYAML is the client's servers as interlock's mcpServers, each
// whose tools were not listed under a comment that says why it has no
// rules.
func serversYAML(servers map[string]*config.ClientServer, failed map[string]string) ([]byte, error) {
	srv := mapping(false)
	for _, name := range slices.Sorted(maps.Keys(servers)) {
		k := str(name)
		if why, ok := failed[name]; ok {
			k.HeadComment = fmt.Sprintf("Its tools were not listed (%s), so no rules are proposed for it.\n"+
				"Until they are, default_mode decides its calls: read-only tools run, every other one needs both keys.", why)
		}
		srv.Content = append(srv.Content, k, serverNode(servers[name]))
	}
	return yaml.Dump(mapping(false, str("mcpServers"), srv), yamlStyle...)
}

// ruleDraft is the rules of the starter configuration as they are drafted,
// upstream by upstream, each under a name no other rule has; and for each
// upstream how many of its tools are read-only, destructive and other
// writes.
type ruleDraft struct {
	rules  *yaml.Node
	names  map[string]bool
	counts map[string][3]int
	listed map[string]*mcp.Tool
}

// upstreamDraft is what a draft knows of one upstream's tools.
type upstreamDraft struct {
	name             string
	own              []policy.OfferedTool
	readOnly, writes []string
	// named is whether the upstream's tools are named yet, in the comment
	// of its first rule.
	named bool
	// count is how many tools are read-only, destructive and other writes.
	count [3]int
}

// unique is name, or name with a number after it when a rule has it.
func (d *ruleDraft) unique(name string) string {
	n := name
	for i := 2; d.names[n]; i++ {
		n = fmt.Sprintf("%s-%d", name, i)
	}
	d.names[n] = true
	return n
}

// draftUpstream drafts the rules of one upstream's tools: none for a
// read-only tool, one of its own for a destructive tool or one that can be
// previewed, and one in mode flag for all its other writes.
func (d *ruleDraft) draftUpstream(name string, own []policy.OfferedTool) *upstreamDraft {
	u := &upstreamDraft{name: name, own: own}
	for _, t := range own {
		if t.Hints.ReadOnly {
			u.readOnly = append(u.readOnly, t.Name)
			u.count[0]++
		}
	}
	for _, t := range own {
		if t.Hints.ReadOnly {
			continue
		}
		preview := previewFor(t, own, d.listed)
		if !t.Hints.Destructive && preview == "" {
			u.writes = append(u.writes, t.Name)
			u.count[2]++
			continue
		}
		d.toolRule(u, t, preview)
	}
	if len(u.writes) > 0 {
		d.writesRule(u)
	}
	d.counts[name] = u.count
	return u
}

// toolRule drafts the rule of one tool: mode token for a destructive one,
// else flag, and the preview, if any, that shows what a call would do.
func (d *ruleDraft) toolRule(u *upstreamDraft, t policy.OfferedTool, preview string) {
	mode := "token"
	if t.Hints.Destructive {
		u.count[1]++
	} else {
		mode = "flag"
		u.count[2]++
	}
	rule := mapping(false,
		str("name"), str(d.unique(ruleName(t.Name))),
		str("match"), mapping(true, str("tools"), sequence(t.Name), str("upstream"), str(u.name)),
		str("mode"), str(mode))
	comment := t.Name + ": " + reason(t, d.listed[t.Name])
	if preview != "" {
		args := mapping(true)
		for _, a := range argsOf(u.own, preview) {
			args.Content = append(args.Content, str(a), str(celArg(a)))
		}
		rule.Content = append(rule.Content, str("preview"), mapping(true, str("tool"), str(preview), str("args"), args))
		comment += fmt.Sprintf("; %s, read-only, takes the same %s, so it previews the call", preview, strings.Join(argsOf(u.own, preview), ", "))
	}
	rule.Content = append(rule.Content, str("summary"), str(summaryFor(t, d.listed[t.Name])))
	d.add(u, rule, comment+".")
}

// writesRule drafts one rule in mode flag for the upstream's writes that
// are neither destructive nor previewed, saying why of each.
func (d *ruleDraft) writesRule(u *upstreamDraft) {
	rule := mapping(false,
		str("name"), str(d.unique(ruleName(u.name)+"-writes")),
		str("match"), mapping(true, str("tools"), sequence(u.writes...), str("upstream"), str(u.name)),
		str("mode"), str("flag"))
	var why []string
	for _, w := range u.writes {
		t := u.own[slices.IndexFunc(u.own, func(t policy.OfferedTool) bool { return t.Name == w })]
		why = append(why, w+": "+reason(t, d.listed[w]))
	}
	d.add(u, rule, strings.Join(why, ".\n")+".")
}

// add puts a rule in the draft under its comment; the upstream's first
// rule also names its tools.
func (d *ruleDraft) add(u *upstreamDraft, rule *yaml.Node, comment string) {
	if !u.named {
		u.named = true
		comment = serverComment(u.name, u.own, u.readOnly) + "\n" + comment
	}
	rule.HeadComment = comment
	d.rules.Content = append(d.rules.Content, rule)
}

var yamlStyle = []yaml.Option{yaml.WithIndent(2), yaml.WithCompactSeqIndent(false), yaml.WithLineWidth(-1), yaml.WithQuotePreference(yaml.QuoteDouble)}

// serverComment names a server's tools and those that need no rule.
func serverComment(name string, own []policy.OfferedTool, readOnly []string) string {
	s := fmt.Sprintf("%s: %d tools.", name, len(own))
	if len(readOnly) > 0 {
		s += " Read-only per their annotations, so they run without a rule: " + strings.Join(readOnly, ", ") + "."
	}
	return s
}

// reason says why a rule is proposed for a tool that is not read-only.
func reason(t policy.OfferedTool, listed *mcp.Tool) string {
	var a *mcp.ToolAnnotations
	if listed != nil {
		a = listed.Annotations
	}
	var s string
	switch {
	case a == nil:
		s = "no annotations: treated as destructive"
	case !t.Hints.Destructive:
		s = "writes, not destructive per its annotations"
	case a.DestructiveHint == nil:
		s = "its annotations do not say whether it is destructive: treated as destructive"
	default:
		s = "destructive per its annotations"
	}
	if a != nil {
		var also []string
		if t.Hints.Idempotent {
			also = append(also, "idempotent")
		}
		if t.Hints.OpenWorld {
			also = append(also, "open-world")
		} else {
			also = append(also, "closed-world")
		}
		s += " (" + strings.Join(also, ", ") + ")"
	}
	return s
}

var identRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// celArg is the CEL expression that reads a call's argument.
func celArg(name string) string {
	if identRE.MatchString(name) {
		return "args." + name
	}
	b, _ := json.Marshal(name)
	return "args[" + string(b) + "]"
}

// summaryFor names the tool and its arguments: required ones always there,
// optional ones only when the call gives them (a template reading a
// missing one would fall back to the generic summary).
func summaryFor(t policy.OfferedTool, listed *mcp.Tool) string {
	required := requiredOf(listed)
	// Required arguments come first; optional ones bring their own
	// separator, as a call may leave them out.
	var text string
	for _, a := range t.Arguments {
		if !slices.Contains(required, a) {
			continue
		}
		if text != "" {
			text += ", "
		}
		value := fmt.Sprintf("{{index .args %s}}", quoted(a))
		if identRE.MatchString(a) {
			value = fmt.Sprintf("{{.args.%s}}", a)
		}
		if structuredArg(listed, a) {
			// An array or object reads as JSON, not as Go's map[k:v].
			value = fmt.Sprintf("{{json (index .args %s)}}", quoted(a))
		}
		text += a + ": " + value
	}
	for _, a := range t.Arguments {
		if !slices.Contains(required, a) {
			value := "{{.}}"
			if structuredArg(listed, a) {
				value = "{{json .}}"
			}
			text += fmt.Sprintf("{{with index .args %s}}, %s: %s{{end}}", quoted(a), a, value)
		}
	}
	if text == "" {
		return "Call " + t.Name + "."
	}
	return "Call " + t.Name + " (" + text + ")."
}

// quoted is s as a template's string literal.
func quoted(s string) string {
	q, _ := json.Marshal(s)
	return string(q)
}

// structuredArg reports whether t's input schema says the argument name is
// an array or an object.
func structuredArg(t *mcp.Tool, name string) bool {
	if t == nil {
		return false
	}
	raw, err := json.Marshal(t.InputSchema)
	if err != nil {
		return false
	}
	var schema struct {
		Properties map[string]struct {
			Type any `json:"type"`
		} `json:"properties"`
	}
	_ = json.Unmarshal(raw, &schema)
	switch ty := schema.Properties[name].Type.(type) {
	case string:
		return ty == "array" || ty == "object"
	case []any:
		return slices.Contains(ty, any("array")) || slices.Contains(ty, any("object"))
	}
	return false
}

// requiredOf lists the arguments a tool's input schema requires.
func requiredOf(t *mcp.Tool) []string {
	if t == nil {
		return nil
	}
	raw, err := json.Marshal(t.InputSchema)
	if err != nil {
		return nil
	}
	var schema struct {
		Required []string `json:"required"`
	}
	_ = json.Unmarshal(raw, &schema)
	return schema.Required
}

func argsOf(tools []policy.OfferedTool, name string) []string {
	if i := slices.IndexFunc(tools, func(t policy.OfferedTool) bool { return t.Name == name }); i >= 0 {
		return tools[i].Arguments
	}
	return nil
}

// previewFor picks a read-only tool of the same upstream that can preview
// a call of t: it takes only arguments t requires, so they are there on
// every call, and either takes exactly t's arguments as the only such tool
// or shares a word of its name with t's (get_file_info for delete_file).
// It returns "" when none fits, and for a tool that makes what it names
// (see creates).
func previewFor(t policy.OfferedTool, own []policy.OfferedTool, listed map[string]*mcp.Tool) string {
	required := requiredOf(listed[t.Name])
	words := nameWords(t.Name)
	if creates(words) {
		return ""
	}
	type candidate struct {
		name   string
		shared int
		same   bool
	}
	var cands []candidate
	for _, r := range own {
		if !r.Hints.ReadOnly || len(r.Arguments) == 0 {
			continue
		}
		// It reads the same thing only when it takes every argument that
		// names the object (an id, a number, a path): list_issue_types
		// {owner} shares owner with update_issue but reads no issue.
		names := slices.DeleteFunc(slices.Clone(required), func(a string) bool { return !identifierRE.MatchString(a) })
		if !slices.ContainsFunc(r.Arguments, func(a string) bool { return !slices.Contains(required, a) }) &&
			!slices.ContainsFunc(names, func(a string) bool { return !slices.Contains(r.Arguments, a) }) {
			shared := 0
			for _, w := range nameWords(r.Name) {
				if slices.Contains(words, w) {
					shared++
				}
			}
			cands = append(cands, candidate{r.Name, shared, slices.Equal(r.Arguments, t.Arguments)})
		}
	}
	slices.SortStableFunc(cands, func(a, b candidate) int {
		if a.shared != b.shared {
			return b.shared - a.shared
		}
		if a.same != b.same {
			if a.same {
				return -1
			}
			return 1
		}
		return strings.Compare(a.name, b.name)
	})
	if len(cands) == 0 {
		return ""
	}
	if best := cands[0]; best.shared > 0 {
		return best.name
	}
	same := slices.DeleteFunc(cands, func(c candidate) bool { return !c.same })
	if len(same) == 1 {
		return same[0].name
	}
	return ""
}

// identifierRE matches an argument name that names the object a tool acts
// on: id, customer_id, issueNumber, path, uri, key, slug, sha.
var identifierRE = regexp.MustCompile(`(?i)(^|_|-)(id|number|name|path|uri|url|key|slug|sha)$|[a-z](Id|ID|Number|Name|Path|Uri|URI|Url|URL|Key|Slug|Sha|SHA)$`)

// nameWords splits a tool name into lower-case words, a plural's s
// dropped: delete_customer and list_customers share "customer".
func nameWords(name string) []string {
	var words []string
	for _, w := range strings.FieldsFunc(name, func(r rune) bool { return !unicode.IsLetter(r) && !unicode.IsDigit(r) }) {
		start := 0
		runes := []rune(w)
		for i := 1; i <= len(runes); i++ {
			if i == len(runes) || (unicode.IsUpper(runes[i]) && unicode.IsLower(runes[i-1])) {
				part := strings.ToLower(string(runes[start:i]))
				if len(part) > 3 {
					part = strings.TrimSuffix(part, "s")
				}
				words = append(words, part)
				start = i
			}
		}
	}
	return words
}

// ruleName is a tool's name as a rule's: words joined by dashes.
func ruleName(tool string) string {
	return strings.Join(strings.FieldsFunc(tool, func(r rune) bool { return r == '_' || r == ' ' }), "-")
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

// makingVerbs begin the names of tools that may make what they name.
var makingVerbs = []string{"write", "create", "add", "new", "make", "put", "upload", "insert", "post", "save", "mkdir"}

// creates reports whether a tool named by words may make what it names
// (write_file, create_directory): a preview that reads the thing would
// fail for a new one, and a failing preview refuses the call, so such a
// tool gets none.
func creates(words []string) bool {
	return len(words) > 0 && slices.Contains(makingVerbs, words[0])
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
