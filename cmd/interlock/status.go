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

// status lists the gateways that share the data directory's state, and
// says where their versions or configurations differ.
func status(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	flags := newFlags("status", stderr)
	data := flags.String("data", ".interlock", "data `directory` the gateways share (as given to interlock serve)")
	if err := parseFlags(flags, args); err != nil {
		return err
	}
	dir, err := filepath.Abs(*data)
	if err != nil {
		return err
	}
	noneRuns := fmt.Errorf("no gateway runs on the data directory %s: start interlock serve --data %s (or a client's interlock serve --stdio)", dir, *data)
	state, err := openDataState(ctx, dir)
	if err != nil {
		return err
	}
	if state == nil {
		return noneRuns
	}
	defer state.Close()
	gws, err := state.Approvals().Gateways(ctx, consoleSeen)
	if err != nil {
		return err
	}
	if len(gws) == 0 {
		return noneRuns
	}
	slices.SortFunc(gws, func(a, b sqlite.Gateway) int { return cmp.Or(a.Since.Compare(b.Since), cmp.Compare(a.ID, b.ID)) })
	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "GATEWAY\tVERSION\tCONFIG\tCONSOLE\tSINCE\tLAST SEEN")
	for _, g := range gws {
		console := g.ConsoleURL
		if console == "" {
			console = "stdio"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s ago\n", g.ID, g.Version, shortDigest(g.ConfigDigest), console,
			g.Since.Local().Format(time.DateTime), time.Since(g.Seen).Round(time.Second))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	versions := differing(gws, func(g sqlite.Gateway) string { return g.Version })
	digests := differing(gws, func(g sqlite.Gateway) string { return shortDigest(g.ConfigDigest) })
	if versions == "" && digests == "" {
		agree := "1 gateway"
		if len(gws) > 1 {
			agree = fmt.Sprintf("%d gateways agree", len(gws))
		}
		fmt.Fprintf(stdout, "%s: version %s, config %s\n", agree, gws[0].Version, shortDigest(gws[0].ConfigDigest))
		return nil
	}
	if versions != "" {
		fmt.Fprintf(stdout, "versions differ: %s\n", versions)
	}
	if digests != "" {
		fmt.Fprintf(stdout, "config digests differ: %s\n", digests)
	}
	return errors.New("the gateways on this data directory differ: restart the older ones, or reload them with the same configuration (SIGHUP)")
}

// differing lists each value of gws (as of says) with the gateways that
// have it, or returns "" when they all have one.
func differing(gws []sqlite.Gateway, of func(sqlite.Gateway) string) string {
	var values []string
	ids := map[string][]string{}
	for _, g := range gws {
		v := of(g)
		if _, ok := ids[v]; !ok {
			values = append(values, v)
		}
		ids[v] = append(ids[v], g.ID)
	}
	if len(values) < 2 {
		return ""
	}
	parts := make([]string, len(values))
	for i, v := range values {
		parts[i] = fmt.Sprintf("%s (%s)", v, strings.Join(ids[v], ", "))
	}
	return strings.Join(parts, ", ")
}

// shortDigest shows a configuration's digest (see versionOf) by the first
// twelve hex digits of each SHA-256 in it; "unknown" for a gateway of a
// version that did not record it.
func shortDigest(d string) string {
	if d == "" {
		return "unknown"
	}
	parts := strings.Split(d, "+")
	for i, p := range parts {
		if len(p) > 12 {
			parts[i] = p[:12]
		}
	}
	return strings.Join(parts, "+")
}
