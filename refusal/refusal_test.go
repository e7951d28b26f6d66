package refusal_test

import (
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/interlock-mcp/interlock"
	"github.com/interlock-mcp/interlock/approval"
	"github.com/interlock-mcp/interlock/refusal"
)

func TestOf(t *testing.T) {
	tests := []struct {
		name   string
		err    error
		code   interlock.Code
		status int
	}{
		{"unknown approval", fmt.Errorf("deciding: %w", approval.ErrUnknown), interlock.CodeNotFound, http.StatusNotFound},
		{"unknown grant", approval.ErrGrantUnknown, interlock.CodeNotFound, http.StatusNotFound},
		{"own call", approval.ErrSelfApproval, interlock.CodePermissionDenied, http.StatusForbidden},
		{"not an approver", approval.ErrNotAnApprover, interlock.CodePermissionDenied, http.StatusForbidden},
		{"passkey", interlock.ErrPasskeyReplayed, interlock.CodePermissionDenied, http.StatusForbidden},
		{"voted twice", approval.ErrAlreadyVoted, interlock.CodeValidationFailed, http.StatusBadRequest},
		{"decided", approval.ErrAlreadyDecided, interlock.CodeValidationFailed, http.StatusBadRequest},
		{"wire error", interlock.Errorf(interlock.CodeRateLimited, "wait", "too many"), interlock.CodeRateLimited, http.StatusTooManyRequests},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := refusal.Of(tt.err)
			if e == nil || e.Code != tt.code || e.Message == "" {
				t.Fatalf("Of = %+v, want code %s with words", e, tt.code)
			}
			if got := refusal.Status(e.Code); got != tt.status {
				t.Errorf("Status(%s) = %d, want %d", e.Code, got, tt.status)
			}
		})
	}
	// A store that is down is not the approver's to fix: no words of it.
	if e := refusal.Of(errors.New("dial tcp 127.0.0.1:5432: connection refused")); e != nil {
		t.Errorf("Of(store error) = %+v, want nil", e)
	}
	// Each reading is the caller's own: changing one leaves the next alone.
	first := refusal.Of(approval.ErrUnknown)
	first.Message = "changed"
	if refusal.Of(approval.ErrUnknown).Message == "changed" {
		t.Error("Of hands out a shared refusal")
	}
	if refusal.Of(nil) != nil {
		t.Error("Of(nil) is not nil")
	}
}

// Every code the gate can put on the wire has a status of its own; only a
// tool's own error result, which has no code, is 422.
func TestStatusOfEveryCode(t *testing.T) {
	for _, c := range interlock.Codes() {
		if s := refusal.Status(c); s == http.StatusUnprocessableEntity || s < 200 || s > 599 {
			t.Errorf("Status(%s) = %d", c, s)
		}
	}
	if s := refusal.Status(""); s != http.StatusUnprocessableEntity {
		t.Errorf(`Status("") = %d, want 422`, s)
	}
}

// TestStoreUnavailable: an approver's request that met a store that is
// away reads, on a face, as a retriable 503 that says what was left
// undone; the rules' answers read as themselves.
func TestStoreUnavailable(t *testing.T) {
	down := errors.New("dial tcp 127.0.0.1:6379: connection refused")
	tests := []struct {
		name string
		err  error
		want interlock.Code
	}{
		{"a store that is down", fmt.Errorf("listing grants: %w", down), interlock.CodeUpstreamUnavailable},
		{"a rule's answer", approval.ErrGrantUnknown, interlock.CodeNotFound},
		{"a wire error", interlock.Errorf(interlock.CodeCancelled, "call again", "gone"), interlock.CodeCancelled},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := interlock.StoreUnavailable(tt.err, "nothing was revoked")
			// As a face reads it.
			read := err
			if e := refusal.Of(err); e != nil {
				read = e
			}
			body := interlock.BodyOf(read)
			if body.Code != tt.want {
				t.Fatalf("code %s, want %s", body.Code, tt.want)
			}
			if tt.want != interlock.CodeUpstreamUnavailable {
				return
			}
			if !body.Retriable || refusal.Status(body.Code) != http.StatusServiceUnavailable ||
				body.Message != "interlock's approval store cannot be reached, so nothing was revoked." {
				t.Errorf("body %+v", body)
			}
			// The store's own words stay in the log.
			if strings.Contains(fmt.Sprint(body), "dial tcp") || !errors.Is(err, down) {
				t.Errorf("body %+v shows the store's error, or err %v lost it", body, err)
			}
		})
	}
	if interlock.StoreUnavailable(nil, "x") != nil {
		t.Error("StoreUnavailable(nil) is not nil")
	}
}
