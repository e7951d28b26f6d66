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

	"github.com/interlock-mcp/interlock"
	"github.com/interlock-mcp/interlock/config"
	"github.com/interlock-mcp/interlock/console"
	"github.com/interlock-mcp/interlock/consolestate"
	"github.com/interlock-mcp/interlock/gateway"
	"github.com/interlock-mcp/interlock/postgres"
	"github.com/interlock-mcp/interlock/redis"
	"github.com/interlock-mcp/interlock/sqlite"
)

const consoleUsage = `Usage:
  interlock console link [--data DIR] [--config FILE] [--url URL]

link prints a new one-time link that signs the local operator in to the console of a gateway
without authentication, as the link interlock serve printed does. The link is kept in the store the
configuration names (store.postgres, else store.redis, else the data directory's state), so any
gateway sharing that store takes it. The console is the one a gateway announced in that store, or
the one at --url.
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

// consoleLink makes a one-time console link in the store the
// configuration names, where the console of every gateway sharing it
// spends it when it is opened: whoever may read the configuration and
// reach its store (or read the data directory) may sign in as the
// operator, as whoever started the gateway could with the link it
// printed.
func consoleLink(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	flags := newFlags("console link", stderr)
	data := flags.String("data", ".interlock", "data `directory` of the running gateway (as given to interlock serve)")
	configFile := flags.String("config", "", "configuration `file` of the running gateway, whose store keeps the link (default: the built-in config)")
	at := flags.String("url", "", "base `URL` of the console (default: the one a gateway on the store announced)")
	if err := parseFlags(flags, args); err != nil {
		return err
	}
	dir, f, err := loadStore(*data, *configFile)
	if err != nil {
		return err
	}
	base, authenticated, err := announcedConsole(ctx, f, dir)
	if err != nil {
		return err
	}
	if *at != "" {
		base = *at
	}
	if f.Auth.Configured() && base != "" {
		authenticated, base = base, ""
	}
	if base == "" && authenticated != "" {
		return fmt.Errorf("the gateway at %s has API keys or an OAuth issuer: approvers sign in at %s/console/ with those; "+
			"one-time links are for a gateway without authentication", authenticated, authenticated)
	}
	if f.Auth.Configured() {
		return errors.New("the configuration has API keys or an OAuth issuer: approvers sign in with those; " +
			"one-time links are for a gateway without authentication")
	}
	if base == "" {
		return errors.New("no gateway with a console runs on this store: start interlock serve, or name its console with --url")
	}
	links, closeLinks, err := openLinkStore(ctx, f, dir)
	if err != nil {
		return err
	}
	defer closeLinks()
	token := randomText()
	operator := interlock.Identity{Principal: gateway.Operator, Tenant: interlock.TenantLocal}
	if err := links.AddLink(ctx, consolestate.Key(token), operator, time.Now().Add(consoleLinkTTL)); err != nil {
		return fmt.Errorf("keeping the link: %w", err)
	}
	fmt.Fprintln(stdout, strings.TrimSuffix(base, "/")+"/console/login?once="+token)
	fmt.Fprintf(stderr, "Signs in operator (tenant local) once, within %d minutes.\n", int(consoleLinkTTL.Minutes()))
	return nil
}

// announcedConsole returns the console a gateway without authentication
// announced where the gateways running f announce themselves (see
// openRoster), and one with authentication; "" for each that runs there
// with no console. A console counts only while it answers as the gateway
// that announced it: a link sent to a dead gateway's port would sign in
// whoever took that port.
func announcedConsole(ctx context.Context, f *config.File, dir string) (base, authenticated string, err error) {
	gateways, closeRoster, err := openRoster(ctx, f, dir)
	if err != nil || gateways == nil {
		return "", "", err
	}
	defer closeRoster()
	gws, err := gateways.Gateways(ctx, consoleSeen)
	if err != nil {
		return "", "", err
	}
	consoles := console.NewProber()
	for _, g := range gws {
		switch {
		case g.ConsoleURL == "" || !consoles.Answers(ctx, g.ConsoleURL, g.ID):
		case g.Authenticates:
			authenticated = cmp.Or(authenticated, g.ConsoleURL)
		case base == "":
			base = g.ConsoleURL
		}
	}
	return base, authenticated, nil
}

// openLinkStore opens the console's state where f keeps it, as interlock
// serve does: PostgreSQL when the store names it, else Redis, else the
// state file of the data directory dir.
func openLinkStore(ctx context.Context, f *config.File, dir string) (consolestate.Store, func(), error) {
	switch {
	case f.Store.Postgres != "":
		s, err := postgres.OpenApprovals(ctx, f.Store.Postgres)
		if err != nil {
			return nil, nil, err
		}
		return s.Console(), func() { s.Close() }, nil
	case f.Store.Redis != "":
		s, err := redis.Open(ctx, f.Store.Redis, f.Store.Prefix)
		if err != nil {
			return nil, nil, err
		}
		return s.Console(), func() { s.Close() }, nil
	}
	s, err := sqlite.OpenState(ctx, filepath.Join(dir, stateName))
	if err != nil {
		return nil, nil, err
	}
	return s.Console(), func() { s.Close() }, nil
}
