package main

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/interlock-mcp/interlock"
	"github.com/interlock-mcp/interlock/config"
	"github.com/interlock-mcp/interlock/demo"
	"github.com/interlock-mcp/interlock/gateway"
	"github.com/interlock-mcp/interlock/policy"
)

// runDemo serves the demo back office on stdio.
func runDemo(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	fs := newFlags("demo", stderr)
	dbPath := fs.String("db", filepath.Join(".interlock", "demo.db"), "SQLite database `file`, seeded on first start")
	reset := fs.Bool("reset", false, "wipe the database and seed it again")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(*dbPath), 0o700); err != nil {
		return fmt.Errorf("creating the database's directory: %w", err)
	}
	db, err := demo.Open(*dbPath, *reset)
	if err != nil {
		return err
	}
	defer db.Close()
	err = demo.NewServer(db).Run(ctx, &mcp.IOTransport{Reader: io.NopCloser(stdin), Writer: nopWriteCloser{stdout}})
	if ctx.Err() != nil {
		return nil
	}
	return err
}

// check validates a configuration file. With --connect it also starts or
// reaches every upstream and compares the rules with the tools they offer,
// so that what start-up or a first call would find is found now.
func check(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("check", stderr)
	configFile := fs.String("config", "", "configuration `file` (default: the built-in config)")
	connect := fs.Bool("connect", false, "also start or reach every upstream and check the rules against the tools it offers")
	data := fs.String("data", ".interlock", "data `directory` the gateways will use (as given to interlock serve), where a running console is looked for when a rule asks for approval")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	var dataDir string
	if *configFile == "" {
		// The built-in demo upstream runs this binary; its database goes
		// where nothing outlives the check.
		dir, err := os.MkdirTemp("", "interlock-check")
		if err != nil {
			return fmt.Errorf("making a data directory for the demo: %w", err)
		}
		defer os.RemoveAll(dir)
		dataDir = dir
	}
	f, err := loadConfig(*configFile, dataDir)
	var errs policy.LoadErrors
	if errors.As(err, &errs) {
		return report(stderr, errs)
	}
	if err != nil {
		return err
	}
	// Warnings do not fail the check: what they point at may be meant.
	for _, w := range f.Warnings {
		fmt.Fprintf(stderr, "warning: %v\n", w)
	}
	errs, missing := missingCommands(f)
	tools := 0
	if *connect {
		found, n, err := connectedProblems(ctx, f, missing)
		if err != nil {
			return err
		}
		errs, tools = append(errs, found...), n
	}
	if len(errs) > 0 {
		return report(stderr, errs)
	}
	fmt.Fprintf(stdout, "%s: ok (%d upstreams, %d rules, %d API keys", f.Policy.Path, len(f.Upstreams), len(f.Policy.Rules), len(f.Auth.Keys))
	if len(f.Policy.Tenants) > 0 {
		overlays := 0
		for _, t := range f.Policy.Tenants {
			overlays += len(t.Rules)
		}
		fmt.Fprintf(stdout, ", %d tenants with %d rules of their own", len(f.Policy.Tenants), overlays)
	}
	if len(f.Policy.Budgets) > 0 {
		fmt.Fprintf(stdout, ", %d budgets", len(f.Policy.Budgets))
	}
	if s := f.ShadowPolicy; s != nil {
		fmt.Fprintf(stdout, "; shadow policy %s: %d rules", s.Policy.Path, len(s.Policy.Rules))
	}
	if *connect {
		fmt.Fprintf(stdout, "; connected: %d tools", tools)
	}
	fmt.Fprintln(stdout, ")")
	approvalsNote(ctx, stderr, f, *data)
	return nil
}

// approvalsNote says, when rules of f ask for approval, where those
// approvals can be decided: at the console a gateway on the same store
// announces, or, when none runs, what to start. A gateway on stdio serves
// no console, so without one its approvals would wait with no place to
// decide them. The note goes to standard error; it is not a problem of
// the file, and the check still succeeds.
func approvalsNote(ctx context.Context, stderr io.Writer, f *config.File, data string) {
	rules := approvalRules(f)
	if len(rules) == 0 {
		return
	}
	asking := fmt.Sprintf("rule %s asks", rules[0])
	if len(rules) > 1 {
		asking = fmt.Sprintf("rules %s ask", strings.Join(rules, ", "))
	}
	// A store that does not answer soon is reported, not waited for.
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	base, authenticated, err := announcedConsole(ctx, f, data)
	url := cmp.Or(base, authenticated)
	switch {
	case err != nil:
		fmt.Fprintf(stderr, "approvals: %s for approval; whether a console runs on the store could not be read: %v\n", asking, err)
	case url != "":
		fmt.Fprintf(stderr, "approvals: %s for approval; the console at %s decides them\n", asking, url)
	default:
		fmt.Fprintf(stderr, "warning: %s for approval, and %s\n", asking, noConsoleRuns(f))
	}
}

// approvalRules names the rules of f, the tenants' included, that ask for
// approval, in file order.
func approvalRules(f *config.File) []string {
	var names []string
	add := func(rules []*policy.Rule) {
		for _, r := range rules {
			if r.Mode == interlock.ModeApproval {
				names = append(names, r.Name)
			}
		}
	}
	add(f.Policy.Rules)
	for _, t := range f.Policy.Tenants {
		add(t.Rules)
	}
	return names
}

