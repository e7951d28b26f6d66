package task_test

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/interlock-mcp/interlock/task"
)

// A gateway makes a task for a call that waits for an approval; the
// replica that runs it claims it from the version it read, so a second
// replica reading the same version cannot run it too.
func Example() {
	ctx := context.Background()
	tasks := task.NewMemory()
	now := time.Now()
	t := &task.Task{ID: task.NewID(), Tenant: "acme", Principal: "alice", Tool: "refund_invoice",
		Approval: "apr_1", Status: task.Working, CreatedAt: now, UpdatedAt: now, ExpiresAt: now.Add(time.Hour)}
	if err := tasks.Create(ctx, t); err != nil {
		panic(err)
	}

	mine, _ := tasks.Get(ctx, t.ID)
	theirs, _ := tasks.Get(ctx, t.ID)
	mine.Claim = "gateway-1"
	ran, _ := tasks.Update(ctx, mine)
	theirs.Claim = "gateway-2"
	alsoRan, _ := tasks.Update(ctx, theirs)
	fmt.Println("gateway-1 runs it:", ran, "gateway-2 runs it:", alsoRan)

	mine.Status, mine.Result = task.Completed, json.RawMessage(`{"content": [{"type": "text", "text": "Refunded."}]}`)
	if _, err := tasks.Update(ctx, mine); err != nil {
		panic(err)
	}
	done, _ := tasks.Get(ctx, t.ID)
	fmt.Println(done.Status, done.Terminal(), done.Version, string(done.Result))
	fmt.Println("alice sees it:", done.OwnedBy("acme", "alice"), "alice of globex:", done.OwnedBy("globex", "alice"))
	// Output:
	// gateway-1 runs it: true gateway-2 runs it: false
	// completed true 3 {"content": [{"type": "text", "text": "Refunded."}]}
	// alice sees it: true alice of globex: false
}
