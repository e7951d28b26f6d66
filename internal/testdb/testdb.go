// Package testdb gives a test or benchmark a PostgreSQL schema of its own
// on the shared test server (127.0.0.1:5432, database test), so that runs
// at once, of one package or several, never see each other's tables; and
// a test a Redis server of its own, which it may kill and start again.
package testdb

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"testing"

	"github.com/jackc/pgx/v5"
)

// Postgres is the test server's URL, without a schema.
const Postgres = "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"

// Schema makes a fresh schema, named prefix and random hex, on the test
// server, drops it when tb ends, and returns a URL that uses it.
func Schema(tb testing.TB, prefix string) string {
	tb.Helper()
	ctx := context.Background()
	b := make([]byte, 6)
	rand.Read(b)
	name := prefix + hex.EncodeToString(b)
	conn, err := pgx.Connect(ctx, Postgres)
	if err != nil {
		tb.Fatalf("PostgreSQL must be running at 127.0.0.1:5432: %v", err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "CREATE SCHEMA "+name); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		if c, err := pgx.Connect(ctx, Postgres); err == nil {
			c.Exec(ctx, "DROP SCHEMA "+name+" CASCADE")
			c.Close(ctx)
		}
	})
	return Postgres + "&search_path=" + name
}
