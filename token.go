package interlock

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/interlock-mcp/interlock/seal"
)

// TokenDryRunHint is the recovery hint of a token-mode DRY_RUN_PREVIEW.
const TokenDryRunHint = "Set MCP_DRY_RUN=false AND call again without __confirm_token to get a confirm token; " +
	"show its summary to the user and pass it back as __confirm_token only after they agree"

// token applies mode token, the confirm-token handshake. A call without a
// token describes itself: CONFIRMATION_REQUIRED with a summary and a
// single-use token sealed to {tenant, principal, tool, arguments}. A call
// with a valid token runs once. The operator key applies over both.
func (g *Gate) token(ctx context.Context, c *Call, d Decision) error {
	if g.dryRun {
		return g.dryRunPreview(ctx, c, d, TokenDryRunHint, []string{operatorKeyMissing})
	}
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
	digest, err := seal.Digest(c.raw)
	if err != nil {
		return fmt.Errorf("digesting arguments of %s: %w", c.Tool, err)
	}
	now := time.Now()
	claims := seal.Claims{
		Kind: seal.KindConfirm, Tenant: c.Tenant, Principal: c.Principal, Tool: c.Tool,
		Digest: digest, IssuedAt: now, Expires: now.Add(ttl), Nonce: seal.NewNonce(),
	}
	// Issuing supersedes the binding's earlier token, so only the latest
	// summary the user saw can be confirmed.
	if err := g.tokens.Issue(ctx, BindingKey(c.Tenant, c.Principal, c.Tool), claims.NonceString(), ttl); err != nil {
		return fmt.Errorf("storing confirm token for %s: %w", c.Tool, err)
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
		ConfirmToken: g.sealer.Seal(claims),
		TTLSeconds:   seconds,
		ExpiresAt:    claims.Expires,
	}
}

// redeem checks a confirm token and consumes it. The token is consumed
// before its binding is compared, so a token presented for the wrong call
// is gone afterwards: a mistake or a probe costs the agent a new
// confirmation, never a second try with the same token.
func (g *Gate) redeem(ctx context.Context, c *Call) error {
	again := fmt.Sprintf("Call %s again without __confirm_token to get a new summary and token, and ask the user again.", c.Tool)
	claims, err := g.sealer.Open(c.ConfirmToken)
	if err != nil || claims.Kind != seal.KindConfirm {
		return &Error{Code: CodeConsentTokenInvalid, Hint: again,
			Message: "The confirm token is not valid: it was altered, cut short, or issued by another deployment."}
	}
	if !time.Now().Before(claims.Expires) {
		return &Error{Code: CodeConsentTokenExpired, Hint: again,
			Message: fmt.Sprintf("The confirm token expired at %s.", claims.Expires.UTC().Format(time.RFC3339))}
	}
	live, err := g.tokens.Consume(ctx, BindingKey(claims.Tenant, claims.Principal, claims.Tool), claims.NonceString())
	if err != nil {
		return fmt.Errorf("consuming confirm token for %s: %w", c.Tool, err)
	}
	if !live {
		return &Error{Code: CodeConsentTokenInvalid, Hint: again,
			Message: "The confirm token was already used, or a newer confirmation request for this tool replaced it."}
	}
	var differ []string
	if claims.Tenant != c.Tenant {
		differ = append(differ, "tenant")
	}
	if claims.Principal != c.Principal {
		differ = append(differ, "caller")
	}
	if claims.Tool != c.Tool {
		differ = append(differ, "tool")
	}
	if digest, err := seal.Digest(c.raw); err != nil || digest != claims.Digest {
		differ = append(differ, "arguments")
	}
	if len(differ) > 0 {
		return &Error{Code: CodeConsentTokenMismatch, Hint: again,
			Message: fmt.Sprintf("The confirm token was issued for another %s; it is used up now.", strings.Join(differ, ", "))}
	}
	return nil
}
