// Package interlock makes destructive MCP tool calls impossible without the
// confirmation that policy demands.
//
// # The gate
//
// Every tool call goes through one decision path, [Gate.Call]. It identifies
// the caller, takes the meta-arguments (keys that start with two underscores,
// such as __confirm) out of the raw arguments, validates what is left against
// the tool's input schema, asks the [Policy] for a [Decision], applies the
// operator key and the decision's [Mode], and only then runs the tool.
//
// # Two keys
//
// The operator key is the environment variable MCP_DRY_RUN. Unless it is the
// literal string "false", no gated call executes: the gate answers
// DRY_RUN_PREVIEW with the redacted arguments instead. The per-call key is
// what the decision's mode demands; in [ModeFlag] it is the agent passing
// __confirm: true. Either key alone fails closed.
//
// # Errors
//
// Every failure a client sees is a tool result with isError set and a
// structured body: a stable code, whether a retry may help, a message and an
// imperative recovery hint. [Error] carries those fields, [ErrorCode] reads the
// code of any error, and [Result] turns any error into the result the client
// sees. Errors that are not an [*Error] become INTERNAL_ERROR and their text
// never reaches the client.
//
// # Two faces
//
// Go servers built on the official SDK protect their handlers with
// [Gate.AddTool] and [AddTool]. The gateway (package gateway, command
// interlock serve) mirrors the tools of servers it does not control and sends
// every call through the same gate.
package interlock
