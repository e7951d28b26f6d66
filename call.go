package interlock

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"sort"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/interlock-mcp/interlock/approval"
	"github.com/interlock-mcp/interlock/internal/strictjson"
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

// Identity is who makes a call, approves one or signs in: a principal of a
// tenant, with the groups its credential names. It is [approval.Identity],
// the one type every face compares whole.
type Identity = approval.Identity

// Hints are a tool's behavioural annotations with the MCP specification's
// defaults made explicit: a tool that says nothing is destructive and
// open-world, neither read-only nor idempotent.
type Hints struct {
	ReadOnly    bool `json:"readOnly"`
	Destructive bool `json:"destructive"`
	Idempotent  bool `json:"idempotent"`
	OpenWorld   bool `json:"openWorld"`
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
	// sent are the business arguments as the client sent them, before a
	// human's choices were added: what grants are bound to. sentDigest
	// holds their digest once computed.
	sent       map[string]any
	sentDigest *[32]byte
	// definition is the digest of the tool's definition as advertised.
	definition [32]byte
	// policy is the policy the call started under: every decision about
	// it, and every redaction of its arguments, comes from this one.
	policy Policy
	// confirmedBy names the key that confirmed the call, once one did;
	// replaced holds the values a human's choices replaced. Both are for
	// the audit log.
	confirmedBy string
	replaced    map[string]any
	// approvers are who approved the call, in mode approval; grant the
	// standing grant that confirmed it.
	approvers []string
	grant     string
	// approval is the approval the call waited for or ran under.
	approval string
}

// parsedArgs is the result of splitting raw arguments.
type parsedArgs struct {
	args    map[string]any
	raw     json.RawMessage // the business arguments as JSON, for the tool
	confirm bool
	token   string
}

// CheckJSON reports whether data is exactly one JSON value that every
// reader decodes the same way, read as the gate reads a call's arguments:
// no duplicate object keys at any depth (compared after unescaping), valid
// UTF-8 with no lone surrogate escapes, numbers of at most 64 bytes that a
// 64-bit float holds exactly, nesting at most 64 deep. It returns nil or a
// VALIDATION_FAILED [*Error] naming the path of the first problem, so a
// face that checks a whole request body with it refuses it in the gate's
// words.
func CheckJSON(data []byte) error {
	return invalidJSON(strictjson.Check(data))
}

// splitArgs reads raw tool arguments, which must be a JSON object (absent
// and null mean {}), with the one strict decoder ([strictjson.Decode]) and
// takes the meta-arguments out of them. Meta-arguments are recognised on the
// decoded keys, so an escaped spelling such as "\u005f_confirm" is one too.
//
// The bytes the tool receives always decode to exactly args: they are the
// client's own bytes when no meta-argument was present (the decoder accepted
// them, so every reader decodes them alike), and args re-encoded otherwise.
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
	v, err := strictjson.Decode(trimmed)
	if err != nil {
		return p, invalidJSON(err)
	}
	p.args = v.(map[string]any)
	var unknown []string
	meta := false
	for k, v := range p.args {
		if !strings.HasPrefix(k, metaPrefix) {
			continue
		}
		meta = true
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
			issues[i] = ValidationIssue{Path: clip(strictjson.PathKey(k)), Message: "unknown meta-argument", Code: "unknown_meta_argument"}
		}
		return p, &Error{
			Code:             CodeValidationFailed,
			Message:          fmt.Sprintf("Unknown meta-argument %s: names that start with %q are reserved for interlock.", clip(strings.Join(unknown, ", ")), metaPrefix),
			Hint:             fmt.Sprintf("Remove it; the meta-arguments interlock knows are %s and %s.", MetaConfirm, MetaConfirmToken),
			ValidationIssues: issues,
		}
	}
	if !meta {
		p.raw = trimmed
		return p, nil
	}
	if p.raw, err = encodeArgs(p.args); err != nil {
		return p, err
	}
	return p, nil
}

// encodeArgs writes decoded arguments back as JSON. Every value came from
// [strictjson.Decode], so encoding cannot fail short of a bug; numbers come
// out in their shortest form, which denotes the same float64.
func encodeArgs(args map[string]any) (json.RawMessage, error) {
	b, err := json.Marshal(args)
	if err != nil {
		return nil, fmt.Errorf("encoding arguments: %w", err)
	}
	return b, nil
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

// digest returns the digest of the arguments the client sent, computing it
// once: grants, approvals and audit records of one call all bind it.
func (c *Call) digest() ([32]byte, error) {
	if c.sentDigest == nil {
		d, err := seal.Digest(c.sent)
		if err != nil {
			return d, err
		}
		c.sentDigest = &d
	}
	return *c.sentDigest, nil
}

// DefinitionDigest returns the digest of a tool's definition as advertised:
// the canonical form of its JSON, every field included.
func DefinitionDigest(t *mcp.Tool) [32]byte {
	sum, err := seal.DigestOf(t)
	if err != nil {
		// A definition that cannot be encoded still gets a digest of its
		// own (its error), which no other definition shares by accident.
		return sha256.Sum256([]byte("unencodable tool definition: " + t.Name + ": " + err.Error()))
	}
	return sum
}

// maxText bounds a value quoted in a message or a log record, so that a
// huge argument or error costs one short line.
const maxText = 200

// clip shortens s to at most maxText bytes, on a rune boundary, saying how
// long it was.
func clip(s string) string {
	if len(s) <= maxText {
		return s
	}
	return strings.ToValidUTF8(s[:maxText], "") + fmt.Sprintf("… (%d bytes)", len(s))
}
