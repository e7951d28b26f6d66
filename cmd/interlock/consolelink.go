package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"time"
)

const consoleUsage = `Usage:
  interlock console link [--data DIR]

link prints a new one-time link that signs the local operator in to the console of the gateway
running on the data directory, as the link interlock serve printed does.
`

// consoleLinkTTL is how long a link made by interlock console link signs
// in: long enough to paste it into a browser, short enough that one
// forgotten in a terminal's scrollback is spent by time.
const consoleLinkTTL = 15 * time.Minute

// runConsole runs interlock console's subcommands.
func runConsole(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprint(stderr, consoleUsage)
		return errUsage
	}
	if isHelp(args[0]) {
		fmt.Fprint(stdout, consoleUsage)
		return errHelp
	}
	if args[0] != "link" {
		fmt.Fprintf(stderr, "interlock console: unknown subcommand %q\n\n%s", args[0], consoleUsage)
		return errUsage
	}
	return consoleLink(ctx, args[1:], stdout, stderr)
}

// consoleLink makes a one-time console link in the data directory's
// state, which the gateway's console spends when it is opened: whoever
// may read the data directory may sign in as its operator, as whoever
// started the gateway could with the link it printed.
func consoleLink(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	flags := newFlags("console link", stderr)
	data := flags.String("data", ".interlock", "data `directory` of the running gateway (as given to interlock serve)")
	if err := parseFlags(flags, args); err != nil {
		return err
	}
	dir, err := filepath.Abs(*data)
	if err != nil {
		return err
	}
	noConsole := errors.New("no gateway with a console runs on this data directory: start interlock serve")
	state, err := openDataState(ctx, dir)
	if err != nil {
		return err
	}
	if state == nil {
		return noConsole
	}
	defer state.Close()
	gws, err := state.Gateways(ctx, consoleSeen)
	if err != nil {
		return err
	}
	base, authenticated := "", ""
	for _, g := range gws {
		switch {
		case g.ConsoleURL == "":
		case g.Authenticates:
			authenticated = cmp.Or(authenticated, g.ConsoleURL)
		case base == "":
			base = g.ConsoleURL
		}
	}
	if base == "" && authenticated != "" {
		return fmt.Errorf("the gateway at %s has API keys or an OAuth issuer: approvers sign in at %s/console/ with those; "+
			"one-time links are for a gateway without authentication", authenticated, authenticated)
	}
	if base == "" {
		return noConsole
	}
	token := randomText()
	if err := state.AddConsoleLink(ctx, token, consoleLinkTTL); err != nil {
		return err
	}
	fmt.Fprintln(stdout, strings.TrimSuffix(base, "/")+"/console/login?once="+token)
	fmt.Fprintf(stderr, "Signs in operator (tenant local) once, within %d minutes.\n", int(consoleLinkTTL.Minutes()))
	return nil
}
