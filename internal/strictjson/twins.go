package strictjson

import (
	"strings"
	"unicode"
)

// caseTwins are the property names a schema declares for an object, by
// their case fold, and the same for each property that is an object of
// declared properties itself. A reader that matches keys without regard to
// case (Go's encoding/json binding a struct does) takes an argument that
// differs from a declared one only in case for the declared one, so the
// gate would check one value and the tool run with another: {"amount": 5,
// "Amount": 5000} is 5 to the gate's policy and 5000 to such a server.
// Keys of objects with no declared properties (a map of environment
// variables, where HTTP_PROXY and http_proxy are two) are not compared.
type caseTwins struct {
	names  map[string]*caseTwins // an object's declared names, each with its own value's twins (nil for none)
	folded map[string]string     // the declared names by their fold
	items  *caseTwins            // an array's items'
}

// caseTwinsOf compiles the declared properties of schema, and of the
// objects it holds as properties or array items; nil when it declares
// none.
func caseTwinsOf(schema map[string]any) *caseTwins {
	if schema == nil {
		return nil
	}
	props, _ := schema["properties"].(map[string]any)
	items, _ := schema["items"].(map[string]any)
	c := &caseTwins{items: caseTwinsOf(items)}
	if len(props) > 0 {
		c.names, c.folded = make(map[string]*caseTwins, len(props)), make(map[string]string, len(props))
	}
	for name, sub := range props {
		m, _ := sub.(map[string]any)
		c.names[name] = caseTwinsOf(m)
		c.folded[fold(name)] = name
	}
	if c.names == nil && c.items == nil {
		return nil
	}
	return c
}

// find returns the first argument in v, at path, that is not declared but
// differs from a declared one only in case. A declared name costs a map
// lookup; only another is folded.
func (c *caseTwins) find(path string, v any) *Issue {
	switch v := v.(type) {
	case []any:
		if c.items != nil {
			for _, e := range v {
				if issue := c.items.find(path+"[]", e); issue != nil {
					return issue
				}
			}
		}
	case map[string]any:
		for k, e := range v {
			if inner, declared := c.names[k]; declared {
				if inner != nil {
					if issue := inner.find(join(path, k), e); issue != nil {
						return issue
					}
				}
				continue
			}
			if name, twin := c.folded[fold(k)]; twin {
				return &Issue{Path: join(path, k), Code: "case_twin",
					Message: "differs from the argument " + PathKey(name) + " only in case, which some servers read as that argument"}
			}
		}
	}
	return nil
}

// fold is s with each letter replaced by the least of the letters that
// match it without regard to case (Unicode simple folding, as
// bytes.EqualFold and Go's encoding/json compare): two names match so
// exactly when their folds are equal.
func fold(s string) string {
	return strings.Map(func(r rune) rune {
		least := r
		for f := unicode.SimpleFold(r); f != r; f = unicode.SimpleFold(f) {
			least = min(least, f)
		}
		return least
	}, s)
}
