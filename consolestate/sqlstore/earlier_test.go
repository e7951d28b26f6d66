package sqlstore_test

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/interlock-mcp/interlock/approval"
	"github.com/interlock-mcp/interlock/consolestate"
	"github.com/interlock-mcp/interlock/internal/testdb"
	"github.com/interlock-mcp/interlock/postgres"
	"github.com/interlock-mcp/interlock/sqlite"
)

// raw is a database reached apart from this package, as a gateway of an
// earlier version reached it.
type raw struct {
	exec func(query string, args ...any)
	// rows returns the rows of query, each its values joined by " ".
	rows func(query string, args ...any) []string
}

// stores are this version's stores on a database.
type stores struct {
	console   consolestate.Store
	approvals interface {
		approval.Store
		approval.GrantStore
	}
}

// earlier is a store as an earlier gateway wrote it: its tables and the
// statements it wrote rows with, copied from that gateway's code.
type earlier struct {
	name string
	// fresh makes an empty database.
	fresh func(t *testing.T) (raw, func() stores)
	// tables is the file of the statements that created the tables an
	// earlier gateway created.
	tables string
	// write writes o's rows as an earlier gateway did.
	write func(r raw, o olds)
	// columns lists the tables' columns and indexes.
	columns string
	// approvalAt counts the approvals of an id created and expiring at
	// times kept as they were.
	approvalAt string
	time       func(time.Time) any
}

