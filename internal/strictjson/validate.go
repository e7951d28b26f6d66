package strictjson

import (
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/google/jsonschema-go/jsonschema"
)

// ResolveSchema compiles a schema, given in any of the forms the SDK
// accepts (a *jsonschema.Schema, a map, raw JSON), for jsonschema-go; nil
// for no schema.
func ResolveSchema(schema any) (*jsonschema.Resolved, error) {
	if schema == nil {
		return nil, nil
	}
	s, ok := schema.(*jsonschema.Schema)
	if !ok {
		b, err := json.Marshal(schema)
		if err != nil {
			return nil, fmt.Errorf("encoding input schema: %w", err)
		}
		s = new(jsonschema.Schema)
		if err := json.Unmarshal(b, s); err != nil {
			return nil, fmt.Errorf("reading input schema: %w", err)
		}
	}
	r, err := s.Resolve(&jsonschema.ResolveOptions{ValidateDefaults: false})
	if err != nil {
		return nil, fmt.Errorf("resolving input schema: %w", err)
	}
	return r, nil
}

// Issue is the first way a value does not fit its schema.
type Issue struct {
	// Path is the argument at fault, as a path ("owner.email", "tags[]"
	// for any item of tags); "" is the value itself.
	Path string
	// Message says what is wrong, as a predicate of the argument: "is
	// required", "must be at most 5".
	Message string
	// Code is the schema keyword broken: type, required, enum, minimum,
	// additional_properties and so on.
	Code string
	// Err is jsonschema-go's own report, when it found the issue; it is
	// for logs, and its words are not the Message.
	Err error
}

// Validator checks arguments against one input schema: the compiled fast
// path for the common schemas (see argSchema), jsonschema-go for
// the others, nothing when the tool has no schema. The zero Validator
// accepts everything.
type Validator struct {
	fast   *argSchema
	schema *jsonschema.Resolved
	twins  *caseTwins // arguments that differ from declared ones only in case are refused
}

// Compile compiles an input schema (any form the SDK accepts; nil for
// none).
func Compile(inputSchema any) (Validator, error) {
	if inputSchema == nil {
		return Validator{}, nil
	}
	var twins *caseTwins
	if m, err := SchemaMap(inputSchema); err == nil {
		twins = caseTwinsOf(m)
		if fast := compileObject(m); fast != nil {
			return Validator{fast: fast, twins: twins}, nil
		}
	}
	s, err := ResolveSchema(inputSchema)
	if err != nil {
		return Validator{}, err
	}
	return Validator{schema: s, twins: twins}, nil
}

// Check returns the first issue with args, or nil. The fast path and
// jsonschema-go name an issue by the same path and code.
func (v Validator) Check(args map[string]any) *Issue {
	switch {
	case v.fast != nil:
		if issue := v.fast.validate("", args); issue != nil {
			return issue
		}
	case v.schema != nil:
		if err := v.schema.Validate(args); err != nil {
			issue := issueOf(err.Error())
			issue.Err = err
			return &issue
		}
	}
	if v.twins != nil {
		return v.twins.find("", args)
	}
	return nil
}

