package sqlite

import (
	"context"
	"database/sql"
	"path/filepath"
	"testing"
	"time"

	"github.com/interlock-mcp/interlock/consolestate"
)

// TestOperatorLinksOfEarlierVersionsMove: a file whose console_links
// table, of earlier versions, holds a live and an expired link opens with
// the live one among the console's one-time links, signing the local
// operator in once, the expired one gone, and the old table dropped.
func TestOperatorLinksOfEarlierVersionsMove(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "state.db")
	old, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	for _, stmt := range []struct {
		sql  string
		args []any
	}{
		{"CREATE TABLE console_links (hash TEXT PRIMARY KEY, expires_at INTEGER NOT NULL) WITHOUT ROWID", nil},
		{"INSERT INTO console_links VALUES (?, ?), (?, ?)", []any{consolestate.Key("live"), now.Add(10 * time.Minute).UnixNano(),
			consolestate.Key("expired"), now.Add(-time.Minute).UnixNano()}},
	} {
		if _, err := old.ExecContext(ctx, stmt.sql, stmt.args...); err != nil {
			t.Fatal(err)
		}
	}
	old.Close()

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
