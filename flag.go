package interlock

import "context"

// FlagHint is the recovery hint of a flag-mode DRY_RUN_PREVIEW. The AND is
// load-bearing: it tells the agent that both keys are required, so it does
// not loop re-sending __confirm alone.
const FlagHint = "Set MCP_DRY_RUN=false AND pass __confirm:true to actually execute"

// flag applies mode flag, the two-key contract: the call runs only when the
// operator turned dry run off and the agent passed __confirm: true. Either
// key missing answers DRY_RUN_PREVIEW with the redacted arguments.
func (g *Gate) flag(ctx context.Context, c *Call, d Decision) error {
	if !g.dryRun && c.Confirm {
		return nil
	}
	var missing []string
	if g.dryRun {
		missing = append(missing, operatorKeyMissing)
	}
	if !c.Confirm {
		missing = append(missing, "the per-call key (__confirm: true)")
	}
	return g.dryRunPreview(ctx, c, d, FlagHint, missing)
}
