package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/interlock-mcp/interlock/config"
	"github.com/interlock-mcp/interlock/gateway"
	"github.com/interlock-mcp/interlock/policy"
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
	if err := runThisProgram(f); err != nil {
		return nil, err
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
