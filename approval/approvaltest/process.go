package approvaltest

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/interlock-mcp/interlock/approval"
	"github.com/interlock-mcp/interlock/internal/testproc"
)

// The environment that makes a test binary a gateway process of
// [UsesAcrossProcesses]: the store it dials, the grant it uses and how
// many times it tries.
const (
	storeEnv = "INTERLOCK_APPROVALTEST_STORE"
	grantEnv = "INTERLOCK_APPROVALTEST_GRANT"
	triesEnv = "INTERLOCK_APPROVALTEST_TRIES"
)

// Dial opens, in a process of its own, a handle on the grant store that
// where names.
type Dial func(t *testing.T, where string) approval.GrantStore

// HelperProcess is the body of a test named TestHelperProcess. Started by
// [UsesAcrossProcesses], it dials the store, says it is ready, and at the
// moment it is told uses the grant from eight goroutines and prints how
// many uses succeeded. Run as an ordinary test it does nothing.
func HelperProcess(t *testing.T, dial Dial) {
	where := os.Getenv(storeEnv)
	if where == "" {
		return
	}
	ctx := context.Background()
	id := os.Getenv(grantEnv)
	tries, err := strconv.Atoi(os.Getenv(triesEnv))
	if err != nil {
		t.Fatal(err)
	}
	s := dial(t, where)
	for range testproc.Ready(t) {
		fmt.Printf("used %d\n", testproc.Together(t, 8, tries, func() (bool, error) { return s.UseGrant(ctx, id) }))
	}
}

// UsesAcrossProcesses adds a grant of 25 uses to s, then has two gateway
// processes (this test binary again, running TestHelperProcess, which
// calls [HelperProcess]) use it 40 times each at once, through handles of
// their own on the store that where names. Between them exactly 25 uses
// succeed, and the store counts 25.
func UsesAcrossProcesses(t *testing.T, s approval.GrantStore, where string) {
	const uses, tries = 25, 40
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	now := time.Now()
	g := &approval.StandingGrant{ID: "grt_procs", Tool: "refund_invoice", Tenant: "acme", Principal: "alice", GrantedBy: "bob",
		Approvers: []string{"bob"}, CreatedAt: now, ExpiresAt: now.Add(time.Hour), Uses: uses}
	if err := s.AddGrant(ctx, g); err != nil {
		t.Fatal(err)
	}
	procs := testproc.Start(t, 2, "TestHelperProcess", storeEnv+"="+where, grantEnv+"="+g.ID, triesEnv+"="+strconv.Itoa(tries))
	// Both processes have dialled the store; they use the grant at one
	// moment, so their uses overlap.
	testproc.SendAll(t, procs, "use")
	var total int
	for i, p := range procs {
		n := p.Number(t, "used")
		t.Logf("gateway process %d used the grant %d times", i, n)
		total += n
	}
	if total != uses {
		t.Errorf("two processes used a grant of %d uses %d times", uses, total)
	}
	if got, err := s.Grant(ctx, g.ID); err != nil || got.Used != uses || got.Live(time.Now()) {
		t.Errorf("the grant after both processes: %+v %v", got, err)
	}
}