// tablesSQL returns the statements that created e's tables.
func (e earlier) tablesSQL(t *testing.T) string {
	b, err := os.ReadFile(e.tables)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// olds are the rows an earlier gateway wrote: bodies as it encoded them.
type olds struct {
	session, passkey1, passkey2, link, approval, grant string
	now, created, expires                              time.Time
}

var owner = consolestate.Owner{Tenant: "acme", Principal: "alice"}

var earlierStores = []earlier{{
	name: "sqlite",
	fresh: func(t *testing.T) (raw, func() stores) {
		path := filepath.Join(t.TempDir(), "state.db")
		db, err := sql.Open("sqlite", path)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { db.Close() })
		r := raw{
			exec: func(query string, args ...any) {
				t.Helper()
				if _, err := db.Exec(query, args...); err != nil {
					t.Fatalf("%s: %v", query, err)
				}
			},
			rows: func(query string, args ...any) []string {
				t.Helper()
				rows, err := db.Query(query, args...)
				if err != nil {
					t.Fatalf("%s: %v", query, err)
				}
				defer rows.Close()
				cols, _ := rows.Columns()
				var out []string
				for rows.Next() {
					vals := make([]any, len(cols))
					ptrs := make([]any, len(cols))
					for i := range vals {
						ptrs[i] = &vals[i]
					}
					if err := rows.Scan(ptrs...); err != nil {
						t.Fatal(err)
					}
					out = append(out, strings.TrimSuffix(fmt.Sprintln(vals...), "\n"))
				}
				return out
			},
		}
		return r, func() stores {
			s, err := sqlite.OpenState(context.Background(), path)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { s.Close() })
			return stores{s.Console(), s.Approvals()}
		}
	},
	tables: "testdata/sqlite.sql",
	write: func(r raw, o olds) {
		r.exec("INSERT INTO console_sessions (key, body, last_seen) VALUES (?, ?, ?)", consolestate.Key("s1"), o.session, o.created.UnixNano())
		r.exec("UPDATE console_sessions SET flash = ? WHERE key = ?", []byte("hello"), consolestate.Key("s1"))
		r.exec("INSERT INTO console_passkey_users (owner, handle) VALUES (?, ?) ON CONFLICT (owner) DO NOTHING", owner.Key(), []byte("handle-1"))
		for _, p := range [][2]string{{"pk1", o.passkey1}, {"pk2", o.passkey2}} {
			r.exec(`INSERT INTO console_passkeys (owner, id, seq, rev, body)
			VALUES (?, ?, (SELECT coalesce(max(seq), 0) + 1 FROM console_passkeys), 1, ?) ON CONFLICT (owner, id) DO NOTHING`,
				owner.Key(), []byte(p[0]), p[1])
		}
		r.exec("INSERT INTO console_once (key, who, expires_at) VALUES (?, ?, ?)", consolestate.Key("l1"), o.link, o.expires.UnixNano())
		r.exec(`INSERT INTO approvals (id, key, created_at, expires_at, ends_at, body) VALUES (?, ?, ?, ?, ?, ?)
		ON CONFLICT (id) DO UPDATE SET ends_at = excluded.ends_at, body = excluded.body`,
			"apr_old", "k-old", o.created.UnixMilli(), o.expires.UnixMilli(), o.expires.UnixMilli(), o.approval)
		r.exec(`INSERT INTO grants (id, created_at, expires_at, body) VALUES (?, ?, ?, ?)
		ON CONFLICT (id) DO UPDATE SET body = excluded.body`,
			"grt_old", o.created.UnixMilli(), o.expires.UnixMilli(), o.grant)
	},
	columns: `SELECT m.tbl_name, m.type, m.name, m.sql LIKE '%WITHOUT ROWID', p.name, p.type, p."notnull", p.dflt_value, p.pk
		FROM sqlite_master m LEFT JOIN pragma_table_info(m.name) p
		WHERE m.tbl_name LIKE 'console_%' OR m.tbl_name IN ('approvals', 'grants') ORDER BY 1, 2, 3, p.cid`,
	approvalAt: "SELECT count(*) FROM approvals WHERE id = ? AND created_at = ? AND expires_at = ?",
	time:       func(t time.Time) any { return t.UnixMilli() },
}, {
	name: "postgres",
	fresh: func(t *testing.T) (raw, func() stores) {
		url := testdb.Schema(t, "interlock_earlier_")
		ctx := context.Background()
		conn, err := pgx.Connect(ctx, url)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close(ctx) })
		r := raw{
			exec: func(query string, args ...any) {
				t.Helper()
				if _, err := conn.Exec(ctx, query, args...); err != nil {
					t.Fatalf("%s: %v", query, err)
				}
			},
			rows: func(query string, args ...any) []string {
				t.Helper()
				rows, err := conn.Query(ctx, query, args...)
				if err != nil {
					t.Fatalf("%s: %v", query, err)
				}
				var out []string
				for rows.Next() {
					vals, err := rows.Values()
					if err != nil {
						t.Fatal(err)
					}
					out = append(out, strings.TrimSuffix(fmt.Sprintln(vals...), "\n"))
				}
				if err := rows.Err(); err != nil {
					t.Fatal(err)
				}
				return out
			},
		}
		return r, func() stores {
			s, err := postgres.OpenApprovals(ctx, url)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(s.Close)
			return stores{s.Console(), s}
		}
	},
	tables: "testdata/postgres.sql",
	write: func(r raw, o olds) {
		r.exec("INSERT INTO console_sessions (key, body, last_seen) VALUES ($1, $2, $3)", consolestate.Key("s1"), o.session, o.created.UnixNano())
		r.exec("UPDATE console_sessions SET flash = $1 WHERE key = $2", []byte("hello"), consolestate.Key("s1"))
		r.exec(`WITH made AS (
			INSERT INTO console_passkey_users (owner, handle) VALUES ($1, $2) ON CONFLICT (owner) DO NOTHING RETURNING handle)
		SELECT handle FROM made UNION ALL SELECT handle FROM console_passkey_users WHERE owner = $1 LIMIT 1`, owner.Key(), []byte("handle-1"))
		for _, p := range [][2]string{{"pk1", o.passkey1}, {"pk2", o.passkey2}} {
			r.exec("INSERT INTO console_passkeys (owner, id, rev, body) VALUES ($1, $2, 1, $3) ON CONFLICT (owner, id) DO NOTHING",
				owner.Key(), []byte(p[0]), p[1])
		}
		r.exec("INSERT INTO console_once (key, who, expires_at) VALUES ($1, $2, $3)", consolestate.Key("l1"), o.link, o.expires.UnixNano())
		r.exec(`INSERT INTO approvals (id, key, created_at, expires_at, body) VALUES ($1, $2, $3, $4, $5)
		ON CONFLICT (id) DO UPDATE SET body = excluded.body`, "apr_old", "k-old", o.created, o.expires, o.approval)
		r.exec(`INSERT INTO grants (id, expires_at, body) VALUES ($1, $2, $3)
		ON CONFLICT (id) DO UPDATE SET body = excluded.body`, "grt_old", o.expires, o.grant)
	},
	columns: `SELECT table_name, column_name, data_type, is_nullable, coalesce(column_default, '') FROM information_schema.columns
		WHERE table_schema = current_schema() AND (table_name LIKE 'console_%' OR table_name IN ('approvals', 'grants'))
		UNION ALL SELECT tablename, indexname, '', '', '' FROM pg_indexes
		WHERE schemaname = current_schema() AND (tablename LIKE 'console_%' OR tablename IN ('approvals', 'grants'))
		ORDER BY 1, 2`,
	approvalAt: "SELECT count(*) FROM approvals WHERE id = $1 AND created_at = $2 AND expires_at = $3",
	time:       func(t time.Time) any { return t },
}}

