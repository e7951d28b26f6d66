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
// what the decision's mode demands. Either key alone fails closed.
//
// # Modes
//
// [ModeAllow] runs the call; [ModeDeny] refuses it. [ModeFlag] runs it when
// the agent passes __confirm: true. [ModeToken] answers
// CONFIRMATION_REQUIRED with a summary and a single-use confirm token,
// sealed by package seal and bound to the caller, tool and arguments; the
// call runs when the agent presents the token. [ModeElicit] asks a human in
// a form the client renders, through a multi round-trip input request or,
// for clients of earlier protocols, elicitation/create; a client that
// cannot show a form gets the decision's fallback. [ModeApproval] waits
// for people other than the caller to approve the call out of band
// ([Gate.Decide]); a standing grant ([Gate.GrantScope]) approves a scope of
// calls at once. A decision may name a read-only preview tool whose result
// feeds the summary the human reads; a preview that says the call cannot
// succeed ends it before anyone is asked.
//
// # One view of the arguments
//
// The raw arguments are read once, strictly (as [CheckJSON] checks JSON):
// duplicate keys, invalid UTF-8, lone surrogates and numbers a float64 does
// not hold as written are refused. What is a meta-argument, what the policy sees, what
// is sealed, what a summary shows and what the tool receives all come from
// that one value.
//
// # The audit log
//
// With an [audit.Log], every decision and outcome is a hash-chained
// [audit.Record]; a confirmed call runs only once its record is durable.
// [audit.Verify] finds an edited, deleted or reordered record, and signed
// [audit.Checkpoint]s find a rewritten chain.
//
// Questions a tool itself asks during a call are carried to the client's
// human too, with the tool's request state sealed inside the gate's.
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
