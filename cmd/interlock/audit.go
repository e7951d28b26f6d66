package main

import (
	"context"
	"crypto/ed25519"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"
	"unicode"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/interlock-mcp/interlock/audit"
	"github.com/interlock-mcp/interlock/config"
	"github.com/interlock-mcp/interlock/postgres"
	"github.com/interlock-mcp/interlock/sqlite"
)

// auditStore is what a backing store of the audit log offers.
type auditStore interface {
	audit.Log
	audit.Reader
	audit.CheckpointStore
	Head(ctx context.Context) (int64, string, error)
	Close() error
}

// openAudit opens the audit log the configuration names: PostgreSQL, or
// SQLite in the data directory.
func openAudit(ctx context.Context, f *config.File, dataDir string) (auditStore, string, error) {
	if f.Audit.Postgres != "" {
		a, err := postgres.OpenAudit(ctx, f.Audit.Postgres)
		if err != nil {
			return nil, "", err
		}
		return a, "postgres " + redactURL(f.Audit.Postgres), nil
	}
	path := sqlitePath(f, dataDir)
	a, err := sqlite.OpenAudit(ctx, path)
	if err != nil {
		return nil, "", err
	}
	return a, "sqlite " + path, nil
}

// openAuditToRead loads the config (the built-in one when config is
// empty) and opens the audit log it names, in the data directory data,
// which must exist already: reading must not create an empty log where
// there was none.
func openAuditToRead(ctx context.Context, configFile, data string) (*config.File, auditStore, string, error) {
	dataDir, f, err := loadStore(data, configFile)
	if err != nil {
		return nil, nil, "", err
	}
	if f.Audit.Postgres == "" {
		if path := sqlitePath(f, dataDir); !fileExists(path) {
			return nil, nil, "", fmt.Errorf("no audit log at %s: give --data (the gateway's data directory) or --config", path)
		}
	}
	store, where, err := openAudit(ctx, f, dataDir)
	return f, store, where, err
}

// sqlitePath is where the SQLite audit log is: audit.db, or the
// configured file, in the data directory unless absolute.
func sqlitePath(f *config.File, dataDir string) string {
	path := f.Audit.SQLite
	if path == "" {
		path = "audit.db"
	}
	if !filepath.IsAbs(path) {
		path = filepath.Join(dataDir, path)
	}
	return path
}

func fileExists(name string) bool {
	_, err := os.Stat(name)
	return err == nil
}

// readPEM reads the first PEM block of the file name, the what of its
// errors; notPEM says how to make one.
func readPEM(name, what, notPEM string) (*pem.Block, error) {
	b, err := os.ReadFile(name)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	block, _ := pem.Decode(b)
	if block == nil {
		return nil, fmt.Errorf("%s %s: not PEM%s", what, name, notPEM)
	}
	return block, nil
}

// ed25519Key is the key parsed from the file name, when parsing did not
// fail and it is the Ed25519 key K.
func ed25519Key[K ed25519.PrivateKey | ed25519.PublicKey](name, what string, parsed any, err error) (K, error) {
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", what, name, err)
	}
	key, ok := parsed.(K)
	if !ok {
		return nil, fmt.Errorf("%s %s: a %T, not an Ed25519 key", what, name, parsed)
	}
	return key, nil
}

// readKeyFile reads an Ed25519 private key in PEM (PKCS #8).
func readKeyFile(name string) (ed25519.PrivateKey, error) {
	block, err := readPEM(name, "audit checkpoint key", "; make one with: openssl genpkey -algorithm ed25519 -out "+name)
	if err != nil {
		return nil, err
	}
	k, err := x509.ParsePKCS8PrivateKey(block.Bytes)
	return ed25519Key[ed25519.PrivateKey](name, "audit checkpoint key", k, err)
}

// readPublicKey reads an Ed25519 public key in PEM (PKIX), or takes it from
// a private key file.
func readPublicKey(name string) (ed25519.PublicKey, error) {
	block, err := readPEM(name, "public key", " (openssl pkey -in audit.key -pubout writes one)")
	if err != nil {
		return nil, err
	}
	if block.Type == "PRIVATE KEY" {
		key, err := readKeyFile(name)
		if err != nil {
			return nil, err
		}
		return key.Public().(ed25519.PublicKey), nil
	}
	k, err := x509.ParsePKIXPublicKey(block.Bytes)
	return ed25519Key[ed25519.PublicKey](name, "public key", k, err)
}

