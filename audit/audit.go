// Package audit is the audit log's domain: the [Record] of a decision, an
// outcome or an event, its canonical form and the hash chain records form
// ([Record.Link], [Verify]), the bounds on text from outside, the [Log] and
// [Reader] every store implements, the batching and the SQL rows the stores
// share ([GroupCommit], [YieldRecords]), and signed [Checkpoint]s.
//
// # The canonical form is a contract
//
// A record's hash covers its canonical JSON, and a chain is never
// rewritten: Link must store every record as it always has, or logs
// written before stop verifying. The tests pin those bytes; a field added
// to [Record] is written only when set, so records without it hash as
// they did.
//
// # Text from outside
//
// Anyone who reaches the gateway can have a record written. Link makes
// every string valid UTF-8 and cuts it to size before it hashes, so no
// request can write a record that fails verification or grows the log
// without bound.
//
// The gate (package interlock) decides what to record; this package knows
// nothing of it.
package audit

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"iter"
	"math"
	"slices"
	"strconv"
	"time"

	"github.com/interlock-mcp/interlock/approval"
)

// Record is one entry of the audit log: a decision the gate took, the
// outcome of a call, or an event around the gate (a refused API key, an
// upstream restart, hints an upstream tried to loosen). Records form a hash
// chain: each carries the hash of its predecessor, and its own hash covers
// every other field, so an edit, a deletion, an insertion or a reordering
// breaks the chain at the first record it touches (see [Verify]).
type Record struct {
	Seq  int64     `json:"seq"`
	Time time.Time `json:"time"`
	// Event is "call" for decisions and outcomes of tool calls, or the
	// name of an event: "auth_refused", "upstream_restarted",
	// "hints_loosened", "gateway_started", "config_reloaded",
	// "config_rejected".
	Event     string `json:"event"`
	Tenant    string `json:"tenant,omitempty"`
	Principal string `json:"principal,omitempty"`
	// Client is the client's name/version as it introduced itself.
	Client   string `json:"client,omitempty"`
	Session  string `json:"session,omitempty"`
	Tool     string `json:"tool,omitempty"`
	Upstream string `json:"upstream,omitempty"`
	Rule     string `json:"rule,omitempty"`
	Mode     string `json:"mode,omitempty"`
	// Args are the call's arguments, redacted; ArgsDigest is the hex
	// SHA-256 of their canonical form before redaction, the value sealed
	// into confirm tokens.
	Args       map[string]any `json:"args,omitempty"`
	ArgsDigest string         `json:"args_digest,omitempty"`
	// Summary is what a human was shown before confirming.
	Summary string `json:"summary,omitempty"`
	// Decision is one of the Decision* constants.
	Decision string `json:"decision,omitempty"`
	// ConfirmedBy says which key confirmed a call that ran: flag, token,
	// elicit, approval (Approvers name who), or relay.
	ConfirmedBy string   `json:"confirmed_by,omitempty"`
	Approvers   []string `json:"approvers,omitempty"`
	// Approval names the approval a record of mode approval concerns;
	// Caller is that approval's caller on the record of an approver's
	// decision, whose Principal is the approver; RuleApprovers are who
	// the rule named as approvers; Reason is the approver's reason.
	Approval      string   `json:"approval,omitempty"`
	Caller        string   `json:"caller,omitempty"`
	RuleApprovers []string `json:"rule_approvers,omitempty"`
	Reason        string   `json:"reason,omitempty"`
	// Grant names the standing grant that confirmed the call.
	Grant string `json:"grant,omitempty"`
	// Replaced holds the values a human's choice replaced, by argument.
	Replaced map[string]any `json:"replaced,omitempty"`
	// Outcome is "ok", or the error code the call ended with (an upstream
	// isError result included); empty on a decision that a later record
	// completes.
	Outcome   string  `json:"outcome,omitempty"`
	LatencyMS float64 `json:"latency_ms,omitempty"`
	// Detail describes an event in words.
	Detail string `json:"detail,omitempty"`
	// Hints are the tool's hints the policy decided on, so that a call can
	// be decided again (interlock replay); absent from records written
	// before they were kept.
	Hints *Hints `json:"hints,omitempty"`
	// ShadowRule and ShadowMode are what the shadow policy decided, on a
	// "shadow_differs" event; Rule and Mode are the live decision.
	ShadowRule string `json:"shadow_rule,omitempty"`
	ShadowMode string `json:"shadow_mode,omitempty"`

	Prev string `json:"prev"`
	Hash string `json:"hash"`

	// Raw is the record as its store holds it, when it was read back: the
	// hash is checked over these bytes, so a member added to a stored
	// record breaks the chain as surely as a changed one.
	Raw json.RawMessage `json:"-"`
}

