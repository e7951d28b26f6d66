package interlock

import (
	"context"
	"fmt"
	"time"
)

// TokenDryRunHint is the recovery hint of a token-mode DRY_RUN_PREVIEW.
const TokenDryRunHint = "Set MCP_DRY_RUN=false AND call again without __confirm_token to get a confirm token; " +
	"show its summary to the user and pass it back as __confirm_token only after they agree"

// token applies mode token, the confirm-token handshake. A call without a
// token describes itself: CONFIRMATION_REQUIRED with a summary and a
// single-use token sealed to {tenant, principal, tool, arguments}. A call
// with a valid token runs once. The operator key applies over both.
func (g *Gate) token(ctx context.Context, c *Call, d Decision) error {
	if c.ConfirmToken == "" {
		return g.issueToken(ctx, c, d)
	}
	return g.redeem(ctx, c)
}

func (g *Gate) issueToken(ctx context.Context, c *Call, d Decision) error {
	summary, err := g.describe(ctx, c, d)
	if err != nil {
		return err
	}
	ttl := d.TTL
	if ttl <= 0 {
		ttl = DefaultTokenTTL
	}
	// Issuing supersedes the binding's earlier token, so only the latest
	// summary the user saw can be confirmed.
	token, claims, err := g.issue(ctx, confirmGrant, c, ttl, nil)
	if err != nil {
		return err
	}
	seconds := int(ttl / time.Second)
	return &Error{
		Code:    CodeConfirmationRequired,
		Message: fmt.Sprintf("%s needs the user's confirmation before it runs.", c.Tool),
		Hint: fmt.Sprintf("Show the summary to the user verbatim. Only after the user explicitly agrees, call %s again "+
			"with the same arguments plus __confirm_token set to confirm_token, within %d seconds. If the user declines, do not call it.",
			c.Tool, seconds),
		Preview:      g.redactedArgs(c),
		Summary:      summary,
		ConfirmToken: token,
		TTLSeconds:   seconds,
		ExpiresAt:    claims.Expires,
	}
}

// redeem checks a confirm token and consumes it (see [Gate.spend]).
func (g *Gate) redeem(ctx context.Context, c *Call) error {
	again := fmt.Sprintf("Call %s again without __confirm_token to get a new summary and token, and ask the user again.", c.Tool)
	if _, err := g.spend(ctx, confirmGrant, c, c.ConfirmToken, again); err != nil {
		return err
	}
	c.confirmedBy = ConfirmedByToken
	return nil
}
