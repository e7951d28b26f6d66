package interlock

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/interlock-mcp/interlock/internal/strictjson"
)

func TestErrorCode(t *testing.T) {
	notFound := Errorf(CodeNotFound, "Call list_customers, then retry.", "no customer %s", "acct_1")
	tests := []struct {
		name string
		err  error
		want Code
	}{
		{"nil", nil, ""},
		{"interlock error", notFound, CodeNotFound},
		{"wrapped", fmt.Errorf("deleting: %w", notFound), CodeNotFound},
		{"plain error", errors.New("boom"), CodeInternal},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := ErrorCode(tt.err); got != tt.want {
				t.Errorf("ErrorCode = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestRetriable(t *testing.T) {
	server := []Code{CodeUpstreamError, CodeUpstreamTimeout, CodeUpstreamUnavailable, CodeCircuitOpen, CodeBulkheadFull}
	client := []Code{CodeValidationFailed, CodeNotFound, CodePermissionDenied, CodeAuthInvalid, CodeScopeRejected,
		CodeToolNotAllowed, CodeDryRunPreview, CodeConfirmationRequired, CodeConsentTokenInvalid,
		CodeConsentTokenExpired, CodeConsentTokenMismatch, CodeDeclined, CodeInternal}
	for _, c := range server {
		if !c.Retriable() {
			t.Errorf("%s: server-side code must be retriable", c)
		}
	}
	for _, c := range client {
		if c.Retriable() {
			t.Errorf("%s: must not be retriable", c)
		}
	}
	if !CodeCancelled.Retriable() {
		t.Error("CANCELLED: nobody decided, so a retry may succeed")
	}
	if got := len(Codes()); got != len(server)+len(client)+3 { // + CANCELLED, RATE_LIMITED, APPROVAL_PENDING
		t.Errorf("Codes() has %d codes; a new code needs a decision here", got)
	}
}

// TestVerdict: the codes a tool may answer of its own call are those that
// say the call cannot succeed as asked; every code is decided here.
func TestVerdict(t *testing.T) {
	verdicts := map[Code]bool{CodeValidationFailed: true, CodeNotFound: true, CodePermissionDenied: true,
		CodeScopeRejected: true, CodeToolNotAllowed: true}
	for _, c := range Codes() {
		if c.Verdict() != verdicts[c] {
			t.Errorf("%s.Verdict() = %t", c, c.Verdict())
		}
	}
	if Code("SOMETHING_ELSE").Verdict() {
		t.Error("an unknown code is a verdict")
	}
}

// TestGateBody: only a result Result made is the gate's, however exactly
// another result copies its body.
func TestGateBody(t *testing.T) {
	res := Result(&Error{Code: CodeApprovalPending, Message: "Waiting.", ApprovalID: "apv_1"})
	if b, ours := GateBody(res); !ours || b.Code != CodeApprovalPending || b.ApprovalID != "apv_1" {
		t.Fatalf("GateBody(Result(…)) = %+v, %t", b, ours)
	}
	encoded, err := json.Marshal(res)
	if err != nil {
		t.Fatal(err)
	}
	copied := new(mcp.CallToolResult)
	if err := json.Unmarshal(encoded, copied); err != nil {
		t.Fatal(err)
	}
	if b, ours := GateBody(copied); ours {
		t.Errorf("a copy decoded from the wire is the gate's: %+v", b)
	}
	if b := BodyOfResult(copied); b.Code != CodeApprovalPending {
		t.Errorf("BodyOfResult of the copy = %+v", b)
	}
	copied.StructuredContent = json.RawMessage(encoded)
	if _, ours := GateBody(copied); ours {
		t.Error("a result holding raw JSON is the gate's")
	}
	if _, ours := GateBody(nil); ours {
		t.Error("no result is the gate's")
	}
}

func decodeBody(t *testing.T, res *mcp.CallToolResult) Body {
	t.Helper()
	if !res.IsError {
		t.Fatalf("result is not an error: %+v", res)
	}
	b, err := json.Marshal(res.StructuredContent)
	if err != nil {
		t.Fatal(err)
	}
	var body Body
	if err := json.Unmarshal(b, &body); err != nil {
		t.Fatal(err)
	}
	if len(res.Content) != 1 {
		t.Fatalf("want one text block, got %d", len(res.Content))
	}
	var fromText Body
	if err := json.Unmarshal([]byte(res.Content[0].(*mcp.TextContent).Text), &fromText); err != nil {
		t.Fatalf("text block is not the JSON body: %v", err)
	}
	tb, _ := json.Marshal(fromText)
	sb, _ := json.Marshal(body)
	if string(tb) != string(sb) {
		t.Errorf("text block %s differs from structuredContent %s", tb, sb)
	}
	return body
}

func TestResult(t *testing.T) {
	tests := []struct {
		name      string
		err       error
		want      Body
		forbidden string
	}{
		{
			name: "structured error keeps its fields",
			err: &Error{Code: CodeValidationFailed, Message: "bad id", Hint: "Fix id.",
				ValidationIssues: []ValidationIssue{{Path: "id", Message: "is required", Code: "required"}}},
			want: Body{Code: CodeValidationFailed, Message: "bad id", RecoveryHint: "Fix id.",
				ValidationIssues: []ValidationIssue{{Path: "id", Message: "is required", Code: "required"}}},
		},
		{
			name:      "the cause stays out",
			err:       &Error{Code: CodeUpstreamError, Message: "upstream failed", Hint: "Retry once.", Err: errors.New("dial tcp 10.0.0.1: secret-host")},
			want:      Body{Code: CodeUpstreamError, Retriable: true, Message: "upstream failed", RecoveryHint: "Retry once."},
			forbidden: "secret-host",
		},
		{
			name:      "unknown errors become INTERNAL_ERROR without their text",
			err:       fmt.Errorf("sql: no rows at /home/me/db.go:42"),
			want:      Body{Code: CodeInternal, Message: BodyOf(errors.New("")).Message, RecoveryHint: internalHint},
			forbidden: "db.go",
		},
		{
			name: "an unknown code is not put on the wire",
			err:  &Error{Code: "MADE_UP", Message: "x", Hint: "y"},
			want: Body{Code: CodeInternal, Message: "x", RecoveryHint: "y"},
		},
		{
			name: "a missing hint is filled in",
			err:  &Error{Code: CodeNotFound, Message: "gone"},
			want: Body{Code: CodeNotFound, Message: "gone", RecoveryHint: internalHint},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res := Result(tt.err)
			got := decodeBody(t, res)
			gb, _ := json.Marshal(got)
			wb, _ := json.Marshal(tt.want)
			if string(gb) != string(wb) {
				t.Errorf("body = %s\nwant   %s", gb, wb)
			}
			if tt.forbidden != "" && strings.Contains(res.Content[0].(*mcp.TextContent).Text, tt.forbidden) {
				t.Errorf("result leaks %q", tt.forbidden)
			}
		})
	}
}

func TestResultWithUnencodablePreview(t *testing.T) {
	res := Result(&Error{Code: CodeDryRunPreview, Message: "m", Hint: "h", Preview: map[string]any{"f": func() {}}})
	body := decodeBody(t, res)
	if body.Code != CodeDryRunPreview || body.Preview != nil {
		t.Errorf("body = %+v; want the error without its preview", body)
	}
}

func TestCheckJSON(t *testing.T) {
	if err := CheckJSON([]byte(`{"jsonrpc":"2.0","id":1,"params":{"arguments":{"a":1}}}`)); err != nil {
		t.Errorf("valid envelope: %v", err)
	}
	err := CheckJSON([]byte(`{"params":{"arguments":{"a":1},"arguments":{"a":2}}}`))
	if ErrorCode(err) != CodeValidationFailed || BodyOf(err).ValidationIssues[0].Path != "params.arguments" {
		t.Errorf("duplicate arguments: %v", err)
	}
	// A path is text the client chose: it is clipped where it is quoted.
	long := strings.Repeat("k", 5000)
	body := BodyOf(CheckJSON([]byte(`{"` + long + `":1,"` + long + `":2}`)))
	if body.Code != CodeValidationFailed || len(body.Message) > 400 || len(body.ValidationIssues[0].Path) > 300 || body.RecoveryHint == "" {
		t.Errorf("duplicate long key: %+v", body)
	}
}

func TestInvalidArguments(t *testing.T) {
	cause := errors.New("jsonschema-go's words")
	err := invalidArguments("refund", &strictjson.Issue{Path: "amount", Message: "must be at least 0", Code: "minimum", Err: cause})
	body := BodyOf(err)
	want := Body{Code: CodeValidationFailed, Message: "Invalid arguments for refund: amount must be at least 0.",
		RecoveryHint:     "Fix amount: it must be at least 0. Then call refund again.",
		ValidationIssues: []ValidationIssue{{Path: "amount", Message: "must be at least 0", Code: "minimum"}}}
	if fmt.Sprint(body) != fmt.Sprint(want) || !errors.Is(err, cause) {
		t.Errorf("body = %+v, want %+v; cause kept: %v", body, want, errors.Is(err, cause))
	}
	if got := BodyOf(invalidArguments("refund", &strictjson.Issue{Message: "must be of type object, not array", Code: "type"})); got.Message != "Invalid arguments for refund: the arguments must be of type object, not array." || got.ValidationIssues[0].Path != "" {
		t.Errorf("whole arguments: %+v", got)
	}
}
