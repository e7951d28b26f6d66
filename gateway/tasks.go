package gateway

import (
	"encoding/json"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
)

// errTaskCall refuses a task-augmented call: the SDK the gateway is built
// on has no tasks, and a call run as a plain one would answer with a
// result the client did not ask for. interlock does not offer the tasks
// capability, so only a client that ignores that sends one.
var errTaskCall = &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams,
	Message: "interlock does not carry task-augmented tool calls (tasks); call the tool without \"task\""}

// asksTask reports whether a tools/call's params carry a task.
func asksTask(params json.RawMessage) bool {
	var t struct {
		Task json.RawMessage `json:"task"`
	}
	return json.Unmarshal(params, &t) == nil && len(t.Task) > 0 && string(t.Task) != "null"
}