// fileSink appends checkpoints to a file as JSON lines.
func fileSink(name string) func(audit.Checkpoint) error {
	return func(cp audit.Checkpoint) error {
		f, err := os.OpenFile(name, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
		if err != nil {
			return err
		}
		b, _ := json.Marshal(cp)
		_, err = f.Write(append(b, '\n'))
		return errors.Join(err, f.Sync(), f.Close())
	}
}

// tableSink appends checkpoints to a PostgreSQL table another team may own
// (columns seq, hash, time, key_id, signature; created when missing).
func tableSink(ctx context.Context, url, table string) (func(audit.Checkpoint) error, func(), error) {
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		return nil, nil, fmt.Errorf("checkpoint table: %w", err)
	}
	_, err = pool.Exec(ctx, "CREATE TABLE IF NOT EXISTS "+table+" (seq bigint NOT NULL, hash text NOT NULL, time text NOT NULL, key_id text NOT NULL, signature text NOT NULL)")
	if err != nil {
		pool.Close()
		return nil, nil, fmt.Errorf("checkpoint table %s: %w", table, err)
	}
	appendStmt, _ := audit.PostgreSQL.CheckpointsIn(table)
	return func(cp audit.Checkpoint) error {
		_, err := pool.Exec(context.Background(), appendStmt, audit.CheckpointArgs(cp)...)
		return err
	}, pool.Close, nil
}

// readTableSink reads the checkpoints a table sink holds.
func readTableSink(ctx context.Context, url, table string) ([]audit.Checkpoint, error) {
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		return nil, err
	}
	defer pool.Close()
	_, read := audit.PostgreSQL.CheckpointsIn(table)
	rows, err := pool.Query(ctx, read)
	if err != nil {
		return nil, fmt.Errorf("checkpoint table %s: %w", table, err)
	}
	defer rows.Close()
	cps, err := audit.ScanCheckpoints(rows)
	if err != nil {
		return nil, fmt.Errorf("checkpoint table %s: %w", table, err)
	}
	return cps, nil
}

// sinks joins the checkpoint sinks the config names into one.
func sinks(ctx context.Context, cp *config.Checkpoint) (func(audit.Checkpoint) error, func(), error) {
	var all []func(audit.Checkpoint) error
	closeAll := func() {}
	if cp.File != "" {
		all = append(all, fileSink(cp.File))
	}
	if cp.Postgres != "" {
		sink, closeSink, err := tableSink(ctx, cp.Postgres, cp.Table)
		if err != nil {
			return nil, nil, err
		}
		all, closeAll = append(all, sink), closeSink
	}
	if len(all) == 0 {
		return nil, closeAll, nil
	}
	return func(c audit.Checkpoint) error {
		var errs []error
		for _, s := range all {
			errs = append(errs, s(c))
		}
		return errors.Join(errs...)
	}, closeAll, nil
}

// readSink reads the checkpoints a file sink holds.
func readSink(name string) ([]audit.Checkpoint, error) {
	b, err := os.ReadFile(name)
	if err != nil {
		return nil, err
	}
	var out []audit.Checkpoint
	for i, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		if line == "" {
			continue
		}
		var cp audit.Checkpoint
		if err := json.Unmarshal([]byte(line), &cp); err != nil {
			return nil, fmt.Errorf("%s:%d: %w", name, i+1, err)
		}
		out = append(out, cp)
	}
	return out, nil
}

const auditUsage = `Usage:
  interlock audit verify [--data DIR | --config FILE] [--checkpoints] [--public-key FILE]
  interlock audit tail   [--data DIR | --config FILE] [-n N] [-f] [--json]
  interlock audit export [--data DIR | --config FILE] [--since TIME]
`

// runAudit runs the audit subcommands.
func runAudit(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprint(stderr, auditUsage)
		return errUsage
	}
	sub, args := args[0], args[1:]
	if isHelp(sub) {
		// Asked for, so it goes to standard output and is no failure.
		fmt.Fprint(stdout, auditUsage)
		return errHelp
	}
	fs := newFlags("audit "+sub, stderr)
	configFile := fs.String("config", "", "configuration `file` whose audit section names the log (default: the built-in config)")
	data := fs.String("data", ".interlock", "data `directory` holding audit.db")
	var (
		checkpoints *bool
		publicKey   *string
		n           *int
		follow      *bool
		asJSON      *bool
		since       *string
	)
	switch sub {
	case "verify":
		checkpoints = fs.Bool("checkpoints", false, "also check the signed checkpoints (from the log and the configured checkpoint file)")
		publicKey = fs.String("public-key", "", "Ed25519 public `key` (PEM) to check checkpoints with; default: the configured key_file")
	case "tail":
		n = fs.Int("n", 10, "how many of the last records to print")
		follow = fs.Bool("f", false, "keep printing records as they are written")
		asJSON = fs.Bool("json", false, "print each record as one JSON line")
	case "export":
		since = fs.String("since", "", "only records at or after this `time` (RFC 3339, such as 2026-11-23T00:00:00Z)")
	default:
		fmt.Fprintf(stderr, "interlock audit: unknown subcommand %q\n\n%s", sub, auditUsage)
		return errUsage
	}
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	f, store, where, err := openAuditToRead(ctx, *configFile, *data)
	if err != nil {
		return err
	}
	defer store.Close()
	switch sub {
	case "verify":
		return verifyAudit(ctx, store, where, f, *checkpoints, *publicKey, stdout)
	case "tail":
		return tailAudit(ctx, store, *n, *follow, *asJSON, stdout)
	default:
		return exportAudit(ctx, store, *since, stdout)
	}
}

