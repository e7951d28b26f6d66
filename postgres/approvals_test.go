package postgres

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/interlock-mcp/interlock/approval"
	"github.com/interlock-mcp/interlock/approval/approvaltest"
	"github.com/interlock-mcp/interlock/consolestate"
	"github.com/interlock-mcp/interlock/consolestate/consolestatetest"
	"github.com/interlock-mcp/interlock/roster"
	"github.com/interlock-mcp/interlock/roster/rostertest"
	"github.com/interlock-mcp/interlock/storetest"
	"github.com/interlock-mcp/interlock/task"
	"github.com/interlock-mcp/interlock/task/tasktest"
)

// openApprovals opens a handle on the schema url names, closed when the
// test ends.
func openApprovals(t testing.TB, url string) *Approvals {
	s, err := OpenApprovals(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s
}

// twoGateways opens two handles on one fresh schema, as two gateways
// sharing the database would.
func twoGateways(t *testing.T) (*Approvals, *Approvals) {
	url, _ := schemaURL(t)
	return openApprovals(t, url), openApprovals(t, url)
}

func TestApprovalsConformance(t *testing.T) {
	approvaltest.Run(t, storetest.Both(twoGateways, func(s *Approvals) approval.Store { return s }))
}

func TestGrantsConformance(t *testing.T) {
	approvaltest.RunGrants(t, storetest.Both(twoGateways, func(s *Approvals) approval.GrantStore { return s }))
}

func TestTasksConformance(t *testing.T) {
	tasktest.Run(t, storetest.Both(twoGateways, func(s *Approvals) task.Store { return s.Tasks() }))
}

// TestGrantUsesAcrossProcesses has two gateway processes use one grant in
// one database at once; between them they use it exactly its number of
// uses.
func TestGrantUsesAcrossProcesses(t *testing.T) {
	url, _ := schemaURL(t)
	approvaltest.UsesAcrossProcesses(t, openApprovals(t, url), url)
}

// TestHelperProcess is a gateway process of TestGrantUsesAcrossProcesses,
// using the grants of the schema its URL names; run as a test it does
// nothing.
func TestHelperProcess(t *testing.T) {
	approvaltest.HelperProcess(t, func(t *testing.T, url string) approval.GrantStore {
		return openApprovals(t, url)
	})
}

func TestConsoleConformance(t *testing.T) {
	consolestatetest.Run(t, storetest.Both(twoGateways, func(s *Approvals) consolestate.Store { return s.Console() }))
}

func TestConsoleSignal(t *testing.T) {
	consolestatetest.RunSignal(t, storetest.Both(twoGateways, func(s *Approvals) consolestate.Signal { return s.Console() }))
}

// TestConsoleSignalStaysInItsSchema: NOTIFY channels are the database's,
// yet two schemas are two stores; a word raised in one is not heard in
// the other.
func TestConsoleSignalStaysInItsSchema(t *testing.T) {
	here, _ := twoGateways(t)
	there, _ := twoGateways(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ch, err := there.Console().Listen(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := here.Console().Raise(ctx, "apr_elsewhere"); err != nil {
		t.Fatal(err)
	}
	if err := there.Console().Raise(ctx, "apr_here"); err != nil {
		t.Fatal(err)
	}
	if got := <-ch; got != "apr_here" {
		t.Errorf("heard %q first", got)
	}
}

// TestConsoleAcrossProcesses: two processes on one database race for a
// link, a challenge and a counter; one wins each time.
func TestConsoleAcrossProcesses(t *testing.T) {
	url, _ := schemaURL(t)
	consolestatetest.AcrossProcesses(t, openApprovals(t, url).Console(), url)
}

// TestConsoleHelperProcess is a gateway process of
// TestConsoleAcrossProcesses, on the schema its URL names; run as a test
// it does nothing.
func TestConsoleHelperProcess(t *testing.T) {
	consolestatetest.HelperProcess(t, func(t *testing.T, url string) consolestate.Store {
		return openApprovals(t, url).Console()
	})
}

// TestConsoleSignalAfterItsConnectionDrops: when the server ends the
// listener's connection, the listener connects again, says it may have
// missed words, and hears the next ones.
func TestConsoleSignalAfterItsConnectionDrops(t *testing.T) {
	s, _ := twoGateways(t)
	c := s.Console()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	heard, err := c.Listen(ctx)
	if err != nil {
		t.Fatal(err)
	}
	exec(t, testURL, fmt.Sprintf(`SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE query = 'LISTEN "%s"'`, c.channel))
	consolestatetest.HearsAfterGap(t, c, heard, 20*time.Second)
}

func TestRosterConformance(t *testing.T) {
	rostertest.Run(t, storetest.Both(twoGateways, func(s *Approvals) roster.Store { return s }))
}

func BenchmarkWaiting(b *testing.B) {
	url, _ := schemaURL(b)
	approvaltest.BenchmarkWaiting(b, openApprovals(b, url))
}
