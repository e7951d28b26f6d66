package sqlite

import (
	"context"
	"database/sql"
	"path/filepath"
	"testing"
	"time"

	"github.com/interlock-mcp/interlock/consolestate"
)

// statement is one SQL statement with its arguments.
type statement struct {
	sql  string
	args []any
}

// earlierFile makes a file as an earlier version left it: the statements
// run, in order, on a new file, whose path it returns.
func earlierFile(t *testing.T, stmts ...statement) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "state.db")
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	for _, stmt := range stmts {
		if _, err := db.ExecContext(context.Background(), stmt.sql, stmt.args...); err != nil {
			t.Fatal(err)
		}
	}
	return path
}

// TestOperatorLinksOfEarlierVersionsMove: a file whose console_links
// table, of earlier versions, holds a live and an expired link opens with
// the live one among the console's one-time links, signing the local
// operator in once, the expired one gone, and the old table dropped.
func TestOperatorLinksOfEarlierVersionsMove(t *testing.T) {
	ctx := context.Background()
	now := time.Now()
	path := earlierFile(t,
		statement{"CREATE TABLE console_links (hash TEXT PRIMARY KEY, expires_at INTEGER NOT NULL) WITHOUT ROWID", nil},
		statement{"INSERT INTO console_links VALUES (?, ?), (?, ?)", []any{consolestate.Key("live"), now.Add(10 * time.Minute).UnixNano(),
			consolestate.Key("expired"), now.Add(-time.Minute).UnixNano()}})

	st, err := OpenState(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	var tables int
	if err := st.h.db.QueryRowContext(ctx, "SELECT count(*) FROM sqlite_master WHERE name = 'console_links'").Scan(&tables); err != nil || tables != 0 {
		t.Errorf("console_links is still there (%d, %v)", tables, err)
	}
	tests := []struct {
		name, token string
		ok          bool
	}{
		{"the live link", "live", true},
		{"the live link again", "live", false},
		{"the expired link", "expired", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			who, ok, err := st.Console().SpendLink(ctx, consolestate.Key(tt.token), time.Now())
			if err != nil || ok != tt.ok || (ok && (who.Principal != "operator" || who.Tenant != "local")) {
				t.Errorf("SpendLink: %+v %v %v, want ok=%v for the operator", who, ok, err, tt.ok)
			}
		})
	}
	// A file opened again, with no old table, opens as well.
	again, err := OpenState(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	again.Close()
}
