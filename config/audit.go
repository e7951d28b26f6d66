package config

import (
	"regexp"
	"strings"
	"time"

	"go.yaml.in/yaml/v4"
)

// The audit section: where the log is kept, whether it must be written
// before a call runs, and its signed checkpoints.

// Audit says where the audit log is kept: in SQLite (audit.db in the
// gateway's data directory unless SQLite names a file), or in PostgreSQL
// when Postgres is set.
type Audit struct {
	// Required makes a confirmed call fail closed when its record cannot be
	// written; true when absent.
	Required *bool `yaml:"required"`
	// AllowedCalls says when the answer to an allowed call (one no key had
	// to confirm) goes out: once its record is committed
	// (AllowedCallsCommitted, the default), or once it is queued for the
	// next commit (AllowedCallsQueued), which takes the append off the
	// call's path and lets a crash of the process lose the records still
	// queued.
	AllowedCalls string `yaml:"allowed_calls"`
	// SQLite is the database file; a relative path is taken from the
	// gateway's data directory.
	SQLite string `yaml:"sqlite"`
	// Postgres is a postgres:// URL; ${VAR} is read from the gateway's
	// environment at load.
	Postgres string `yaml:"postgres"`
	// Checkpoint signs the chain's head now and then, so that a rewrite of
	// the whole log is still found.
	Checkpoint *Checkpoint `yaml:"checkpoint"`
}

// IsRequired reports whether confirmed calls fail closed without a record.
func (a Audit) IsRequired() bool { return a.Required == nil || *a.Required }

// The values of audit.allowed_calls.
const (
	AllowedCallsCommitted = "committed"
	AllowedCallsQueued    = "queued"
)

// QueuesAllowed reports whether the answer to an allowed call goes out once
// its record is queued, not committed.
func (a Audit) QueuesAllowed() bool { return a.AllowedCalls == AllowedCallsQueued }

// Checkpoint configures signed checkpoints of the audit chain's head.
type Checkpoint struct {
	// KeyFile holds the Ed25519 private key, PEM-encoded PKCS #8 (as
	// `openssl genpkey -algorithm ed25519` writes it).
	KeyFile string `yaml:"key_file"`
	// Interval is how often the head is signed when it moved; 1m when
	// absent.
	Interval string `yaml:"interval"`
	// File, when set, also receives every checkpoint as a JSON line: a
	// copy outside the database, for another team to keep.
	File string `yaml:"file"`
	// Postgres and Table, when set, also append every checkpoint to that
	// table (columns seq, hash, time, key_id, signature), which may be
	// another team's; Table is interlock_checkpoints when absent. ${VAR}
	// expands in the URL.
	Postgres string `yaml:"postgres"`
	Table    string `yaml:"table"`

	Every time.Duration `yaml:"-"`
	Line  int           `yaml:"-"`
}

// DefaultCheckpointInterval is how often the audit chain's head is signed
// unless the config says otherwise.
const DefaultCheckpointInterval = time.Minute

// UnmarshalYAML records where the checkpoint section starts and rejects
// unknown fields.
func (c *Checkpoint) UnmarshalYAML(n *yaml.Node) error {
	type plain Checkpoint
	c.Line = n.Line
	return n.Load((*plain)(c), yaml.WithKnownFields())
}

// checkAudit checks the audit section and expands ${VAR} in its URL.
func checkAudit(f *File, keyLine lines, expand expander, add func(int, string, ...any)) {
	a := &f.Audit
	line := keyLine.At("audit.postgres", 0)
	if a.Postgres != "" {
		a.Postgres = expand(line, "audit.postgres", a.Postgres)
		if !strings.HasPrefix(a.Postgres, "postgres://") && !strings.HasPrefix(a.Postgres, "postgresql://") {
			add(line, "audit.postgres must be a postgres:// URL, such as postgres://interlock@db.internal:5432/audit")
		}
		if a.SQLite != "" {
			add(keyLine.At("audit.sqlite", 0), "audit: give sqlite or postgres, not both")
		}
	}
	if v := a.AllowedCalls; v != "" && v != AllowedCallsCommitted && v != AllowedCallsQueued {
		add(keyLine.At("audit.allowed_calls", 0), "audit.allowed_calls %q must be %s (the default) or %s", v, AllowedCallsCommitted, AllowedCallsQueued)
	}
	cp := a.Checkpoint
	if cp == nil {
		return
	}
	if cp.KeyFile == "" {
		add(cp.Line, "audit.checkpoint needs key_file: an Ed25519 private key in PEM (openssl genpkey -algorithm ed25519 -out audit.key)")
	}
	cp.Every = DefaultCheckpointInterval
	if cp.Interval != "" {
		d, err := time.ParseDuration(cp.Interval)
		if err != nil || d < time.Second || d > 24*time.Hour {
			add(keyLine.At("audit.checkpoint.interval", cp.Line), "audit.checkpoint.interval %q must be a duration between 1s and 24h, such as 1m", cp.Interval)
		}
		cp.Every = d
	}
	if cp.Postgres != "" {
		at := keyLine.At("audit.checkpoint.postgres", cp.Line)
		cp.Postgres = expand(at, "audit.checkpoint.postgres", cp.Postgres)
		if !strings.HasPrefix(cp.Postgres, "postgres://") && !strings.HasPrefix(cp.Postgres, "postgresql://") {
			add(at, "audit.checkpoint.postgres must be a postgres:// URL")
		}
		if cp.Table == "" {
			cp.Table = "interlock_checkpoints"
		}
	}
	if cp.Table != "" && !tableNameRE.MatchString(cp.Table) {
		add(keyLine.At("audit.checkpoint.table", cp.Line), "audit.checkpoint.table %q must be a table name (letters, digits, _; optionally schema.table)", cp.Table)
	}
}

var tableNameRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)?$`)
