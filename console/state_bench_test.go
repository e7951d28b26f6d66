package console

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/interlock-mcp/interlock"
	"github.com/interlock-mcp/interlock/approval"
	"github.com/interlock-mcp/interlock/consolestate"
	"github.com/interlock-mcp/interlock/internal/testdb"
	"github.com/interlock-mcp/interlock/policy"
	"github.com/interlock-mcp/interlock/postgres"
	"github.com/interlock-mcp/interlock/redis"
	"github.com/interlock-mcp/interlock/sqlite"
)

// BenchmarkSignedInPage is the cost of one signed-in console page (the
// pending list, two approvals on it, kept in memory) on each store of the
// console's state: the session read and touched, the flash taken.
func BenchmarkSignedInPage(b *testing.B) {
	ctx := context.Background()
	stores := []struct {
		name string
		open func(b *testing.B) consolestate.Store
	}{
		{"memory", func(*testing.B) consolestate.Store { return consolestate.NewMemory() }},
		{"sqlite", func(b *testing.B) consolestate.Store {
			st, err := sqlite.OpenState(ctx, filepath.Join(b.TempDir(), "state.db"))
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { st.Close() })
			return st.Console()
		}},
		{"redis", func(b *testing.B) consolestate.Store {
			s, err := redis.Open(ctx, "redis://127.0.0.1:6379/0", fmt.Sprintf("interlock-bench:%d:", time.Now().UnixNano()))
			if err != nil {
				b.Fatalf("Redis must be running at 127.0.0.1:6379: %v", err)
			}
			b.Cleanup(func() { s.Close() })
			return s.Console()
		}},
		{"postgres", func(b *testing.B) consolestate.Store {
			s, err := postgres.OpenApprovals(ctx, testdb.Schema(b, "interlock_bench_"))
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(s.Close)
			return s.Console()
		}},
	}
	for _, st := range stores {
		b.Run(st.name, func(b *testing.B) {
			approvals := approval.NewMemory()
			for _, id := range []string{"apr_1", "apr_2"} {
				if _, err := approvals.Request(ctx, refund(id, 1)); err != nil {
					b.Fatal(err)
				}
			}
			c := New(Options{Approvals: interlock.NewApprovalService(interlock.ApprovalOptions{Store: approvals,
				CompileCondition: policy.CompileCondition, Logger: quiet}), Logger: quiet, State: st.open(b),
				Authenticate: func(_ context.Context, key string) (interlock.Identity, Credential, error) {
					if who, ok := keys[key]; ok {
						return who, Credential{Kind: CredentialKey, Ref: key}, nil
					}
					return interlock.Identity{}, Credential{}, errors.New("unknown key")
				}})
			b.Cleanup(c.Close)
			id, err := c.openSession(ctx, keys["key-bob"], Credential{Kind: CredentialKey, Ref: "key-bob"})
			if err != nil {
				b.Fatal(err)
			}
			h := c.Handler()
			b.ResetTimer()
			for b.Loop() {
				req := httptest.NewRequest(http.MethodGet, "/console/", nil)
				req.AddCookie(&http.Cookie{Name: sessionCookie, Value: id})
				w := httptest.NewRecorder()
				h.ServeHTTP(w, req)
				if w.Code != http.StatusOK || !strings.Contains(w.Body.String(), "apr_2") {
					b.Fatalf("status %d", w.Code)
				}
			}
		})
	}
}
