package interlock

import (
	"fmt"
	"strings"
)

// FlagHint is the recovery hint of a flag-mode DRY_RUN_PREVIEW. The AND is
// load-bearing: it tells the agent that both keys are required, so it does
// not loop re-sending __confirm alone.
const FlagHint = "Set MCP_DRY_RUN=false AND pass __confirm:true to actually execute"

// flag applies mode flag, the two-key contract: the call runs only when the
// operator turned dry run off and the agent passed __confirm: true. Either
// key missing answers DRY_RUN_PREVIEW with the redacted arguments.
func (g *Gate) flag(c *Call, d Decision) error {
	if !g.dryRun && c.Confirm {
		return nil
	}
	var missing []string
	if g.dryRun {
		missing = append(missing, `the operator key (MCP_DRY_RUN is not "false")`)
	}
	if !c.Confirm {
		missing = append(missing, "the per-call key (__confirm: true)")
	}
	return &Error{
		Code:    CodeDryRunPreview,
		Message: fmt.Sprintf("Dry run: %s did not run. Missing %s.", c.Tool, strings.Join(missing, " and ")),
		Hint:    FlagHint,
		Preview: g.preview(c),
		Summary: summaryOr(d, c),
	}
}
