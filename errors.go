package interlock

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/interlock-mcp/interlock/internal/strictjson"
)

// Code is a stable, machine-readable error code that an agent can branch on.
type Code string

// Client-side codes: the same input fails the same way, so the caller must
// change the input, the configuration or ask a human.
const (
	CodeValidationFailed     Code = "VALIDATION_FAILED"
	CodeNotFound             Code = "NOT_FOUND"
	CodePermissionDenied     Code = "PERMISSION_DENIED"
	CodeAuthInvalid          Code = "AUTH_INVALID"
	CodeScopeRejected        Code = "SCOPE_REJECTED"
	CodeToolNotAllowed       Code = "TOOL_NOT_ALLOWED"
	CodeRateLimited          Code = "RATE_LIMITED"
	CodeDryRunPreview        Code = "DRY_RUN_PREVIEW"
	CodeConfirmationRequired Code = "CONFIRMATION_REQUIRED"
	CodeConsentTokenInvalid  Code = "CONSENT_TOKEN_INVALID"
	CodeConsentTokenExpired  Code = "CONSENT_TOKEN_EXPIRED"
	CodeConsentTokenMismatch Code = "CONSENT_TOKEN_MISMATCH"
	CodeApprovalPending      Code = "APPROVAL_PENDING"
	CodeDeclined             Code = "DECLINED"
	CodeCancelled            Code = "CANCELLED"
)

// Server-side codes: transient failures where a later retry may succeed.
const (
	CodeUpstreamError       Code = "UPSTREAM_ERROR"
	CodeUpstreamTimeout     Code = "UPSTREAM_TIMEOUT"
	CodeUpstreamUnavailable Code = "UPSTREAM_UNAVAILABLE"
	CodeCircuitOpen         Code = "CIRCUIT_OPEN"
	CodeBulkheadFull        Code = "BULKHEAD_FULL"
	CodeInternal            Code = "INTERNAL_ERROR"
)

// retriable says, for every code, whether a naive retry might succeed. It is
// the one place that decides; an [Error] cannot contradict it.
var retriable = map[Code]bool{
	CodeValidationFailed:     false,
	CodeNotFound:             false,
	CodePermissionDenied:     false,
	CodeAuthInvalid:          false,
	CodeScopeRejected:        false,
	CodeToolNotAllowed:       false,
	CodeRateLimited:          true,
	CodeDryRunPreview:        false,
	CodeConfirmationRequired: false,
	CodeConsentTokenInvalid:  false,
	CodeConsentTokenExpired:  false,
	CodeConsentTokenMismatch: false,
	CodeApprovalPending:      true,
	CodeDeclined:             false,
	CodeCancelled:            true,
	CodeUpstreamError:        true,
	CodeUpstreamTimeout:      true,
	CodeUpstreamUnavailable:  true,
	CodeCircuitOpen:          true,
	CodeBulkheadFull:         true,
	CodeInternal:             false,
}

// Codes returns every code interlock can put on the wire.
func Codes() []Code {
	out := make([]Code, 0, len(retriable))
	for c := range retriable {
		out = append(out, c)
	}
	return out
}

// ServerSide reports whether c is one of the server-side codes: a failure
// of interlock or of what is behind it, not an answer to the caller's
// input.
func (c Code) ServerSide() bool {
	switch c {
	case CodeUpstreamError, CodeUpstreamTimeout, CodeUpstreamUnavailable, CodeCircuitOpen, CodeBulkheadFull, CodeInternal:
		return true
	}
	return false
}

// Retriable reports whether a naive retry of a call that failed with code c
// might succeed. Unknown codes are not retriable.
func (c Code) Retriable() bool { return retriable[c] }

// Verdict reports whether c says of a call itself that it cannot succeed
// as asked (NOT_FOUND, VALIDATION_FAILED, PERMISSION_DENIED, …): a code a
// tool may answer of its own call, or a preview of the call it describes.
// The gate's answers about confirming a call (CONFIRMATION_REQUIRED,
// APPROVAL_PENDING, DECLINED, …), failures that a retry may mend, unknown
// codes, and AUTH_INVALID, which speaks of the caller's credential to
// interlock (a tool that says it spoke of its own, and the caller's is
// fine), are not verdicts.
func (c Code) Verdict() bool {
	_, known := retriable[c]
	return known && !c.Retriable() && c != CodeInternal && c != CodeAuthInvalid && !c.handshake()
}

