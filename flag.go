package interlock

import "context"

// FlagHint starts the recovery hint of every flag-mode DRY_RUN_PREVIEW
// while dry run is on. The AND is load-bearing: it tells the agent that
// both keys are required, so it does not loop re-sending __confirm alone.
const FlagHint = "Set MCP_DRY_RUN=false AND pass __confirm:true to actually execute"

// The rest of the hint says what the agent itself can do about the keys
// that are missing.
const (
	// flagAskFirst: the agent's own key is missing.
	flagAskFirst = "Ask the user first: show them the summary and preview, and only after they explicitly agree " +
		"to this exact call, call again with the same arguments and __confirm: true."
	// flagOperatorOnly: the agent passed its key; only the operator can
	// supply the other, so retrying would loop.
	flagOperatorOnly = "You already passed __confirm: true, so calling again will not help: tell the user that " +
		"interlock is in dry run and the operator must set MCP_DRY_RUN=false for this call to run."
	// flagDryRunOff: dry run is off, so the agent's key is all that is missing.
	flagDryRunOff = "Pass __confirm:true to actually execute. "
)

// flag applies mode flag, the two-key contract: the call runs only when the
// operator turned dry run off and the agent passed __confirm: true. Either
// key missing answers DRY_RUN_PREVIEW with the redacted arguments and a
// hint for what is missing.
func (g *Gate) flag(ctx context.Context, c *Call, d Decision) error {
	if !g.dryRun && c.Confirm {
		c.confirmedBy = ConfirmedByFlag
		return nil
	}
	var missing []string
	if g.dryRun {
		missing = append(missing, operatorKeyMissing)
	}
	if !c.Confirm {
		missing = append(missing, "the per-call key (__confirm: true)")
	}
	return g.dryRunPreview(ctx, c, d, flagHint(g.dryRun, c.Confirm), missing)
}

// flagHint is the recovery hint of a flag-mode preview.
func flagHint(dryRun, confirmed bool) string {
	switch {
	case !dryRun:
		return flagDryRunOff + flagAskFirst
	case confirmed:
		return FlagHint + ". " + flagOperatorOnly
	}
	return FlagHint + ". " + flagAskFirst
}
