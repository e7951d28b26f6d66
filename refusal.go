package interlock

import (
	"errors"
	"net/http"

	"github.com/interlock-mcp/interlock/approval"
)

// Refusal is the one reading of an error that an approver's request met,
// for every face alike (the REST face, the console's pages, the command
// line): the wire error, whose code decides the HTTP status
// ([Code.Status]) and whose message is the words a page shows. An *Error
// passes as it is. It returns nil for an error that is not the approver's
// to fix (a store that is down), which a face reports as an internal
// failure without its text.
func Refusal(err error) *Error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, approval.ErrUnknown):
		return &Error{Code: CodeNotFound, Message: "There is no such approval, or it is not one you may see.",
			Hint: "List the approvals you may decide: GET /v1/approvals, interlock approvals list, or the console."}
	case errors.Is(err, approval.ErrGrantUnknown):
		return &Error{Code: CodeNotFound, Message: "There is no such grant, or it is not one you may see.",
			Hint: "List the grants you may see: GET /v1/grants, or the console's Grants page."}
	case errors.Is(err, approval.ErrSelfApproval):
		return &Error{Code: CodePermissionDenied, Message: "You cannot approve or deny your own call.",
			Hint: "Ask one of the approvers the policy names to decide it."}
	case errors.Is(err, approval.ErrNotAnApprover):
		return &Error{Code: CodePermissionDenied, Message: "The policy does not name you as an approver of this call.",
			Hint: "Ask one of the approvers the policy names to decide it."}
	case errors.Is(err, ErrPasskeyRequired), errors.Is(err, ErrPasskeyInvalid), errors.Is(err, ErrPasskeyReplayed):
		return &Error{Code: CodePermissionDenied,
			Message: "The policy accepts a decision on this call only when it is signed with your passkey in the console.",
			Hint:    "Open the approval in the console (/console/approvals/{id}), register a passkey there if you have none, and decide with it."}
	case errors.Is(err, approval.ErrAlreadyVoted):
		return &Error{Code: CodeValidationFailed, Message: "You already approved this call; it waits for the other approvers.",
			Hint: "Read its state with GET /v1/approvals/{id}, or on its page."}
	case errors.Is(err, approval.ErrAlreadyDecided):
		return &Error{Code: CodeValidationFailed, Message: "This approval is no longer waiting for a decision.",
			Hint: "Read its state with GET /v1/approvals/{id}, or on its page."}
	}
	if e, ok := errors.AsType[*Error](err); ok {
		return e
	}
	return nil
}

// Status is the HTTP status of a refusal or result with code c, for the
// REST face and the console alike. A tool's own error result, which has
// no interlock code, is 422.
func (c Code) Status() int {
	switch c {
	case CodeConfirmationRequired:
		return http.StatusPreconditionRequired
	case CodeValidationFailed:
		return http.StatusBadRequest
	case CodeNotFound:
		return http.StatusNotFound
	case CodeAuthInvalid:
		return http.StatusUnauthorized
	case CodePermissionDenied, CodeScopeRejected, CodeToolNotAllowed,
		CodeConsentTokenInvalid, CodeConsentTokenMismatch, CodeDeclined:
		return http.StatusForbidden
	case CodeConsentTokenExpired:
		return http.StatusGone
	case CodeDryRunPreview, CodeCancelled:
		return http.StatusConflict
	case CodeApprovalPending:
		return http.StatusAccepted
	case CodeRateLimited:
		return http.StatusTooManyRequests
	case CodeUpstreamError:
		return http.StatusBadGateway
	case CodeUpstreamTimeout:
		return http.StatusGatewayTimeout
	case CodeUpstreamUnavailable, CodeCircuitOpen, CodeBulkheadFull:
		return http.StatusServiceUnavailable
	case CodeInternal:
		return http.StatusInternalServerError
	}
	return http.StatusUnprocessableEntity
}
