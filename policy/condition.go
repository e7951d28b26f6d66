package policy

import (
	"fmt"
	"strings"

	"cel.dev/cel-go/cel"

	"github.com/interlock-mcp/interlock"
)

// CompileCondition compiles a CEL condition over tool, upstream, args,
// principal and tenant (with interlock's functions: cleanPath, isUnder,
// num), as a standing grant's When. A condition that cannot be evaluated
// for a call answers an error, which covers nothing.
func CompileCondition(expr string) (interlock.Condition, error) {
	ast, iss := celEnv.Compile(expr)
	if iss.Err() != nil {
		return nil, fmt.Errorf("%s", strings.ReplaceAll(iss.Err().Error(), "\n", " "))
	}
	if ast.OutputType() != cel.BoolType && ast.OutputType() != cel.DynType {
		return nil, fmt.Errorf("the condition must be boolean, not %s", ast.OutputType())
	}
	prg, err := celEnv.Program(ast)
	if err != nil {
		return nil, err
	}
	return func(c *interlock.Call) (bool, error) {
		out, _, err := prg.Eval(activation(c))
		if err != nil {
			return false, err
		}
		b, ok := out.Value().(bool)
		if !ok {
			return false, fmt.Errorf("the condition gave %v, not a boolean", out.Value())
		}
		return b, nil
	}, nil
}