// Hints are a tool's hints as a record keeps them. They are the gate's
// Hints (package interlock), which this package does not import, with the
// same fields and JSON: the gate converts one to the other, and a field
// added to one and not the other breaks that conversion at compile time.
type Hints struct {
	ReadOnly    bool `json:"readOnly"`
	Destructive bool `json:"destructive"`
	Idempotent  bool `json:"idempotent"`
	OpenWorld   bool `json:"openWorld"`
}

// Subject is what the rules of who may see the record need to know
// ([approval.MaySee]): the caller whose call it concerns, whom the rule
// named as approvers, and who decided. An approver's decision and a
// grant's events name the caller in Caller, since their Principal is the
// one who acted.
func (r *Record) Subject() approval.Subject {
	s := approval.Subject{Tenant: r.Tenant, Caller: r.Caller, Approvers: r.RuleApprovers, Deciders: r.Approvers}
	if s.Caller == "" && r.Event == "call" {
		s.Caller = r.Principal
	}
	if r.Event != "call" && r.Principal != "" {
		s.Deciders = append(slices.Clip(s.Deciders), r.Principal)
	}
	return s
}

// The decisions an audit record names.
const (
	DecisionAllowed    = "allowed"
	DecisionDenied     = "denied"
	DecisionPreviewed  = "previewed"
	DecisionAsked      = "asked"
	DecisionConfirmed  = "confirmed"
	DecisionDeclined   = "declined"
	DecisionCancelled  = "cancelled"
	DecisionExpired    = "expired"
	DecisionInvalid    = "invalid"
	DecisionMismatched = "mismatched"
)

// The outcomes an audit record names besides the error code a call ended
// with.
const (
	// OutcomeOK is the outcome of a call that ran and did not fail.
	OutcomeOK = "ok"
	// OutcomeInputRequired is the outcome of a call whose tool asked the
	// client a question instead of finishing.
	OutcomeInputRequired = "input_required"
	// OutcomeToolError is the outcome of a call whose tool answered an
	// error result without an interlock error code.
	OutcomeToolError = "tool_error"
)

// Log appends records to a durable, hash-chained log. Package sqlite
// and package postgres implement it.
type Log interface {
	// Append adds records at the end of the chain, in order, setting their
	// Seq, Prev and Hash. It returns once they are committed, so a crash of
	// the process loses none of them; when durable is set, once they are
	// flushed to stable storage as well, so a crash of the machine loses
	// none either.
	Append(ctx context.Context, durable bool, recs ...*Record) error
}

// Queuer is a [Log] that can take records without their writer waiting
// for the commit: the records are chained and committed in the order they
// were queued, among appended ones, and a crash of the process loses those
// still queued. Closing the log commits what is queued.
type Queuer interface {
	// Queue adds records to the end of the queue and returns once they
	// are on it, waiting while it is full; done hears the commit's
	// result, on the committing goroutine, and must not block.
	Queue(done func(error), recs ...*Record) error
}

// Reader reads an audit log back, in chain order.
type Reader interface {
	// Records yields every record with a sequence number of at least from.
	Records(ctx context.Context, from int64) iter.Seq2[*Record, error]
}

// Encode returns the record's JSON, time in UTC, as `audit tail --json`
// prints it.
func (r *Record) Encode() ([]byte, error) {
	c := *r
	c.Time = c.Time.UTC()
	return json.Marshal(&c)
}

// ErrUnreadable is the error of a stored record that is not a record's
// JSON.
var ErrUnreadable = errors.New("audit: stored record is not a record")

// Decode reads a record as a store keeps it, keeping the bytes for
// verification.
func Decode(b []byte) (*Record, error) {
	r := &Record{}
	// The canonical form writes numbers as their shortest spelling, so
	// record 1,000,000 is stored as "seq":1e+06, which encoding/json will
	// not read into an int64: seq is read as a number and checked.
	type fields Record
	aux := struct {
		*fields
		Seq json.RawMessage `json:"seq"`
	}{fields: (*fields)(r)}
	if err := json.Unmarshal(b, &aux); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrUnreadable, err)
	}
	seq, err := seqOf(aux.Seq)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrUnreadable, err)
	}
	r.Seq = seq
	r.Raw = append(json.RawMessage(nil), b...)
	return r, nil
}

// seqOf reads a stored sequence number: a whole number, not negative, in
// either spelling the canonical form may give it.
func seqOf(raw json.RawMessage) (int64, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return 0, nil
	}
	if i, err := strconv.ParseInt(string(raw), 10, 64); err == nil && i >= 0 {
		return i, nil
	}
	f, err := strconv.ParseFloat(string(raw), 64)
	if err != nil || f != math.Trunc(f) || f < 0 || f > 1<<53 {
		return 0, fmt.Errorf("seq %s is not a sequence number", raw)
	}
	return int64(f), nil
}
