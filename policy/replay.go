package policy

import (
	"maps"
	"slices"

	"cel.dev/cel-go/cel"
	celast "cel.dev/cel-go/common/ast"
	"cel.dev/cel-go/common/operators"

	"github.com/interlock-mcp/interlock"
	"github.com/interlock-mcp/interlock/redact"
)

// argsRead returns the arguments a compiled condition reads by name
// (args.x, args["x"], has(args.x)), and whether it also reads args in a
// way no name says: as a whole (args.exists(…)) or at a key computed when
// it runs.
func argsRead(a *cel.Ast) (names []string, whole bool) {
	uses, named := 0, 0
	isArgs := func(e celast.Expr) bool { return e.Kind() == celast.IdentKind && e.AsIdent() == "args" }
	celast.PostOrderVisit(a.NativeRep().Expr(), celast.NewExprVisitor(func(e celast.Expr) {
		switch e.Kind() {
		case celast.IdentKind:
			if isArgs(e) {
				uses++
			}
		case celast.SelectKind:
			if sel := e.AsSelect(); isArgs(sel.Operand()) {
				named++
				names = append(names, sel.FieldName())
			}
		case celast.CallKind:
			call := e.AsCall()
			if call.FunctionName() != operators.Index || len(call.Args()) != 2 || !isArgs(call.Args()[0]) || call.Args()[1].Kind() != celast.LiteralKind {
				return
			}
			if key, ok := call.Args()[1].AsLiteral().Value().(string); ok {
				named++
				names = append(names, key)
			}
		}
	}))
	slices.Sort(names)
	return slices.Compact(names), uses > named
}

// Unfaithful returns the rules whose condition, on the way to f's
// decision for c, reads an argument that c holds redacted: c was read back
// from the audit log, where secret values are [redact.Value], so
// what those conditions decide of it is a guess. c.Hints are the hints as
// [Policy.Judge] left them.
func (p *Policy) Unfaithful(c *interlock.Call) []string {
	var redacted []string
	for name, v := range c.Args {
		if holdsRedacted(v) {
			redacted = append(redacted, name)
		}
	}
	if len(redacted) == 0 {
		return nil
	}
	var out []string
	for _, r := range p.Rules {
		if !r.matchesTool(c.Tool, c.Upstream, c.Hints) {
			continue
		}
		if r.program != nil && (r.readsAll || slices.ContainsFunc(r.reads, func(n string) bool { return slices.Contains(redacted, n) })) {
			out = append(out, r.Name)
		}
		if ok, _ := r.holds(c); ok {
			break
		}
	}
	return out
}

// holdsRedacted reports whether v is, or holds at any depth, a redacted
// value.
func holdsRedacted(v any) bool {
	switch v := v.(type) {
	case string:
		return v == redact.Value
	case map[string]any:
		return slices.ContainsFunc(slices.Collect(maps.Values(v)), holdsRedacted)
	case []any:
		return slices.ContainsFunc(v, holdsRedacted)
	}
	return false
}