func verifyAudit(ctx context.Context, store auditStore, where string, f *config.File, checkpoints bool, publicKey string, stdout io.Writer) error {
	hashes := map[int64]string{}
	records := func(yield func(*audit.Record, error) bool) {
		for r, err := range store.Records(ctx, 1) {
			if r != nil && checkpoints {
				hashes[r.Seq] = r.Hash
			}
			if !yield(r, err) {
				return
			}
		}
	}
	n, err := audit.Verify(records)
	if err != nil {
		return fmt.Errorf("%s: %w (the %d records before it verify)", where, err, n)
	}
	if !checkpoints {
		fmt.Fprintf(stdout, "ok: %d records (%s)\n", n, where)
		return nil
	}
	keyFile := publicKey
	if keyFile == "" && f.Audit.Checkpoint != nil {
		keyFile = f.Audit.Checkpoint.KeyFile
	}
	if keyFile == "" {
		return errors.New("--checkpoints needs the public key: give --public-key FILE or a config with audit.checkpoint.key_file")
	}
	pub, err := readPublicKey(keyFile)
	if err != nil {
		return err
	}
	cps, err := store.Checkpoints(ctx)
	if err != nil {
		return err
	}
	if cp := f.Audit.Checkpoint; cp != nil && cp.File != "" {
		more, err := readSink(cp.File)
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
		cps = append(cps, more...)
	}
	if cp := f.Audit.Checkpoint; cp != nil && cp.Postgres != "" {
		more, err := readTableSink(ctx, cp.Postgres, cp.Table)
		if err != nil {
			return err
		}
		cps = append(cps, more...)
	}
	if len(cps) == 0 {
		return fmt.Errorf("%s: no checkpoints to check: %d records verify as a chain, but nothing signed proves it was not rewritten", where, n)
	}
	if err := audit.CheckCheckpoints(cps, pub, hashes); err != nil {
		return fmt.Errorf("%s: %w", where, err)
	}
	fmt.Fprintf(stdout, "ok: %d records, %d checkpoints signed by key %s (%s)\n", n, len(cps), audit.KeyID(pub), where)
	return nil
}

func printRecord(w io.Writer, r *audit.Record, asJSON bool) {
	if asJSON {
		b, _ := r.Encode()
		fmt.Fprintf(w, "%s\n", b)
		return
	}
	line := fmt.Sprintf("%6d %s %-8s %-18s %s", r.Seq, r.Time.UTC().Format("2006-01-02T15:04:05.000Z"), r.Event, who(r), r.Tool)
	for _, kv := range [][2]string{{"rule", r.Rule}, {"mode", r.Mode}, {"decision", r.Decision}, {"by", r.ConfirmedBy}, {"outcome", r.Outcome}, {"detail", r.Detail}} {
		if kv[1] != "" {
			line += " " + kv[0] + "=" + kv[1]
		}
	}
	fmt.Fprintln(w, terminalText(line))
}

// terminalText escapes what a terminal would act on instead of showing:
// control characters, since an escape sequence can rewrite the screen,
// and the marks that reorder or break lines. A record's text came from
// outside: a refused request's path is anyone's to choose.
func terminalText(s string) string {
	if !strings.ContainsFunc(s, actsOnTerminal) {
		return s
	}
	var b strings.Builder
	for _, r := range s {
		switch {
		case !actsOnTerminal(r):
			b.WriteRune(r)
		case r <= 0xff:
			fmt.Fprintf(&b, `\x%02x`, r)
		default:
			fmt.Fprintf(&b, `\u%04x`, r)
		}
	}
	return b.String()
}

func actsOnTerminal(r rune) bool {
	return unicode.IsControl(r) || unicode.Is(unicode.Bidi_Control, r) || r == '\u2028' || r == '\u2029'
}

func tailAudit(ctx context.Context, store auditStore, n int, follow, asJSON bool, stdout io.Writer) error {
	head, _, err := store.Head(ctx)
	if err != nil {
		return err
	}
	next := max(head-int64(n)+1, 1)
	for {
		for r, err := range store.Records(ctx, next) {
			if err != nil {
				return err
			}
			printRecord(stdout, r, asJSON)
			next = r.Seq + 1
		}
		if !follow {
			return nil
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(500 * time.Millisecond):
		}
	}
}

func exportAudit(ctx context.Context, store auditStore, since string, stdout io.Writer) error {
	from, err := parseSince(since)
	if err != nil {
		return err
	}
	for r, err := range store.Records(ctx, 1) {
		if err != nil {
			return err
		}
		if !r.Time.Before(from) {
			printRecord(stdout, r, true)
		}
	}
	return nil
}

// parseSince reads a --since flag; the zero time when it is empty.
func parseSince(since string) (time.Time, error) {
	if since == "" {
		return time.Time{}, nil
	}
	t, err := time.Parse(time.RFC3339, since)
	if err != nil {
		return time.Time{}, fmt.Errorf("--since %q: use RFC 3339, such as 2026-11-23T00:00:00Z", since)
	}
	return t, nil
}