// SchemaMap returns a fresh copy of a schema, given in any form the SDK
// accepts, as a JSON object.
func SchemaMap(schema any) (map[string]any, error) {
	b, err := json.Marshal(schema)
	if err != nil {
		return nil, fmt.Errorf("schema cannot be encoded as JSON: %w", err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil || m == nil {
		return nil, fmt.Errorf("schema is not a JSON object")
	}
	return m, nil
}

// DropRequired removes the named arguments from a schema's required list.
func DropRequired(m map[string]any, names []string) {
	if req, ok := m["required"].([]any); ok {
		kept := req[:0]
		for _, r := range req {
			if name, _ := r.(string); !slices.Contains(names, name) {
				kept = append(kept, r)
			}
		}
		m["required"] = kept
	}
}

// issueOf turns a jsonschema-go validation message such as
//
//	validating root: validating /properties/n: validating /properties/n/properties/a: type: q has type "string", want "integer"
//
// into a path in argument terms ("n.a"), a message and a short code.
func issueOf(msg string) Issue {
	msg = strings.TrimPrefix(msg, "validating root: ")
	schemaPath := ""
	for strings.HasPrefix(msg, "validating /") {
		i := strings.Index(msg, ": ")
		if i < 0 {
			break
		}
		schemaPath = msg[len("validating "):i]
		msg = msg[i+2:]
	}
	path := argumentPath(schemaPath)
	code := "invalid"
	if i := strings.Index(msg, ": "); i > 0 && !strings.ContainsAny(msg[:i], " \"") {
		code, msg = msg[:i], msg[i+2:]
	}
	join := func(name string) string {
		if path == "" {
			return name
		}
		return path + "." + name
	}
	switch {
	case code == "required":
		if names := quotedNames(msg); len(names) > 0 {
			return Issue{Path: join(names[0]), Message: "is required", Code: "required"}
		}
	case strings.HasPrefix(msg, "unexpected additional properties"):
		if names := quotedNames(msg); len(names) > 0 {
			return Issue{Path: join(names[0]), Message: "is not an argument of this tool; remove it", Code: "additional_properties"}
		}
	case code == "enum":
		if i := strings.Index(msg, " does not equal any of: ["); i >= 0 {
			allowed := strings.TrimSuffix(msg[i+len(" does not equal any of: ["):], "]")
			return Issue{Path: path, Message: fmt.Sprintf("must be one of %s, not %s", strings.Join(strings.Fields(allowed), ", "), msg[:i]), Code: "enum"}
		}
	case code == "minimum" || code == "maximum" || code == "exclusiveMinimum" || code == "exclusiveMaximum":
		// "-1/1 is less than 0.000000"
		if i := strings.LastIndex(msg, " than "); i >= 0 {
			bound := msg[i+len(" than "):]
			if f, err := strconv.ParseFloat(bound, 64); err == nil {
				bound = strconv.FormatFloat(f, 'f', -1, 64)
			}
			words := map[string]string{"minimum": "at least", "maximum": "at most", "exclusiveMinimum": "more than", "exclusiveMaximum": "less than"}
			return Issue{Path: path, Message: fmt.Sprintf("must be %s %s", words[code], bound), Code: code}
		}
	case code == "type":
		// "q has type "string", want "integer""
		if i := strings.Index(msg, " has type "); i >= 0 {
			rest := msg[i+len(" has type "):]
			if j := strings.Index(rest, ", want "); j >= 0 {
				return Issue{Path: path, Message: fmt.Sprintf("must be of type %s, not %s", strings.Trim(rest[j+len(", want "):], `"`), strings.Trim(rest[:j], `"`)), Code: "type"}
			}
		}
	}
	return Issue{Path: path, Message: "is invalid: " + msg, Code: code}
}

// argumentPath maps a schema location (/properties/a/items/properties/b) to an
// argument path (a[].b).
func argumentPath(schemaPath string) string {
	var b strings.Builder
	parts := strings.Split(strings.Trim(schemaPath, "/"), "/")
	for i := 0; i < len(parts); i++ {
		switch parts[i] {
		case "properties":
			if i+1 < len(parts) {
				if b.Len() > 0 {
					b.WriteByte('.')
				}
				b.WriteString(parts[i+1])
				i++
			}
		case "items", "additionalItems":
			b.WriteString("[]")
		case "prefixItems":
			if i+1 < len(parts) {
				b.WriteString("[" + parts[i+1] + "]")
				i++
			}
		}
	}
	return b.String()
}

// quotedNames returns the double-quoted strings in s, in order.
func quotedNames(s string) []string {
	var out []string
	for {
		i := strings.IndexByte(s, '"')
		if i < 0 {
			return out
		}
		j := strings.IndexByte(s[i+1:], '"')
		if j < 0 {
			return out
		}
		out = append(out, s[i+1:i+1+j])
		s = s[i+j+2:]
	}
}
