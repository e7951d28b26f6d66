package config

import (
	"strings"
)

// The store section: where tokens, budgets, approvals and the console's
// state are shared (Redis, PostgreSQL), beside the data directory.

// Store says where live confirm tokens are kept: in the gateway's memory
// when Redis is empty, or in Redis, shared by every gateway that uses the
// same server, prefix and INTERLOCK_SECRET.
type Store struct {
	// Redis is a redis:// or rediss:// URL; ${VAR} in it is read from the
	// gateway's environment at load, so a password need not be in the file.
	Redis string `yaml:"redis"`
	// Prefix starts every key interlock writes; "interlock:" when absent.
	Prefix string `yaml:"prefix"`
	// Postgres, a postgres:// URL, keeps approvals and standing grants in
	// PostgreSQL instead (tokens stay in Redis or memory); ${VAR} expands.
	Postgres string `yaml:"postgres"`
}

// checkStore checks the store section and expands ${VAR} in its URLs.
func checkStore(f *File, keyLine lines, expand expander, add func(int, string, ...any)) {
	f.Store.Redis = expand(keyLine.At("store.redis", 0), "store.redis", f.Store.Redis)
	if f.Store.Postgres != "" {
		at := keyLine.At("store.postgres", 0)
		f.Store.Postgres = expand(at, "store.postgres", f.Store.Postgres)
		if !strings.HasPrefix(f.Store.Postgres, "postgres://") && !strings.HasPrefix(f.Store.Postgres, "postgresql://") {
			add(at, "store.postgres must be a postgres:// URL")
		}
	}

	if f.Store.Redis != "" && !strings.HasPrefix(f.Store.Redis, "redis://") && !strings.HasPrefix(f.Store.Redis, "rediss://") {
		add(keyLine.At("store.redis", 0), "store.redis must be a redis:// or rediss:// URL, such as redis://127.0.0.1:6379/0")
	}
	if f.Store.Prefix == "" {
		f.Store.Prefix = "interlock:"
	}
}
