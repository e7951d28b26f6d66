package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/interlock-mcp/interlock"
	"github.com/interlock-mcp/interlock/approval"
	"github.com/interlock-mcp/interlock/storetest"
	"github.com/interlock-mcp/interlock/task"
	"github.com/interlock-mcp/interlock/task/tasktest"
)

// opened is what open opens at path, closed when the test ends.
func opened[S io.Closer](t testing.TB, open func(context.Context, string) (S, error), path string) S {
	s, err := open(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Error(err)
		}
	})
	return s
}

func openState(t testing.TB, path string) *State { return opened(t, OpenState, path) }

// column reads the one column of query's rows, as text.
func column(t *testing.T, db *sql.DB, query string) []string {
	t.Helper()
	rows, err := db.QueryContext(context.Background(), query)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var values []string
	for rows.Next() {
		var v string
		if err := rows.Scan(&v); err != nil {
			t.Fatal(err)
		}
		values = append(values, v)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return values
}

// TestStateSharesOneFile opens the state file of a data directory whose
// approvals a process opened alone: the approvals are shared, the tokens
// and budgets work beside them, and once the state is closed none of its
// stores changes anything.
func TestStateSharesOneFile(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "state.db")
	alone := openApprovals(t, path)
	st, err := OpenState(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	a := &approval.Approval{ID: "apr_1", Key: "k1", Tenant: "acme", Principal: "alice", Tool: "refund_invoice",
		Approvers: []string{"bob"}, Quorum: 1, CreatedAt: now, ExpiresAt: now.Add(time.Minute)}
	if _, err := alone.Request(ctx, a); err != nil {
		t.Fatal(err)
	}
	if list, err := st.Approvals().List(ctx); err != nil || len(list) != 1 || list[0].ID != a.ID {
		t.Errorf("the state lists %v %v", list, err)
	}
	if err := st.Tokens().Issue(ctx, "b", "n", time.Minute); err != nil {
		t.Fatal(err)
	}
	if ok, err := st.Tokens().Consume(ctx, "b", "n"); !ok || err != nil {
		t.Errorf("Consume = %v, %v", ok, err)
	}
	if ok, _, _, err := st.Budgets().Take(ctx, one("k", 1, time.Hour)); !ok || err != nil {
		t.Errorf("Take = %v, %v", ok, err)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	if err := st.Tokens().Issue(ctx, "b", "n2", time.Minute); err == nil {
		t.Error("a closed state issued a token")
	}
	if ok, _, _, err := st.Budgets().Take(ctx, one("k2", 1, time.Hour)); ok || err == nil {
		t.Errorf("a closed state took %v, %v", ok, err)
	}
	if _, err := st.Approvals().Request(ctx, &approval.Approval{ID: "apr_2", Key: "k2", CreatedAt: now, ExpiresAt: now.Add(time.Minute)}); err == nil {
		t.Error("a closed state stored an approval")
	}
	if _, err := alone.Get(ctx, "apr_2"); err == nil {
		t.Error("the approval was stored")
	}
}

// twoStates opens one fresh file twice, as two gateways on one data
// directory would.
func twoStates(t *testing.T) (*State, *State) {
	path := filepath.Join(t.TempDir(), "state.db")
	return openState(t, path), openState(t, path)
}

// SQLite reads time.Now, so the suite's timing runs on fake time, with
// both handles opened in the bubble.

func TestTokensConformance(t *testing.T) {
	storetest.RunTokens(t, storetest.Both(twoStates, func(s *State) interlock.TokenStore { return s.Tokens() }), storetest.Options{Synctest: true})
}

func TestBudgetsConformance(t *testing.T) {
	storetest.RunBudgets(t, storetest.Both(twoStates, func(s *State) interlock.BudgetStore { return s.Budgets() }), storetest.Options{Synctest: true})
}

func TestTasksConformance(t *testing.T) {
	tasktest.Run(t, storetest.Both(twoStates, func(s *State) task.Store { return s.Tasks() }))
}

// TestTokensAcrossProcesses has two gateway processes race to consume
// tokens in one file; each is consumed exactly once.
func TestTokensAcrossProcesses(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state.db")
	storetest.TokensAcrossProcesses(t, openState(t, path).Tokens(), path)
}

// TestBudgetsAcrossProcesses has two gateway processes take under one
// budget in one file at once; between them they take exactly its limit.
func TestBudgetsAcrossProcesses(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state.db")
	storetest.BudgetsAcrossProcesses(t, openState(t, path).Budgets(), path)
}

// TestStoreHelperProcess is a gateway process of the tests across
// processes, using the state file it is given; run as a test it does
// nothing.
func TestStoreHelperProcess(t *testing.T) {
	storetest.HelperProcess(t, func(t *testing.T, path string) (interlock.TokenStore, interlock.BudgetStore) {
		s := openState(t, path)
		return s.Tokens(), s.Budgets()
	})
}

// TestTokensDropExpired checks that a handle's first issue drops the
// tokens that expired, and nothing live.
func TestTokensDropExpired(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "state.db")
	s := openState(t, path).Tokens()
	for i, ttl := range []time.Duration{-time.Second, -time.Nanosecond, time.Hour} {
		if err := s.Issue(ctx, fmt.Sprintf("b%d", i), "n", ttl); err != nil {
			t.Fatal(err)
		}
	}
	if err := openState(t, path).Tokens().Issue(ctx, "new", "n", time.Hour); err != nil {
		t.Fatal(err)
	}
	kept := column(t, s.db, "SELECT binding FROM tokens ORDER BY binding")
	if strings.Join(kept, " ") != "b2 new" {
		t.Errorf("kept %v, want the live b2 and new", kept)
	}
}

// BenchmarkTokens measures an issue, an issue and its consumption, and
// the same pair from several goroutines on two handles on one file.
func BenchmarkTokens(b *testing.B) {
	ctx := context.Background()
	b.Run("Issue", func(b *testing.B) {
		s := openState(b, filepath.Join(b.TempDir(), "state.db")).Tokens()
		i := 0
		for b.Loop() {
			if err := s.Issue(ctx, fmt.Sprintf("b%d", i%64), "n", time.Minute); err != nil {
				b.Fatal(err)
			}
			i++
		}
	})
	b.Run("Issue and Consume", func(b *testing.B) {
		storetest.BenchIssueConsume(b, openState(b, filepath.Join(b.TempDir(), "state.db")).Tokens())
	})
	b.Run("Issue and Consume two handles", func(b *testing.B) {
		path := filepath.Join(b.TempDir(), "state.db")
		storetest.BenchIssueConsumeParallel(b, 4, openState(b, path).Tokens(), openState(b, path).Tokens())
	})
}