// handshake reports whether c is one of the gate's answers about
// confirming a call rather than about the call itself.
func (c Code) handshake() bool {
	switch c {
	case CodeDryRunPreview, CodeConfirmationRequired, CodeConsentTokenInvalid, CodeConsentTokenExpired,
		CodeConsentTokenMismatch, CodeApprovalPending, CodeDeclined:
		return true
	}
	return false
}

// ValidationIssue names one argument that failed validation.
type ValidationIssue struct {
	Path    string `json:"path"`
	Message string `json:"message"`
	Code    string `json:"code"`
}

// Error is the structured error a client sees. Code, Message and Hint are
// always set on the wire; the other fields appear when they help the caller
// act.
type Error struct {
	Code    Code
	Message string
	// Hint is the imperative next step for the agent: the fix, not the
	// diagnosis.
	Hint string

	RetryAfterMS       int64
	SuggestedTool      string
	MissingPermissions []string
	ValidationIssues   []ValidationIssue
	// Preview holds the redacted arguments of a call that did not run.
	Preview map[string]any
	Summary string

	// The confirm-token handshake: set on CONFIRMATION_REQUIRED.
	ConfirmToken string
	TTLSeconds   int
	ExpiresAt    time.Time

	// Out-of-band approval: set on APPROVAL_PENDING (ExpiresAt too).
	ApprovalID  string
	ApprovalURL string

	// Err is the cause, for logs and errors.Is; it never reaches the client.
	Err error
}

func (e *Error) Error() string {
	if e.Err != nil {
		return fmt.Sprintf("%s: %s: %v", e.Code, e.Message, e.Err)
	}
	return fmt.Sprintf("%s: %s", e.Code, e.Message)
}

func (e *Error) Unwrap() error { return e.Err }

// invalidJSON turns a [strictjson.Error], JSON the gate refuses to read,
// into the VALIDATION_FAILED a client sees; other errors pass unchanged.
// The path is clipped: it is text the client chose.
func invalidJSON(err error) error {
	var e *strictjson.Error
	if !errors.As(err, &e) {
		return err
	}
	where := clip(e.Path)
	at := "the arguments"
	if where != "" {
		at = where
	}
	return &Error{
		Code:    CodeValidationFailed,
		Message: fmt.Sprintf("The JSON is ambiguous or malformed at %s (byte %d): %s.", at, e.Offset, e.Message),
		Hint: "Send one well-formed JSON object: each key once, valid UTF-8 text, numbers of at most " +
			strconv.Itoa(strictjson.MaxNumberLength) + " characters that a 64-bit float holds exactly (send larger ids as strings).",
		ValidationIssues: []ValidationIssue{{Path: where, Message: e.Message, Code: e.Code}},
	}
}

// invalidArguments turns the first [strictjson.Issue] of a call's
// arguments with the input schema of tool into the VALIDATION_FAILED a
// client sees.
func invalidArguments(tool string, issue *strictjson.Issue) error {
	where := issue.Path
	if where == "" {
		where = "the arguments"
	}
	return &Error{
		Code:             CodeValidationFailed,
		Message:          fmt.Sprintf("Invalid arguments for %s: %s %s.", tool, where, issue.Message),
		Hint:             fmt.Sprintf("Fix %s: it %s. Then call %s again.", where, issue.Message, tool),
		ValidationIssues: []ValidationIssue{{Path: issue.Path, Message: issue.Message, Code: issue.Code}},
		Err:              issue.Err,
	}
}

// Errorf returns an *Error with the given code, recovery hint and formatted
// message.
func Errorf(code Code, hint, format string, args ...any) *Error {
	return &Error{Code: code, Hint: hint, Message: fmt.Sprintf(format, args...)}
}

// ErrorCode returns the code of the first *Error in err's chain, "" for a nil
// error and CodeInternal for any other error.
func ErrorCode(err error) Code {
	if err == nil {
		return ""
	}
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return CodeInternal
}

// Body is the JSON object a client receives as structuredContent, and as a
// text block, for a failed call.
type Body struct {
	Code               Code              `json:"code"`
	Retriable          bool              `json:"retriable"`
	Message            string            `json:"message"`
	RecoveryHint       string            `json:"recovery_hint"`
	RetryAfterMS       int64             `json:"retry_after_ms,omitempty"`
	SuggestedTool      string            `json:"suggested_tool,omitempty"`
	MissingPermissions []string          `json:"missing_permissions,omitempty"`
	ValidationIssues   []ValidationIssue `json:"validation_issues,omitempty"`
	Preview            map[string]any    `json:"preview,omitempty"`
	Summary            string            `json:"summary,omitempty"`
	ConfirmRequired    bool              `json:"confirm_required,omitempty"`
	ConfirmToken       string            `json:"confirm_token,omitempty"`
	TTLSeconds         int               `json:"ttl_seconds,omitempty"`
	ExpiresAt          string            `json:"expires_at,omitempty"`
	ApprovalID         string            `json:"approval_id,omitempty"`
	ApprovalURL        string            `json:"approval_url,omitempty"`
}

