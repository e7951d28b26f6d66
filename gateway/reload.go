package gateway

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"github.com/modelcontextprotocol/go-sdk/auth"

	"github.com/interlock-mcp/interlock"
	"github.com/interlock-mcp/interlock/audit"
	"github.com/interlock-mcp/interlock/config"
)

// running is the configuration in force and what is derived from it once,
// so that no call pays for deriving it again.
type running struct {
	file   *config.File
	verify auth.TokenVerifier
}

func runningOf(f *config.File) *running {
	return &running{file: f, verify: keyVerifier(f.Auth.Keys)}
}

// config returns the configuration in force.
func (g *Gateway) config() *config.File { return g.running.Load().file }

// decider is what decides the calls under f: f itself, or f with its
// shadow policy beside it.
func (g *Gateway) decider(f *config.File) interlock.Policy {
	if f.ShadowPolicy == nil {
		return &f.Policy
	}
	g.log.Info("a shadow policy decides every call beside the rules, enforcing nothing; its differences are audited as shadow_differs",
		"shadow", f.ShadowPolicy.Policy.Path)
	return &shadowed{Policy: &f.Policy, shadow: f.ShadowPolicy, differ: g.shadowDiffers}
}

// verifyKey checks an API key against the keys in force.
func (g *Gateway) verifyKey(ctx context.Context, token string, r *http.Request) (*auth.TokenInfo, error) {
	return g.running.Load().verify(ctx, token, r)
}

// Reload makes f the configuration of every call that starts from now on;
// a call already under way finishes under the configuration it started
// with. Sections that take effect only at start (see
// [config.File.KeepRunning]) stay as they are, and each one that changed
// is logged. Tools are listed again and advertised under the new policy:
// clients hear of the tools whose advertised form changed, and a tool that
// is shown as before keeps its pending confirmations. Hints an upstream
// loosened, which the gateway kept at their stricter value, are taken as
// the upstream now states them. digest identifies the file's contents in
// the audit record of the reload. A standing grant whose rule the new file
// changed or removed is voided, with a record of each; confirm tokens,
// approvals, other grants and client sessions are left alone (an approval
// is bound to its rule's digest, so a changed rule asks anew).
//
// An error means some upstream could not be listed: its tools stay
// advertised as they were, and the new policy decides their calls.
func (g *Gateway) Reload(ctx context.Context, f *config.File, digest string) error {
	g.reloading.Lock()
	defer g.reloading.Unlock()
	for _, section := range f.KeepRunning(g.config()) {
		g.log.Warn("configuration section changed; the change takes effect on restart", "section", section, "file", f.Policy.Path)
	}
	if f.Policy.Log == nil {
		f.Policy.Log = g.log
	}
	g.running.Store(runningOf(f))
	g.gate.SetPolicy(g.decider(f), f.Policy.MaxArgumentBytes)
	g.mu.Lock()
	clear(g.pinned)
	g.mu.Unlock()
	var errs []error
	for _, u := range g.upstreams {
		if err := g.refresh(ctx, u, nil, false); err != nil {
			errs = append(errs, fmt.Errorf("listing the tools of upstream %q again: %w", u.cfg.Name, err))
		}
	}
	g.logConfigWarnings()
	g.checkOffered(true)
	g.event(ctx, "config_reloaded", &audit.Record{Detail: f.Policy.Path + " sha256:" + digest})
	// A session of the console stands on its credential: one whose key
	// this file removed or changed ends now, before anyone uses it.
	if n := g.console.Recheck(ctx); n > 0 {
		g.log.Warn("console sessions ended: their credentials were removed or changed", "sessions", n)
	}
	gone := func(who interlock.Identity) bool { _, ok := g.currentIdentity(who); return !ok }
	if n := g.console.ForgetPasskeys(ctx, gone); n > 0 {
		g.log.Warn("passkeys removed: no key names their approvers any more", "approvers", n)
	}
	voided, err := g.approvals.VoidGrants(ctx, f.Policy.Stands, "a reload changed or removed the rule it was made under")
	if err != nil {
		errs = append(errs, fmt.Errorf("voiding the grants of changed rules: %w", err))
	}
	if len(voided) > 0 {
		g.console.Notify()
		g.log.Warn("standing grants voided: the rules they were made under changed or are gone", "grants", len(voided))
	}
	g.log.Info("configuration reloaded", "file", f.Policy.Path, "sha256", digest, "rules", len(f.Policy.Rules))
	return errors.Join(errs...)
}

// RecordStart writes to the audit log that this gateway started, of which
// version, and on which configuration (the file and the digest that
// config_reloaded names too), so that the log says what decided every call
// from the first one on.
func (g *Gateway) RecordStart(ctx context.Context, version, digest string) {
	file := g.config().Policy.Path
	if file == "" {
		file = "(built-in)"
	}
	g.event(ctx, "gateway_started", &audit.Record{Detail: file + " sha256:" + digest + " version " + version})
}

// RejectConfig records in the audit log that a changed configuration file
// was refused for the problems found in it: the configuration in force
// stays.
func (g *Gateway) RejectConfig(ctx context.Context, file string, problems int) {
	g.event(ctx, "config_rejected", &audit.Record{Detail: fmt.Sprintf("%s: %d problem(s)", file, problems)})
}
