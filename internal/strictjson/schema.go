package strictjson

import (
	"fmt"
	"math"
	"slices"
	"sort"
	"strings"
	"unicode/utf8"
)

// argSchema is a tool input schema compiled for the hot path of every call. It
// covers the JSON Schema keywords tool schemas use almost always (type,
// properties, required, additionalProperties: false, enum, items, numeric
// and length bounds) and checks a call in a tenth of jsonschema-go's time,
// with 2 allocations where jsonschema-go makes 66 (BenchmarkCheck, a
// four-property schema). A schema that uses anything else is validated by
// jsonschema-go instead (see compileArgSchema).
type argSchema struct {
	types      []string // empty: any type
	properties map[string]*argSchema
	names      []string // sorted property names, for a stable report order
	required   []string
	closed     bool // additionalProperties: false
	enum       []any
	items      *argSchema
	min, max   *float64
	exclMin    *float64
	exclMax    *float64
	minLen     *int
	maxLen     *int
}

// annotationKeywords change nothing about validity.
var annotationKeywords = map[string]bool{
	"title": true, "description": true, "default": true, "examples": true, "$schema": true,
	"$comment": true, "format": true, "deprecated": true, "readOnly": true, "writeOnly": true,
}

// compileArgSchema compiles schema (any JSON form) into an argSchema. It
// returns nil when the schema uses a keyword it does not cover.
func compileArgSchema(schema any) *argSchema {
	m, err := SchemaMap(schema)
	if err != nil {
		return nil
	}
	return compileObject(m)
}

// compileObject compiles one schema object, and each it holds (a
// property's, the items'); nil when any of them uses a keyword the fast
// path does not cover, or writes one in a form it does not read.
func compileObject(m map[string]any) *argSchema {
	s := &argSchema{}
	for k, v := range m {
		if !s.compileKeyword(k, v) {
			return nil
		}
	}
	return s
}

// compileKeyword sets what the keyword k says, and reports whether the
// fast path covers it as written: an annotation changes nothing, and any
// other keyword sends the whole schema to jsonschema-go.
func (s *argSchema) compileKeyword(k string, v any) bool {
	ok := true
	switch k {
	case "type":
		switch t := v.(type) {
		case string:
			s.types = []string{t}
		case []any:
			s.types, ok = stringsOf(t)
		default:
			ok = false
		}
	case "properties":
		props, isMap := v.(map[string]any)
		if !isMap {
			return false
		}
		s.properties, s.names, ok = compileProperties(props)
	case "required":
		list, isList := v.([]any)
		s.required, ok = stringsOf(list)
		ok = ok && isList
		sort.Strings(s.required)
	case "additionalProperties":
		closed, isBool := v.(bool)
		ok = isBool
		s.closed = !closed
	case "enum":
		list, isList := v.([]any)
		ok = isList && !slices.ContainsFunc(list, structured)
		s.enum = list
	case "items":
		im, isMap := v.(map[string]any)
		if !isMap {
			return false
		}
		s.items = compileObject(im)
		ok = s.items != nil
	case "minimum":
		s.min, ok = numberOf(v)
	case "maximum":
		s.max, ok = numberOf(v)
	case "exclusiveMinimum":
		s.exclMin, ok = numberOf(v)
	case "exclusiveMaximum":
		s.exclMax, ok = numberOf(v)
	case "minLength":
		s.minLen, ok = lengthOf(v)
	case "maxLength":
		s.maxLen, ok = lengthOf(v)
	default:
		ok = annotationKeywords[k]
	}
	return ok
}

// compileProperties compiles the schema of each property, and lists
// their names sorted, for a stable report order; ok is false when one is
// not an object or does not compile.
func compileProperties(props map[string]any) (properties map[string]*argSchema, names []string, ok bool) {
	properties = make(map[string]*argSchema, len(props))
	for name, p := range props {
		pm, isMap := p.(map[string]any)
		if !isMap {
			return nil, nil, false
		}
		sub := compileObject(pm)
		if sub == nil {
			return nil, nil, false
		}
		properties[name] = sub
		names = append(names, name)
	}
	sort.Strings(names)
	return properties, names, true
}

// stringsOf reads a list of type names or property names; ok is false
// when one is not a string.
func stringsOf(list []any) (names []string, ok bool) {
	ok = true
	for _, e := range list {
		name, isString := e.(string)
		ok = ok && isString
		names = append(names, name)
	}
	return names, ok
}