const internalHint = "Do not retry this call; report the failure to the interlock operator, who will find the cause in the gateway's log."

// BodyOf returns the wire body for err. Any error that is not an *Error
// becomes INTERNAL_ERROR with a fixed message, so no internal text leaks.
func BodyOf(err error) Body {
	var e *Error
	if !errors.As(err, &e) {
		return Body{
			Code:         CodeInternal,
			Message:      "interlock failed to handle this call because of an internal error.",
			RecoveryHint: internalHint,
		}
	}
	b := Body{
		Code:               e.Code,
		Retriable:          e.Code.Retriable(),
		Message:            e.Message,
		RecoveryHint:       e.Hint,
		RetryAfterMS:       e.RetryAfterMS,
		SuggestedTool:      e.SuggestedTool,
		MissingPermissions: e.MissingPermissions,
		ValidationIssues:   e.ValidationIssues,
		Preview:            e.Preview,
		Summary:            e.Summary,
	}
	if e.ConfirmToken != "" {
		b.ConfirmRequired = true
		b.ConfirmToken = e.ConfirmToken
		b.TTLSeconds = e.TTLSeconds
		b.ExpiresAt = e.ExpiresAt.UTC().Format(time.RFC3339)
	}
	if e.ApprovalID != "" {
		b.ApprovalID, b.ApprovalURL = e.ApprovalID, e.ApprovalURL
		b.ExpiresAt = e.ExpiresAt.UTC().Format(time.RFC3339)
	}
	if _, known := retriable[e.Code]; !known {
		b.Code, b.Retriable = CodeInternal, false
	}
	if b.RecoveryHint == "" {
		b.RecoveryHint = internalHint
	}
	return b
}

// Result turns any error into the tool result the client sees: isError set,
// the body as structuredContent and the same JSON as a text block. It is the
// single conversion point from Go errors to the wire.
func Result(err error) *mcp.CallToolResult {
	body := BodyOf(err)
	text, mErr := json.Marshal(body)
	if mErr != nil {
		// A preview that cannot be encoded must not hide the error itself.
		body.Preview = nil
		text, _ = json.Marshal(body)
	}
	return &mcp.CallToolResult{
		IsError:           true,
		StructuredContent: gateBody(text),
		Content:           []mcp.Content{&mcp.TextContent{Text: string(text)}},
	}
}

// gateBody is the structured content of a result [Result] made: the body
// as it was encoded. Nothing decoded from a message has this type, so a
// result a tool wrote, whatever its content says, never reads as the
// gate's own (see [GateBody]).
type gateBody json.RawMessage

func (b gateBody) MarshalJSON() ([]byte, error) { return json.RawMessage(b).MarshalJSON() }

// GateBody returns the body of res when [Result] made it: a refusal, a
// question or a failure in interlock's words. Any other result, a tool's
// own error result included, is not the gate's, whatever its structured
// content holds: a server behind a gateway can write a body of interlock's
// shape, and must not be taken at its word (as a pending approval, or as
// a code in the audit log).
func GateBody(res *mcp.CallToolResult) (Body, bool) {
	if res == nil {
		return Body{}, false
	}
	b, ok := res.StructuredContent.(gateBody)
	if !ok {
		return Body{}, false
	}
	var body Body
	_ = json.Unmarshal(b, &body)
	return body, true
}

// BodyOfResult reads the error body back from a tool result, as far as it
// is one: a result whose content is not of a body's shape gives a Body
// with an empty Code. It reads any result, as a client does; whether the
// gate made it is for [GateBody] to say.
func BodyOfResult(res *mcp.CallToolResult) Body {
	if body, ok := GateBody(res); ok {
		return body
	}
	var body Body
	switch sc := res.StructuredContent.(type) {
	case nil:
	case json.RawMessage:
		_ = json.Unmarshal(sc, &body)
	default:
		if b, err := json.Marshal(sc); err == nil {
			_ = json.Unmarshal(b, &body)
		}
	}
	return body
}
