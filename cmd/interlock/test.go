package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"

	"github.com/interlock-mcp/interlock"
	"github.com/interlock-mcp/interlock/config"
	"github.com/interlock-mcp/interlock/gateway"
	"github.com/interlock-mcp/interlock/policy"
)

// exitStatus is an error that ends a command with a status other than 1.
type exitStatus struct {
	code int
	err  error
}

func (e *exitStatus) Error() string { return e.err.Error() }
func (e *exitStatus) Unwrap() error { return e.err }

// badInput is the status of a command whose input files do not load.
const badInput = 2

// splitFile takes the one file argument a command expects out of args,
// wherever it stands among the flags, and returns it with the flags.
func splitFile(fs *flag.FlagSet, args []string) (string, []string) {
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			if i+1 < len(args) {
				return args[i+1], append(args[:i:i], args[i+2:]...)
			}
			break
		}
		if !strings.HasPrefix(a, "-") || a == "-" {
			return a, append(args[:i:i], args[i+1:]...)
		}
		name, _, hasValue := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if f := fs.Lookup(name); f != nil && !hasValue {
			if b, ok := f.Value.(interface{ IsBoolFlag() bool }); !ok || !b.IsBoolFlag() {
				i++ // the flag's value
			}
		}
	}
	return "", args
}

// runTest runs a cases file against a policy, like `opa test`: exit 0 when
// every case decides as expected, 1 naming each one that does not, 2 when
// the cases or the config do not load.
func runTest(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("test", stderr)
	configFile := fs.String("config", "", "configuration `file` whose rules decide (default: the built-in config)")
	connect := fs.Bool("connect", false, "start or reach the config's upstreams and take each tool's hints from what it advertises")
	fs.Usage = withFileUsage(fs, "CASES.yaml", "the cases: calls and the decisions expected of them (see docs/testing-policies.md)")
	file, rest := splitFile(fs, args)
	if err := parseFlags(fs, rest); err != nil {
		return err
	}
	if file == "" {
		fmt.Fprintln(stderr, "interlock test: give the cases file: interlock test [--config FILE] CASES.yaml")
		return errUsage
	}
	// The built-in demo upstream, started only with --connect, keeps its
	// database where nothing outlives the test.
	dir, err := os.MkdirTemp("", "interlock-test")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	f, cases, err := loadTestInputs(*configFile, file, dir)
	if err != nil {
		return badInputs(stderr, err)
	}
	offered := map[string]policy.OfferedTool{}
	source := "a case without hints is decided for an unannotated tool: destructive and open-world, as the gate treats one"
	if *connect {
		if offered, err = advertisedTools(ctx, f); err != nil {
			return err
		}
		source = "a case without hints takes the hints its upstream advertises for the tool"
	}
	fmt.Fprintf(stdout, "%s against %s (%s)\n", cases.Path, f.Policy.Path, source)
	passed, failed := 0, 0
	for _, c := range cases.Cases {
		upstream, h := caseTool(f, c, offered)
		call, err := c.Call(upstream, h)
		if err != nil {
			return badInputs(stderr, err)
		}
		var warnings bytes.Buffer
		f.Policy.Log = slog.New(slog.NewTextHandler(&warnings, &slog.HandlerOptions{
			ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
				if a.Key == slog.TimeKey || a.Key == slog.LevelKey {
					return slog.Attr{}
				}
				return a
			}}))
		v := f.Policy.Judge(ctx, call)
		want := c.Failed(v)
		if want == "" {
			passed++
			continue
		}
		failed++
		fmt.Fprintf(stdout, "FAIL %q (%s:%d): got %s; expected %s\n", c.Name, cases.Path, c.Line, v, want)
		if v.Err != nil {
			fmt.Fprintf(stdout, "    the policy could not decide: %v\n", v.Err)
		}
		for line := range strings.Lines(warnings.String()) {
			fmt.Fprintf(stdout, "    %s", line)
		}
	}
	fmt.Fprintf(stdout, "%d passed, %d failed\n", passed, failed)
	if failed > 0 {
		return fmt.Errorf("%d of %d cases failed", failed, passed+failed)
	}
	return nil
}

// withFileUsage is fs's help followed by the file argument the command
// takes.
func withFileUsage(fs *flag.FlagSet, file, what string) func() {
	flags := fs.Usage
	return func() {
		flags()
		fmt.Fprintf(fs.Output(), "\nArgument:\n  %-22s %s\n", file, what)
	}
}

// badInputs ends a command whose input files do not load with status 2,
// printing each problem on its own line.
func badInputs(stderr io.Writer, err error) error {
	var errs policy.LoadErrors
	if errors.As(err, &errs) {
		err = report(stderr, errs)
	}
	return &exitStatus{badInput, err}
}

// loadTestInputs loads the config (the built-in one, with its demo
// database in dataDir, when config is empty) and the cases file.
func loadTestInputs(configFile, casesFile, dataDir string) (*config.File, *policy.Cases, error) {
	f, err := loadConfig(configFile, dataDir)
	if err != nil {
		return nil, nil, err
	}
	cases, err := policy.LoadCases(casesFile)
	if err != nil {
		return nil, nil, err
	}
	if errs := cases.CheckAgainst(&f.Policy, f.UpstreamNames()); len(errs) > 0 {
		return nil, nil, errs
	}
	return f, cases, nil
}

// caseTool returns the upstream and the hints of a case's tool: the
// case's own, else what the upstreams offer, else the config's only
// upstream and no annotations.
func caseTool(f *config.File, c *policy.Case, offered map[string]policy.OfferedTool) (string, interlock.Hints) {
	upstream := c.Upstream
	t, isOffered := offered[c.Tool]
	if upstream == "" && isOffered {
		upstream = t.Upstream
	}
	if upstream == "" && len(f.Upstreams) == 1 {
		upstream = f.Upstreams[0].Name
	}
	switch {
	case c.HasHints():
		return upstream, c.ToolHints()
	case isOffered && t.Upstream == upstream:
		return upstream, t.Hints
	}
	return upstream, interlock.HintsOf(nil)
}

// advertisedTools starts or reaches every upstream of f, as check
// --connect does, and returns the tools they offer by name.
func advertisedTools(ctx context.Context, f *config.File) (map[string]policy.OfferedTool, error) {
	gw, err := gateway.New(f, gateway.Options{Version: version, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		return nil, fmt.Errorf("preparing the gateway: %w", err)
	}
	defer gw.Close()
	var errs []error
	failed := gw.StartEach(ctx, func(*config.Upstream) bool { return true })
	for _, u := range f.Upstreams {
		if err := failed[u.Name]; err != nil {
			errs = append(errs, errors.New(upstreamFailure(u, err)))
		}
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	out := map[string]policy.OfferedTool{}
	for _, t := range gw.OfferedTools() {
		out[t.Name] = t
	}
	return out, nil
}