// structured reports whether an enum value is an object or an array,
// which the fast path does not compare.
func structured(v any) bool {
	switch v.(type) {
	case map[string]any, []any:
		return true
	}
	return false
}

// numberOf reads a numeric bound.
func numberOf(v any) (*float64, bool) {
	f, ok := v.(float64)
	return &f, ok
}

// lengthOf reads a length bound: a whole number, 0 or more.
func lengthOf(v any) (*int, bool) {
	f, ok := v.(float64)
	n := int(f)
	return &n, ok && f == math.Trunc(f) && f >= 0
}

func typeOf(v any) string {
	switch v := v.(type) {
	case nil:
		return "null"
	case bool:
		return "boolean"
	case string:
		return "string"
	case float64:
		if v == math.Trunc(v) && !math.IsInf(v, 0) {
			return "integer"
		}
		return "number"
	case []any:
		return "array"
	case map[string]any:
		return "object"
	}
	return fmt.Sprintf("%T", v)
}

func (s *argSchema) typeOK(v any) bool {
	if len(s.types) == 0 {
		return true
	}
	t := typeOf(v)
	for _, want := range s.types {
		if want == t || (want == "number" && t == "integer") {
			return true
		}
	}
	return false
}

func join(path, name string) string {
	if path == "" {
		return name
	}
	return path + "." + name
}

// validate reports the first problem with v, or nil.
func (s *argSchema) validate(path string, v any) *Issue {
	if !s.typeOK(v) {
		return &Issue{Path: path, Code: "type",
			Message: fmt.Sprintf("must be of type %s, not %s", strings.Join(s.types, " or "), typeOf(v))}
	}
	if len(s.enum) > 0 && !slices.Contains(s.enum, v) {
		allowed := make([]string, len(s.enum))
		for i, e := range s.enum {
			allowed[i] = fmt.Sprint(e)
		}
		return &Issue{Path: path, Code: "enum",
			Message: fmt.Sprintf("must be one of %s, not %v", strings.Join(allowed, ", "), v)}
	}
	switch v := v.(type) {
	case map[string]any:
		return s.validateObject(path, v)
	case []any:
		if s.items != nil {
			for _, e := range v {
				if issue := s.items.validate(path+"[]", e); issue != nil {
					return issue
				}
			}
		}
	case float64:
		bound := func(word string, b float64) *Issue {
			return &Issue{Path: path, Code: word, Message: fmt.Sprintf("must be %s %s", map[string]string{
				"minimum": "at least", "maximum": "at most", "exclusiveMinimum": "more than", "exclusiveMaximum": "less than",
			}[word], fmt.Sprint(b))}
		}
		switch {
		case s.min != nil && v < *s.min:
			return bound("minimum", *s.min)
		case s.max != nil && v > *s.max:
			return bound("maximum", *s.max)
		case s.exclMin != nil && v <= *s.exclMin:
			return bound("exclusiveMinimum", *s.exclMin)
		case s.exclMax != nil && v >= *s.exclMax:
			return bound("exclusiveMaximum", *s.exclMax)
		}
	case string:
		if s.minLen != nil || s.maxLen != nil {
			n := utf8.RuneCountInString(v)
			if s.minLen != nil && n < *s.minLen {
				return &Issue{Path: path, Code: "minLength", Message: fmt.Sprintf("must be at least %d characters long", *s.minLen)}
			}
			if s.maxLen != nil && n > *s.maxLen {
				return &Issue{Path: path, Code: "maxLength", Message: fmt.Sprintf("must be at most %d characters long", *s.maxLen)}
			}
		}
	}
	return nil
}

func (s *argSchema) validateObject(path string, v map[string]any) *Issue {
	for _, name := range s.required {
		if _, ok := v[name]; !ok {
			return &Issue{Path: join(path, name), Code: "required", Message: "is required"}
		}
	}
	if s.closed && len(v) > 0 {
		var unknown []string
		for k := range v {
			if _, ok := s.properties[k]; !ok {
				unknown = append(unknown, k)
			}
		}
		if len(unknown) > 0 {
			sort.Strings(unknown)
			return &Issue{Path: join(path, unknown[0]), Code: "additional_properties",
				Message: "is not an argument of this tool; remove it"}
		}
	}
	for _, name := range s.names {
		if e, ok := v[name]; ok {
			if issue := s.properties[name].validate(join(path, name), e); issue != nil {
				return issue
			}
		}
	}
	return nil
}