// TestReadsWhatEarlierGatewaysWrote: rows an earlier gateway wrote, with
// its own statements in its own tables, read the same through this
// package, in SQLite and in PostgreSQL; what this package writes beside
// them is kept as that gateway kept it; and the tables it makes in a
// fresh database are the ones that gateway made, once this package has
// opened them (which may add indexes and columns, and changes none).
func TestReadsWhatEarlierGatewaysWrote(t *testing.T) {
	for _, e := range earlierStores {
		t.Run(e.name, func(t *testing.T) {
			t.Run("rows", func(t *testing.T) { readsEarlierRows(t, e) })
			t.Run("tables", func(t *testing.T) {
				old, upgrade := e.fresh(t)
				old.exec(e.tablesSQL(t))
				upgrade()
				made, open := e.fresh(t)
				open()
				if got, want := made.rows(e.columns), old.rows(e.columns); !slices.Equal(got, want) {
					t.Errorf("tables made now:\n%s\nmade before:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
				}
			})
		})
	}
}

func readsEarlierRows(t *testing.T, e earlier) {
	ctx := context.Background()
	now := time.Now().Truncate(time.Second)
	o := olds{now: now, created: now.Add(-time.Minute), expires: now.Add(time.Hour)}
	at := func(t time.Time) string { return t.UTC().Format(time.RFC3339) }
	o.session = fmt.Sprintf(`{"who":{"Tenant":"acme","Principal":"alice","Groups":["ops"]},"credential":{"kind":"key","ref":"sha256:k1"},"csrf":"csrf-1","created":%q,"last_seen":%q}`,
		at(o.created), at(o.created))
	o.passkey1 = `{"id":"cGsx","rp_id":"example.com","origin":"https://example.com","credential":"e30=","rev":1}`
	o.passkey2 = `{"id":"cGsy","rp_id":"example.com","origin":"https://example.com","credential":"e30=","rev":1}`
	o.link = `{"Tenant":"acme","Principal":"bob","Groups":null}`
	o.approval = fmt.Sprintf(`{"id":"apr_old","key":"k-old","tenant":"acme","principal":"carol","tool":"drop_table","args":{"table":"users","note":"\u0000"},"summary":"drop users","approvers":["alice"],"quorum":1,"created_at":%q,"expires_at":%q}`,
		at(o.created), at(o.expires))
	o.grant = fmt.Sprintf(`{"id":"grt_old","tool":"drop_table","tenant":"acme","principal":"carol","approvers":["alice"],"granted_by":"alice","created_at":%q,"expires_at":%q,"uses":3,"used":1}`,
		at(o.created), at(o.expires))

	r, open := e.fresh(t)
	r.exec(e.tablesSQL(t))
	e.write(r, o)
	s := open()

	sessions, err := s.console.Sessions(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if sess := sessions[consolestate.Key("s1")]; sess.Who.Principal != "alice" || sess.CSRF != "csrf-1" || !sess.Created.Equal(o.created) {
		t.Errorf("the session reads %+v", sess)
	}
	sess, err := s.console.Session(ctx, consolestate.Key("s1"), now, time.Hour, true)
	if err != nil || sess.Credential.Ref != "sha256:k1" || !sess.LastSeen.Equal(now) {
		t.Errorf("touching the session: %+v, %v", sess, err)
	}
	if v, err := s.console.Take(ctx, consolestate.Key("s1"), consolestate.Flash); string(v) != "hello" || err != nil {
		t.Errorf("the flash reads %q, %v", v, err)
	}
	if h, err := s.console.PasskeyUser(ctx, owner, []byte("fresh")); string(h) != "handle-1" || err != nil {
		t.Errorf("the passkey user reads %q, %v", h, err)
	}
	keys, err := s.console.Passkeys(ctx, owner)
	if err != nil || len(keys) != 2 || string(keys[0].ID) != "pk1" || string(keys[1].ID) != "pk2" || keys[0].Rev != 1 || keys[0].RPID != "example.com" {
		t.Fatalf("the passkeys read %+v, %v", keys, err)
	}
	if ok, err := s.console.SwapPasskey(ctx, owner, keys[0]); !ok || err != nil {
		t.Errorf("swapping a passkey: %v, %v", ok, err)
	}
	if err := s.console.AddPasskey(ctx, owner, consolestate.Passkey{ID: []byte("pk3")}); err != nil {
		t.Fatal(err)
	}
	if keys, _ := s.console.Passkeys(ctx, owner); len(keys) != 3 || string(keys[2].ID) != "pk3" || keys[0].Rev != 2 {
		t.Errorf("after a swap and a third, the passkeys read %+v", keys)
	}
	if owners, err := s.console.PasskeyOwners(ctx); !slices.Equal(owners, []consolestate.Owner{owner}) || err != nil {
		t.Errorf("the passkey owners read %v, %v", owners, err)
	}
	if who, ok, err := s.console.SpendLink(ctx, consolestate.Key("l1"), now); !ok || who.Principal != "bob" || err != nil {
		t.Errorf("spending the link: %+v, %v, %v", who, ok, err)
	}

	a, err := s.approvals.Get(ctx, "apr_old")
	if err != nil || a.Tool != "drop_table" || a.Args["table"] != "users" || !a.ExpiresAt.Equal(o.expires) {
		t.Fatalf("the approval reads %+v, %v", a, err)
	}
	if pending, err := s.approvals.List(ctx); err != nil || len(pending) != 1 || pending[0].ID != "apr_old" {
		t.Errorf("the pending approvals read %+v, %v", pending, err)
	}
	if waiting, err := s.approvals.Waiting(ctx, "acme", "carol"); err != nil || len(waiting) != 1 || waiting[0].ID != "apr_old" {
		t.Errorf("carol's waiting approvals read %+v, %v", waiting, err)
	}
	// A request for the same binding finds the earlier approval live.
	again := &approval.Approval{ID: "apr_again", Key: "k-old", Tenant: "acme", Principal: "carol", Tool: "drop_table", Quorum: 1,
		Approvers: []string{"alice"}, CreatedAt: now, ExpiresAt: now.Add(time.Hour)}
	if got, err := s.approvals.Request(ctx, again); err != nil || got.ID != "apr_old" {
		t.Errorf("a request again answers %+v, %v", got, err)
	}
	if a, err := s.approvals.Decide(ctx, "apr_old", approval.Vote{Principal: "alice", Verdict: approval.Approve, At: time.Now()}); err != nil || a.State(time.Now()) != approval.Approved {
		t.Errorf("deciding: %+v, %v", a, err)
	}
	if ok, err := s.approvals.Consume(ctx, "apr_old"); !ok || err != nil {
		t.Errorf("consuming: %v, %v", ok, err)
	}
	fresh := &approval.Approval{ID: "apr_new", Key: "k-new", Tenant: "acme", Principal: "carol", Tool: "drop_table", Quorum: 1,
		Approvers: []string{"alice"}, CreatedAt: time.Now(), ExpiresAt: time.Now().Add(time.Hour)}
	if _, err := s.approvals.Request(ctx, fresh); err != nil {
		t.Fatal(err)
	}
	if n := r.rows(e.approvalAt, "apr_new", e.time(fresh.CreatedAt), e.time(fresh.ExpiresAt)); !slices.Equal(n, []string{"1"}) {
		t.Errorf("the approval written now is kept at other times (%v)", n)
	}

	g, err := s.approvals.Grant(ctx, "grt_old")
	if err != nil || g.Used != 1 || g.Uses != 3 || !g.ExpiresAt.Equal(o.expires) {
		t.Fatalf("the grant reads %+v, %v", g, err)
	}
	if live, err := s.approvals.LiveGrants(ctx); err != nil || len(live) != 1 || live[0].ID != "grt_old" {
		t.Errorf("the live grants read %+v, %v", live, err)
	}
	if ok, err := s.approvals.UseGrant(ctx, "grt_old"); !ok || err != nil {
		t.Errorf("using the grant: %v, %v", ok, err)
	}
}
