package policy

import (
	"fmt"
	"math"
	"path"
	"strconv"
	"strings"

	"cel.dev/cel-go/cel"
	"cel.dev/cel-go/common/types"
	"cel.dev/cel-go/common/types/ref"
)

// functions are the CEL functions interlock adds for what rules typically
// test, where the obvious expression fails open:
//
//   - cleanPath(p): p with "." and ".." resolved and repeated slashes
//     folded, as path.Clean does. A relative path is an error: it means
//     something else in every working directory.
//   - isUnder(p, dir): whether the cleaned absolute path p is dir or lies
//     inside it. args.path.startsWith('/srv/notes/') is true for
//     /srv/notes/../secrets; isUnder(args.path, '/srv/notes') is not.
//   - num(x): x as a double, whether the agent sent a number or a string
//     of one ("5000", " 12.5 "); anything else is an error. args.amount >
//     1000 cannot compare a string; num(args.amount) > 1000 can.
//
// An error makes the condition one that cannot be evaluated, so a
// restricting rule applies and an allowing rule does not.
var functions = []cel.EnvOption{
	// num(args.amount) > 1000 compares a double with an int.
	cel.CrossTypeNumericComparisons(true),
	cel.Function("cleanPath", cel.Overload("cleanPath_string", []*cel.Type{cel.StringType}, cel.StringType,
		cel.UnaryBinding(func(v ref.Val) ref.Val {
			p, err := cleanAbsolute(v)
			if err != nil {
				return types.NewErr("cleanPath: %v", err)
			}
			return types.String(p)
		}))),
	cel.Function("isUnder", cel.Overload("isUnder_string_string", []*cel.Type{cel.StringType, cel.StringType}, cel.BoolType,
		cel.BinaryBinding(func(v, d ref.Val) ref.Val {
			p, err := cleanAbsolute(v)
			if err != nil {
				return types.NewErr("isUnder: %v", err)
			}
			dir, err := cleanAbsolute(d)
			if err != nil {
				return types.NewErr("isUnder: directory: %v", err)
			}
			return types.Bool(p == dir || dir == "/" || strings.HasPrefix(p, dir+"/"))
		}))),
	cel.Function("num", cel.Overload("num_dyn", []*cel.Type{cel.DynType}, cel.DoubleType,
		cel.UnaryBinding(func(v ref.Val) ref.Val {
			f, err := number(v.Value())
			if err != nil {
				return types.NewErr("num: %v", err)
			}
			return types.Double(f)
		}))),
}

// cleanAbsolute cleans an absolute path; it refuses relative paths and
// NUL bytes, which the filesystem would cut the path at.
func cleanAbsolute(v ref.Val) (string, error) {
	s, ok := v.Value().(string)
	switch {
	case !ok:
		return "", fmt.Errorf("not a string")
	case !strings.HasPrefix(s, "/"):
		return "", fmt.Errorf("%q is not an absolute path", clipText(s))
	case strings.ContainsRune(s, 0):
		return "", fmt.Errorf("path contains a NUL byte")
	}
	return path.Clean(s), nil
}

// number reads a CEL value as a double: numbers as they are, strings when
// they hold exactly one decimal number (no hex, no infinities).
func number(v any) (float64, error) {
	switch v := v.(type) {
	case float64:
		return v, nil
	case int64:
		return float64(v), nil
	case uint64:
		return float64(v), nil
	case string:
		s := strings.TrimSpace(v)
		if s == "" || strings.ContainsAny(s, "xXpPnN_iI") {
			return 0, fmt.Errorf("%q is not a decimal number", clipText(v))
		}
		f, err := strconv.ParseFloat(s, 64)
		if err != nil || math.IsInf(f, 0) {
			return 0, fmt.Errorf("%q is not a decimal number", clipText(v))
		}
		return f, nil
	}
	return 0, fmt.Errorf("%T is not a number", v)
}

// clipText bounds a value quoted in an error that reaches the log.
func clipText(s string) string {
	if len(s) > 64 {
		return strings.ToValidUTF8(s[:64], "") + "…"
	}
	return s
}
