// Package refusal is the one reading of an error that a request to one of
// interlock's HTTP faces met (the REST face, the console's pages, the
// command line that calls them): the wire error, with the HTTP status its
// code decides and the words a page shows. The gate decides codes; this
// package decides only how a face says them, as WTF Dial's http package
// maps its domain's error codes to statuses in one place.
package refusal

import (
	"errors"
	"net/http"

	"github.com/interlock-mcp/interlock"
	"github.com/interlock-mcp/interlock/approval"
)

// Of reads the error an approver's request met as the wire error, whose
// code decides the HTTP status ([Status]) and whose message is the words a
// page shows. An *interlock.Error passes as it is. It returns nil for an
// error that is not the approver's to fix (a store that is down), which a
// face reports as an internal failure without its text.
func Of(err error) *interlock.Error {
	if err == nil {
		return nil
	}
	for _, k := range known {
		for _, target := range k.errs {
			if errors.Is(err, target) {
				refusal := k.refusal // a copy: a face may add to what it shows
				return &refusal
			}
		}
	}
	if e, ok := errors.AsType[*interlock.Error](err); ok {
		return e
	}
	return nil
}

// known are the errors of the approval domain an approver can act on, and
// what each face tells them.
var known = []struct {
	errs    []error
	refusal interlock.Error
}{
	{[]error{approval.ErrUnknown}, interlock.Error{Code: interlock.CodeNotFound,
		Message: "There is no such approval, or it is not one you may see.",
		Hint:    "List the approvals you may decide: GET /v1/approvals, interlock approvals list, or the console."}},
	{[]error{approval.ErrGrantUnknown}, interlock.Error{Code: interlock.CodeNotFound,
		Message: "There is no such grant, or it is not one you may see.",
		Hint:    "List the grants you may see: GET /v1/grants, or the console's Grants page."}},
	{[]error{approval.ErrSelfApproval}, interlock.Error{Code: interlock.CodePermissionDenied,
		Message: "You cannot approve or deny your own call.",
		Hint:    "Ask one of the approvers the policy names to decide it."}},
	{[]error{approval.ErrNotAnApprover}, interlock.Error{Code: interlock.CodePermissionDenied,
		Message: "The policy does not name you as an approver of this call.",
		Hint:    "Ask one of the approvers the policy names to decide it."}},
	{[]error{interlock.ErrPasskeyRequired, interlock.ErrPasskeyInvalid, interlock.ErrPasskeyReplayed}, interlock.Error{Code: interlock.CodePermissionDenied,
		Message: "The policy accepts a decision on this call only when it is signed with your passkey in the console.",
		Hint:    "Open the approval in the console (/console/approvals/{id}), register a passkey there if you have none, and decide with it."}},
	{[]error{approval.ErrAlreadyVoted}, interlock.Error{Code: interlock.CodeValidationFailed,
		Message: "You already approved this call; it waits for the other approvers.",
		Hint:    "Read its state with GET /v1/approvals/{id}, or on its page."}},
	{[]error{approval.ErrAlreadyDecided}, interlock.Error{Code: interlock.CodeValidationFailed,
		Message: "This approval is no longer waiting for a decision.",
		Hint:    "Read its state with GET /v1/approvals/{id}, or on its page."}},
}

// Status is the HTTP status of a refusal or result with code c, for the
// REST face and the console alike. A tool's own error result, which has
// no interlock code, is 422.
func Status(c interlock.Code) int {
	switch c {
	case interlock.CodeConfirmationRequired:
		return http.StatusPreconditionRequired
	case interlock.CodeValidationFailed:
		return http.StatusBadRequest
	case interlock.CodeNotFound:
		return http.StatusNotFound
	case interlock.CodeAuthInvalid:
		return http.StatusUnauthorized
	case interlock.CodePermissionDenied, interlock.CodeScopeRejected, interlock.CodeToolNotAllowed,
		interlock.CodeConsentTokenInvalid, interlock.CodeConsentTokenMismatch, interlock.CodeDeclined:
		return http.StatusForbidden
	case interlock.CodeConsentTokenExpired:
		return http.StatusGone
	case interlock.CodeDryRunPreview, interlock.CodeCancelled:
		return http.StatusConflict
	case interlock.CodeApprovalPending:
		return http.StatusAccepted
	case interlock.CodeRateLimited:
		return http.StatusTooManyRequests
	case interlock.CodeUpstreamError:
		return http.StatusBadGateway
	case interlock.CodeUpstreamTimeout:
		return http.StatusGatewayTimeout
	case interlock.CodeUpstreamUnavailable, interlock.CodeCircuitOpen, interlock.CodeBulkheadFull:
		return http.StatusServiceUnavailable
	case interlock.CodeInternal:
		return http.StatusInternalServerError
	}
	return http.StatusUnprocessableEntity
}