// report prints every problem in file order and sums them up as the
// command's error.
func report(stderr io.Writer, errs policy.LoadErrors) error {
	slices.SortStableFunc(errs, func(a, b policy.LoadError) int { return a.Line - b.Line })
	for _, e := range errs {
		fmt.Fprintln(stderr, e)
	}
	return fmt.Errorf("%d problem(s) found", len(errs))
}

// missingCommands reports every upstream whose program is not on this
// machine's PATH, where the gateway could not start it, and names them.
func missingCommands(f *config.File) (policy.LoadErrors, map[string]bool) {
	var errs policy.LoadErrors
	missing := map[string]bool{}
	for _, u := range f.Upstreams {
		if len(u.Command) == 0 {
			continue
		}
		if _, err := exec.LookPath(u.Command[0]); err != nil {
			var notRun *exec.Error
			if errors.As(err, &notRun) {
				err = notRun.Err
			}
			errs = append(errs, policy.LoadError{File: f.Policy.Path, Line: u.At("command[0]"), Msg: fmt.Sprintf(
				"upstream %q: command %q is not an executable on this machine's PATH (%v): install it, or give its full path", u.Name, u.Command[0], err)})
			missing[u.Name] = true
		}
	}
	return errs, missing
}

// upstreamFailure says why an upstream could not be started or reached.
// The gateway's message for a failed connection names the file and line
// for its log; the check's line says that already, so only the cause is
// kept. Other failures (a tool name two upstreams offer) keep the
// gateway's words.
func upstreamFailure(u *config.Upstream, err error) string {
	cause := errors.Unwrap(err)
	if cause == nil {
		return err.Error()
	}
	what := "command " + gateway.CommandText(u.Command)
	if u.URL != "" {
		what = "url " + u.URL
	}
	return fmt.Sprintf("upstream %q: %s did not start or answer as an MCP server: %v", u.Name, what, cause)
}

// connectedProblems starts or reaches every upstream but the missing ones,
// and compares the rules with the tools they offer. It
// returns the problems and how many tools the upstreams offer.
func connectedProblems(ctx context.Context, f *config.File, missing map[string]bool) (policy.LoadErrors, int, error) {
	// The check reports its findings itself; the gateway's log would only
	// repeat them (and warn about a sealing key that no token needs here).
	gw, err := gateway.New(f, gateway.Options{Version: version, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		return nil, 0, fmt.Errorf("preparing the gateway: %w", err)
	}
	defer gw.Close()
	failed := gw.StartEach(ctx, func(u *config.Upstream) bool { return !missing[u.Name] })
	var errs policy.LoadErrors
	for _, u := range f.Upstreams {
		if err := failed[u.Name]; err != nil {
			errs = append(errs, policy.LoadError{File: f.Policy.Path, Line: u.Line, Msg: upstreamFailure(u, err)})
		}
	}
	tools := gw.OfferedTools()
	if len(errs) > 0 || len(missing) > 0 {
		// Without every upstream's tools, the rules cannot be compared
		// with them: a glob would seem to match nothing.
		return errs, len(tools), nil
	}
	return f.Policy.CheckTools(tools), len(tools), nil
}

// makeKey makes a random API key. The key goes to standard error, for the
// person who runs the command to hand over; only the config lines that
// accept it (its hash) go to standard output, so that
// `interlock key >> config.yaml` never stores the key itself.
func makeKey(args []string, stdout, stderr io.Writer) error {
	fs := newFlags("key", stderr)
	principal := fs.String("principal", "agent", "`name` of who will use the key")
	tenant := fs.String("tenant", config.DefaultTenant, "the `tenant` the key acts for")
	groups := fs.String("groups", "", "comma-separated `groups` the key's holder belongs to, which rules name as group:NAME approvers")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	var names []string
	for _, g := range strings.Split(*groups, ",") {
		if g = strings.TrimSpace(g); g != "" {
			names = append(names, g)
		}
	}
	key := "ilk_" + randomText()
	fmt.Fprintf(stderr, "API key for %s (shown once; interlock stores only its hash). Clients send it as\n"+
		"  Authorization: Bearer %s\n", *principal, key)
	fmt.Fprintf(stdout, "auth:\n  keys:\n    - sha256: %s\n      principal: %s\n      tenant: %s\n", gateway.HashKey(key), *principal, *tenant)
	if len(names) > 0 {
		fmt.Fprintf(stdout, "      groups: [%s]\n", strings.Join(names, ", "))
	}
	return nil
}

// makeSecret prints a new random sealing key for INTERLOCK_SECRET.
func makeSecret(args []string, stdout, stderr io.Writer) error {
	fs := newFlags("secret", stderr)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	fmt.Fprintln(stdout, randomText())
	fmt.Fprintln(stderr, "Set it as INTERLOCK_SECRET (the same value on every gateway that shares a token store).")
	return nil
}

// randomText returns 32 random bytes as unpadded base64url: 43 characters.
func randomText() string {
	raw := make([]byte, 32)
	if _, err := rand.Read(raw); err != nil {
		panic(err) // crypto/rand does not fail on supported platforms
	}
	return base64.RawURLEncoding.EncodeToString(raw)
}
