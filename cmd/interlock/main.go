// Command interlock is the gateway and its tools: serve puts the gate in
// front of MCP servers, demo runs the built-in demo back office, check
// validates a configuration file, init proposes one from an MCP client's
// own file, test runs cases of calls against expected
// decisions, replay decides the calls in the audit log again with a
// candidate policy, key and secret make an API key and a
// sealing key, audit verifies and reads the audit log, approvals
// decides approvals on a running gateway, status lists the gateways that
// share a data directory, and console link signs its operator in to the
// console again.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	// Time zones a rule's condition names are read from the binary: the
	// image (FROM scratch) and some hosts have no zoneinfo.
	_ "time/tzdata"
)

// version is reported to clients and upstreams, and by interlock version.
// make release stamps the release's git describe into it with
// -ldflags "-X main.version=…"; a plain build reports this default.
var version = "0.1.0"

const usage = `interlock makes destructive MCP tool calls impossible without the confirmation policy demands.

Usage:
  interlock serve [--config FILE] [--listen ADDR | --stdio] [--stateless] [--data DIR]
  interlock demo  [--db FILE] [--reset]
  interlock check [--config FILE] [--connect]
  interlock init  --from FILE [--out interlock.yaml] [--data DIR] [--force] [--write]
  interlock test  [--config FILE] [--connect] CASES.yaml
  interlock replay --policy NEW.yaml [--config FILE] [--data DIR] [--since TIME] [--connect]
  interlock key   [--principal NAME] [--tenant NAME]
  interlock audit verify [--data DIR | --config FILE] [--checkpoints] [--public-key FILE]
  interlock audit tail   [--data DIR | --config FILE] [-n N] [-f] [--json]
  interlock audit export [--data DIR | --config FILE] [--since TIME]

  interlock approvals list|approve ID|deny ID [--reason R] [--url URL]
  interlock status [--data DIR] [--config FILE]
  interlock console link [--data DIR] [--config FILE] [--url URL]
  interlock secret
  interlock version

Run interlock COMMAND --help for a command's flags.
` + environment

// environment documents the variables every command reads.
const environment = `
Environment:
  MCP_DRY_RUN        the operator key: gated calls run only when it is exactly "false";
                     anything else ("FALSE", "0", unset) keeps dry run on
  INTERLOCK_SECRET   the sealing key(s) for confirm tokens, comma-separated, 32 bytes or more each;
                     make one with: interlock secret. Unset: serve makes one once and keeps it in
                     its data directory (mode 0600), so tokens survive a restart; replicas on other
                     machines need the same value
  INTERLOCK_SECRET_FILE  a file holding those keys instead, readable by its owner only (mode 0600)
  INTERLOCK_KEY      an approver's API key, for interlock approvals
  OTEL_EXPORTER_OTLP_ENDPOINT  when set, serve exports trace spans there over OTLP/HTTP
`

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// run executes one command and returns the process exit code: 0 success,
// 1 failure, 2 bad usage.
func run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	var err error
	switch args[0] {
	case "serve":
		err = serve(ctx, args[1:], stdin, stdout, stderr)
	case "demo":
		err = runDemo(ctx, args[1:], stdin, stdout, stderr)
	case "key":
		err = makeKey(args[1:], stdout, stderr)
	case "secret":
		err = makeSecret(args[1:], stdout, stderr)
	case "version", "--version", "-version":
		fmt.Fprintf(stdout, "interlock %s\n", version)
		return 0
	case "help", "-h", "--help":
		fmt.Fprint(stdout, usage)
		return 0
	default:
		command, ok := commands[args[0]]
		if !ok {
			fmt.Fprintf(stderr, "interlock: unknown command %q\n\n%s", args[0], usage)
			return 2
		}
		err = command(ctx, args[1:], stdout, stderr)
	}
	switch {
	case err == nil, errors.Is(err, errHelp):
		return 0
	case err == errUsage:
		return 2
	default:
		fmt.Fprintf(stderr, "interlock %s: %v\n", args[0], err)
		if status, ok := errors.AsType[*exitStatus](err); ok {
			return status.code
		}
		return 1
	}
}

// commands are run's commands that read no standard input, by name.
var commands = map[string]func(ctx context.Context, args []string, stdout, stderr io.Writer) error{
	"check": check, "init": initConfig, "test": runTest, "replay": replay,
	"audit": runAudit, "approvals": approvals, "status": status, "console": runConsole,
}

// errUsage reports bad command-line usage that the flag package already
// explained.
var errUsage = errors.New("usage")

// isHelp reports whether arg asks a command with subcommands for its help.
func isHelp(arg string) bool {
	switch arg {
	case "-h", "--h", "-help", "--help", "help":
		return true
	}
	return false
}

// errHelp reports that a command printed its help, as asked.
var errHelp = errors.New("help")

// newFlags returns a command's flag set. Its help lists every flag the way
// it is best written, with two dashes, and the environment.
func newFlags(name string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("interlock "+name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		w := fs.Output()
		fmt.Fprintf(w, "Usage: interlock %s [flags]\n\nFlags:\n", name)
		fs.VisitAll(func(f *flag.Flag) {
			arg, help := flag.UnquoteUsage(f)
			dashes := "--"
			if len(f.Name) == 1 {
				dashes = "-"
			}
			line := "  " + dashes + f.Name
			if arg != "" {
				line += " " + arg
			}
			if f.DefValue != "" && f.DefValue != "false" && f.DefValue != "0" {
				help += fmt.Sprintf(" (default %s)", f.DefValue)
			}
			fmt.Fprintf(w, "%-24s %s\n", line, help)
		})
		fmt.Fprint(w, environment)
	}
	return fs
}

func parseFlags(fs *flag.FlagSet, args []string) error {
	for _, a := range args {
		if a == "--" {
			break
		}
		if a == "-h" || a == "--h" || a == "-help" || a == "--help" {
			// Asked for, so it goes to standard output and is no failure.
			fs.SetOutput(os.Stdout)
			fs.Usage()
			return errHelp
		}
	}
	if err := fs.Parse(args); err != nil {
		return errUsage
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(fs.Output(), "%s: unexpected argument %q\n", fs.Name(), fs.Arg(0))
		return errUsage
	}
	return nil
}
