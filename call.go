package interlock

import (
	"bytes"
	"encoding/json"
	"fmt"
	"sort"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/interlock-mcp/interlock/seal"
)

// Meta-argument names. A meta-argument is addressed to interlock, not to the
// tool: it is taken out of the raw arguments before schema validation, never
// forwarded, and never shown in previews or logs as an argument.
const (
	MetaConfirm      = "__confirm"
	MetaConfirmToken = "__confirm_token"
)

// metaPrefix marks every meta-argument, known or not.
const metaPrefix = seal.MetaPrefix

// Identity is who makes a call: the principal and the tenant it acts for.
type Identity struct {
	Principal string
	Tenant    string
}

// Hints are a tool's behavioural annotations with the MCP specification's
// defaults made explicit: a tool that says nothing is destructive and
// open-world, neither read-only nor idempotent.
type Hints struct {
	ReadOnly    bool
	Destructive bool
	Idempotent  bool
	OpenWorld   bool
}

// HintsOf reads the annotations of an MCP tool, applying the specification's
// defaults for every hint that is absent. The destructive hint only means
// something for a tool that is not read-only, so a read-only tool is never
// destructive.
func HintsOf(a *mcp.ToolAnnotations) Hints {
	h := Hints{Destructive: true, OpenWorld: true}
	if a == nil {
		return h
	}
	h.ReadOnly = a.ReadOnlyHint
	h.Idempotent = a.IdempotentHint
	if a.DestructiveHint != nil {
		h.Destructive = *a.DestructiveHint
	}
	if h.ReadOnly {
		h.Destructive = false
	}
	if a.OpenWorldHint != nil {
		h.OpenWorld = *a.OpenWorldHint
	}
	return h
}

// Annotations returns h as MCP annotations with every hint stated, so a
// client never has to guess a default.
func (h Hints) Annotations(title string) *mcp.ToolAnnotations {
	destructive, openWorld := h.Destructive, h.OpenWorld
	return &mcp.ToolAnnotations{
		Title:           title,
		ReadOnlyHint:    h.ReadOnly,
		DestructiveHint: &destructive,
		IdempotentHint:  h.Idempotent,
		OpenWorldHint:   &openWorld,
	}
}

// Call is one tool call as the policy sees it.
type Call struct {
	Tool     string
	Upstream string
	Hints    Hints
	Identity
	// Args are the business arguments: the raw arguments less every
	// meta-argument.
	Args map[string]any
	// Confirm is the agent's per-call key: __confirm was the boolean true.
	Confirm bool
	// ConfirmToken is the __confirm_token the agent passed, if any.
	ConfirmToken string

	raw   json.RawMessage // the business arguments, as the tool will get them
	human []string        // arguments a human picks in a form
}

// parsedArgs is the result of splitting raw arguments.
type parsedArgs struct {
	args    map[string]any
	raw     json.RawMessage // the business arguments as JSON, for the tool
	confirm bool
	token   string
}

// splitArgs parses raw tool arguments, which must be a JSON object (absent
// and null mean {}), and takes the meta-arguments out of them.
func splitArgs(raw json.RawMessage) (parsedArgs, error) {
	var p parsedArgs
	trimmed := bytes.TrimSpace(raw)
	if len(trimmed) == 0 || bytes.Equal(trimmed, []byte("null")) {
		p.args, p.raw = map[string]any{}, json.RawMessage("{}")
		return p, nil
	}
	if trimmed[0] != '{' {
		return p, &Error{
			Code:             CodeValidationFailed,
			Message:          "The tool arguments must be a JSON object.",
			Hint:             `Send the arguments as a JSON object of named values, such as {"id": "acct_9931"}.`,
			ValidationIssues: []ValidationIssue{{Path: "", Message: "arguments are not a JSON object", Code: "type"}},
		}
	}
	if err := json.Unmarshal(trimmed, &p.args); err != nil {
		return p, &Error{
			Code:             CodeValidationFailed,
			Message:          "The tool arguments are not valid JSON.",
			Hint:             "Send the arguments as one well-formed JSON object.",
			ValidationIssues: []ValidationIssue{{Path: "", Message: "malformed JSON", Code: "syntax"}},
			Err:              err,
		}
	}
	// Most calls carry no meta-argument: then the raw bytes go on as they are.
	if !bytes.Contains(trimmed, []byte(`"`+metaPrefix)) {
		p.raw = trimmed
		return p, nil
	}
	var unknown []string
	for k, v := range p.args {
		if !strings.HasPrefix(k, metaPrefix) {
			continue
		}
		delete(p.args, k)
		switch k {
		case MetaConfirm:
			b, ok := v.(bool)
			if !ok {
				return p, metaTypeError(MetaConfirm, "a boolean", v, fmt.Sprintf("Pass %s: true (a boolean, not a string) to confirm this call.", MetaConfirm))
			}
			p.confirm = b
		case MetaConfirmToken:
			s, ok := v.(string)
			if !ok {
				return p, metaTypeError(MetaConfirmToken, "a string", v, fmt.Sprintf("Pass %s exactly as it came in confirm_token.", MetaConfirmToken))
			}
			p.token = s
		default:
			unknown = append(unknown, k)
		}
	}
	if len(unknown) > 0 {
		sort.Strings(unknown)
		issues := make([]ValidationIssue, len(unknown))
		for i, k := range unknown {
			issues[i] = ValidationIssue{Path: k, Message: "unknown meta-argument", Code: "unknown_meta_argument"}
		}
		return p, &Error{
			Code:             CodeValidationFailed,
			Message:          fmt.Sprintf("Unknown meta-argument %s: names that start with %q are reserved for interlock.", strings.Join(unknown, ", "), metaPrefix),
			Hint:             fmt.Sprintf("Remove %s; the meta-arguments interlock knows are %s and %s.", strings.Join(unknown, ", "), MetaConfirm, MetaConfirmToken),
			ValidationIssues: issues,
		}
	}
	// Re-encode from raw values so numbers and strings reach the tool
	// byte for byte as the client sent them.
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(trimmed, &fields); err != nil {
		return p, fmt.Errorf("re-reading arguments: %w", err)
	}
	for k := range fields {
		if strings.HasPrefix(k, metaPrefix) {
			delete(fields, k)
		}
	}
	b, err := json.Marshal(fields)
	if err != nil {
		return p, fmt.Errorf("re-encoding arguments: %w", err)
	}
	p.raw = b
	return p, nil
}

// metaTypeError reports a meta-argument of the wrong JSON type.
func metaTypeError(name, want string, got any, hint string) error {
	return &Error{
		Code:             CodeValidationFailed,
		Message:          fmt.Sprintf("%s must be %s, not %s.", name, want, jsonKind(got)),
		Hint:             hint,
		ValidationIssues: []ValidationIssue{{Path: name, Message: "must be " + want, Code: "type"}},
	}
}

func jsonKind(v any) string {
	switch v.(type) {
	case string:
		return "a string"
	case float64:
		return "a number"
	case nil:
		return "null"
	case map[string]any:
		return "an object"
	case []any:
		return "an array"
	case bool:
		return "a boolean"
	}
	return fmt.Sprintf("%T", v)
}
