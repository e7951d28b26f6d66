package main

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"

	"github.com/modelcontextprotocol/go-sdk/mcp"

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

// check validates a configuration file without starting anything.
func check(args []string, stdout, stderr io.Writer) error {
	fs := newFlags("check", stderr)
	config := fs.String("config", "", "configuration `file` (default: the built-in config)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	f, err := loadConfig(*config, "")
	if errs, ok := err.(policy.LoadErrors); ok {
		for _, e := range errs {
			fmt.Fprintln(stderr, e)
		}
		return fmt.Errorf("%d problem(s) found", len(errs))
	}
	if err != nil {
		return err
	}
	// A command missing here may exist where the gateway runs, so this is
	// a warning, not an error.
	if *config != "" {
		for _, u := range f.Upstreams {
			if _, err := exec.LookPath(u.Command[0]); err != nil {
				fmt.Fprintf(stderr, "%s:%d: warning: upstream %q: %s is not an executable on this machine's PATH\n", f.Path, u.Line, u.Name, u.Command[0])
			}
		}
	}
	fmt.Fprintf(stdout, "%s: ok (%d upstreams, %d rules, %d API keys)\n", f.Path, len(f.Upstreams), len(f.Rules), len(f.Auth.Keys))
	return nil
}

// makeKey makes a random API key. The key goes to standard error, for the
// person who runs the command to hand over; only the config lines that
// accept it (its hash) go to standard output, so that
// `interlock key >> config.yaml` never stores the key itself.
func makeKey(args []string, stdout, stderr io.Writer) error {
	fs := newFlags("key", stderr)
	principal := fs.String("principal", "agent", "`name` of who will use the key")
	tenant := fs.String("tenant", policy.DefaultTenant, "the `tenant` the key acts for")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	key := "ilk_" + randomText()
	fmt.Fprintf(stderr, "API key for %s (shown once; interlock stores only its hash). Clients send it as\n"+
		"  Authorization: Bearer %s\n", *principal, key)
	fmt.Fprintf(stdout, "auth:\n  keys:\n    - sha256: %s\n      principal: %s\n      tenant: %s\n", gateway.HashKey(key), *principal, *tenant)
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
