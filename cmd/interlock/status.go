package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/interlock-mcp/interlock/config"
	"github.com/interlock-mcp/interlock/postgres"
	"github.com/interlock-mcp/interlock/redis"
	"github.com/interlock-mcp/interlock/roster"
	"github.com/interlock-mcp/interlock/sqlite"
)

// stateName is the data directory's state file when no store is
// configured: approvals, grants, tokens, budgets, the console's state
// and the gateways' announcements.
const stateName = "state.db"

// openDataState opens the state file of the data directory dir for a
// command that reads what running gateways left there; it makes none
// where no gateway ever ran.
func openDataState(ctx context.Context, dir string) (*sqlite.State, error) {
	path := filepath.Join(dir, stateName)
	if _, err := os.Stat(path); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, nil
		}
		return nil, fmt.Errorf("reading the data directory's state: %w", err)
	}
	return sqlite.OpenState(ctx, path)
}

// openRoster opens where the gateways running f announce themselves, as
// interlock serve does: the store's PostgreSQL, else its Redis, else the
// state file of the data directory dir. nil, with no error, when dir has
// no state file, since no gateway ever ran there.
func openRoster(ctx context.Context, f *config.File, dir string) (roster.Store, func(), error) {
	switch {
	case f.Store.Postgres != "":
		s, err := postgres.OpenApprovals(ctx, f.Store.Postgres)
		if err != nil {
			return nil, nil, err
		}
		return s, s.Close, nil
	case f.Store.Redis != "":
		s, err := redis.Open(ctx, f.Store.Redis, f.Store.Prefix)
		if err != nil {
			return nil, nil, err
		}
		return s.Roster(), func() { s.Close() }, nil
	}
	state, err := openDataState(ctx, dir)
	if err != nil || state == nil {
		return nil, nil, err
	}
	return state.Approvals(), func() { state.Close() }, nil
}

// loadStore reads what a command that reaches the store of running
// gateways is given: their data directory, made absolute, and their
// configuration.
func loadStore(data, configFile string) (string, *config.File, error) {
	dir, err := filepath.Abs(data)
	if err != nil {
		return "", nil, err
	}
	f, err := loadConfig(configFile, "")
	return dir, f, err
}

// status lists the gateways that share the store, and says where their
// versions or configurations differ.
func status(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	flags := newFlags("status", stderr)
	data := flags.String("data", ".interlock", "data `directory` the gateways share (as given to interlock serve)")
	configFile := flags.String("config", "", "configuration `file` of the gateways, whose store (Redis or PostgreSQL) they share; without one, the data directory's")
	if err := parseFlags(flags, args); err != nil {
		return err
	}
	dir, f, err := loadStore(*data, *configFile)
	if err != nil {
		return err
	}
	where := "on the data directory " + dir
	noneRuns := fmt.Errorf("no gateway runs on the data directory %s: start interlock serve --data %s (or a client's interlock serve --stdio)", dir, *data)
	if f.Store.Postgres != "" || f.Store.Redis != "" {
		where = "on the store of " + *configFile
		noneRuns = fmt.Errorf("no gateway runs on the store %s names: start interlock serve --config %s", *configFile, *configFile)
	}
	gateways, closeRoster, err := openRoster(ctx, f, dir)
	if err != nil {
		return err
	}
	if gateways == nil {
		return noneRuns
	}
	defer closeRoster()
	gws, err := gateways.Gateways(ctx, consoleSeen)
	if err != nil {
		return err
	}
	if len(gws) == 0 {
		return noneRuns
	}
	slices.SortFunc(gws, func(a, b roster.Gateway) int { return cmp.Or(a.Since.Compare(b.Since), cmp.Compare(a.ID, b.ID)) })
	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "GATEWAY\tVERSION\tCONFIG\tCONSOLE\tSINCE\tLAST SEEN")
	for _, g := range gws {
		console := g.ConsoleURL
		if console == "" {
			console = "stdio"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s ago\n", g.ID, g.Version, roster.ShortDigest(g.ConfigDigest), console,
			g.Since.Local().Format(time.DateTime), time.Since(g.Seen).Round(time.Second))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	// What a gateway's configuration does not do as written weakens the
	// gate silently: each gateway's warnings, as its banner said them.
	for _, g := range gws {
		for _, w := range g.Warnings {
			fmt.Fprintf(stdout, "warning (%s): %s\n", g.ID, w)
		}
	}
	drift := roster.Drift(gws)
	if drift == "" {
		agree := "1 gateway"
		if len(gws) > 1 {
			agree = fmt.Sprintf("%d gateways agree", len(gws))
		}
		fmt.Fprintf(stdout, "%s: version %s, config %s\n", agree, gws[0].Version, roster.ShortDigest(gws[0].ConfigDigest))
		return nil
	}
	for part := range strings.SplitSeq(drift, "; ") {
		fmt.Fprintln(stdout, part)
	}
	return fmt.Errorf("the gateways %s differ: restart the older ones, or reload them with the same configuration (SIGHUP)", where)
}
