// Package strictjson is the one reader of the JSON a call carries, and the
// check of arguments against a tool's input schema.
//
// The gate decides on a value, and everything else must see that same
// value: which keys are meta-arguments, what the policy judges, what is
// digested into a seal, what a preview and a summary show, and what the
// upstream finally receives all come from one [Decode]. It refuses any
// JSON that two readers could read differently (duplicate keys, invalid
// UTF-8, lone surrogate escapes, numbers a 64-bit float does not hold as
// written) and any that costs more than a call should (numbers longer than
// [MaxNumberLength], nesting deeper than [MaxDepth]), rather than guess
// which reading was meant; so the bytes forwarded upstream decode, in any
// reader, to exactly what was decided and confirmed.
//
// A [Validator] then checks the decoded arguments against the tool's input
// schema and names the first [Issue]; it also refuses an argument the
// schema does not declare that differs from a declared one only in case,
// which a reader matching keys without regard to case would take for the
// declared one. Errors here carry a path, a message
// and a code; the root package turns them into the VALIDATION_FAILED a
// client sees.
package strictjson
