package gateway

import (
	"fmt"
	"net/http/httptest"
	"strings"
	"testing"
)

// formRules are taskRules with alice's wipes confirmed by a form instead.
var formRules = strings.Replace(taskRules, `  - name: wipes-need-approval
    match: {tools: [wipe]}
    mode: approval
    approvers: [bob]`, `  - name: wipes-need-a-form
    match: {tools: [wipe]}
    mode: elicit`, 1)

// TestFormAsTask: a call whose rule asks a human by a form becomes, for a
// client that declares the tasks extension, a task waiting for input; its
// owner's tasks/update answers the form, and the call runs once; a
// declined form ends it DECLINED; answers that come twice, or from
// another identity, or to a task that asks nothing, are refused.
func TestFormAsTask(t *testing.T) {
	_, alice := taskGateway(t, formRules)
	update := func(c taskClient, id, answer string) (map[string]any, map[string]any) {
		return c.rpc("tasks/update", id, fmt.Sprintf(`"taskId":%q,"inputResponses":{"interlock_confirm":%s}`, id, answer))
	}
	for _, tt := range []struct {
		name, answer, want string
		isError            bool
	}{
		{"accepted", `{"action":"accept","content":{"confirm":true}}`, "wiped", false},
		{"declined", `{"action":"decline"}`, "DECLINED", true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			created := alice.call("disk-" + tt.name)
			id, _ := created["taskId"].(string)
			if created["resultType"] != "task" || created["status"] != "input_required" ||
				!strings.Contains(fmt.Sprint(created["inputRequests"]), "interlock_confirm") {
				t.Fatalf("tools/call answered %v", created)
			}
			got, _ := alice.rpc("tasks/get", id, fmt.Sprintf(`"taskId":%q`, id))
			if got["status"] != "input_required" || !strings.Contains(fmt.Sprint(got["inputRequests"]), "elicitation/create") {
				t.Fatalf("tasks/get before the answer: %v", got)
			}
			for _, who := range []string{"other-alice-key", "mallory-key"} {
				other := taskClient{t, alice.url, who}
				_, theirs := update(other, id, tt.answer)
				_, none := update(other, "tsk_none", tt.answer)
				if theirs == nil || fmt.Sprint(theirs) != fmt.Sprint(none) {
					t.Errorf("tasks/update of alice's task by %s: %v; of no task: %v", who, theirs, none)
				}
			}
			if res, rpcErr := update(alice, id, tt.answer); rpcErr != nil || res["resultType"] != "complete" {
				t.Fatalf("tasks/update: %v %v", res, rpcErr)
			}
			if _, again := update(alice, id, tt.answer); again == nil || !strings.Contains(fmt.Sprint(again["message"]), "asks for no input now") {
				t.Errorf("the same answers again: %v", again)
			}
			res, rpcErr := alice.poll(id)
			result, _ := res["result"].(map[string]any)
			if isError, _ := result["isError"].(bool); rpcErr != nil || res["status"] != "completed" || isError != tt.isError ||
				!strings.Contains(fmt.Sprint(result), tt.want) {
				t.Fatalf("poll: %v %v", res, rpcErr)
			}
		})
	}
	t.Run("answers without the form's", func(t *testing.T) {
		created := alice.call("disk-unasked")
		id, _ := created["taskId"].(string)
		for _, params := range []string{`"taskId":%q`, `"taskId":%q,"inputResponses":null`, `"taskId":%q,"inputResponses":{"x":{"nonsense":1}}`} {
			if _, rpcErr := alice.rpc("tasks/update", id, fmt.Sprintf(params, id)); rpcErr == nil || rpcErr["code"] != float64(-32602) {
				t.Errorf("tasks/update %s: %v", params, rpcErr)
			}
		}
		// Answers without the form's: the call does not run.
		if _, rpcErr := update(alice, id, `{"action":"accept","content":{"confirm":false}}`); rpcErr != nil {
			t.Fatal(rpcErr)
		}
		res, _ := alice.poll(id)
		result, _ := res["result"].(map[string]any)
		if res["status"] != "completed" || result["isError"] != true || !strings.Contains(fmt.Sprint(result), "DECLINED") {
			t.Errorf("an unticked box: %v", res)
		}
	})
}

// TestFormTaskAcrossReplicas: a task waiting for input, made on one
// gateway, is answered on two others at once: one update is taken, the
// call runs once, and a poll of any gateway sees it completed.
func TestFormTaskAcrossReplicas(t *testing.T) {
	for name, open := range sharedStores(t) {
		t.Run(name, func(t *testing.T) {
			replica, log, _ := taskReplicas(t, formRules, open)
			_, firstSrv := replica()
			_, secondSrv := replica()
			_, thirdSrv := replica()
			created := taskClient{t, firstSrv.URL + "/mcp", "alice-key"}.call("disk")
			id, _ := created["taskId"].(string)
			if created["status"] != "input_required" {
				t.Fatalf("tools/call answered %v", created)
			}
			answered := make(chan map[string]any, 2)
			for _, srv := range []*httptest.Server{secondSrv, thirdSrv} {
				go func() {
					_, rpcErr := taskClient{t, srv.URL + "/mcp", "alice-key"}.rpc("tasks/update", id,
						fmt.Sprintf(`"taskId":%q,"inputResponses":{"interlock_confirm":{"action":"accept","content":{"confirm":true}}}`, id))
					answered <- rpcErr
				}()
			}
			refused := 0
			for range 2 {
				if rpcErr := <-answered; rpcErr != nil {
					refused++
				}
			}
			if refused != 1 {
				t.Errorf("%d of two updates sent at once were refused; want one", refused)
			}
			res, rpcErr := taskClient{t, firstSrv.URL + "/mcp", "alice-key"}.poll(id)
			if rpcErr != nil || res["status"] != "completed" || !strings.Contains(fmt.Sprint(res["result"]), "wiped") {
				t.Fatalf("poll: %v %v", res, rpcErr)
			}
			if runs := wipesRun(t, log); runs != 1 {
				t.Errorf("the call ran %d times", runs)
			}
		})
	}
}
