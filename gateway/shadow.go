package gateway

import (
	"context"
	"fmt"
	"sync"

	"github.com/interlock-mcp/interlock"
	"github.com/interlock-mcp/interlock/audit"
	"github.com/interlock-mcp/interlock/config"
	"github.com/interlock-mcp/interlock/policy"
)

// maxShadowRecords bounds the differences being written to the audit log
// at once; beyond it a difference is counted and logged but not recorded,
// so a burst never holds calls or memory.
const maxShadowRecords = 64

// shadowed is the live policy with a candidate deciding beside it: every
// decision is the live policy's, and where the candidate's rule or mode
// differs, the difference is recorded after the call has its answer.
type shadowed struct {
	*policy.Policy
	shadow *config.File
	differ func(ctx context.Context, rec *audit.Record)
}

// Decide implements [interlock.Policy] with the live rules. The shadow
// policy sees the call with the live hints, its own overrides on top.
func (s *shadowed) Decide(ctx context.Context, c *interlock.Call) (interlock.Decision, error) {
	d, err := s.Policy.Decide(ctx, c)
	s.compare(ctx, c, d)
	return d, err
}

// compare decides c with the shadow policy and reports a difference; a
// shadow policy that fails, even by panicking, changes nothing.
func (s *shadowed) compare(ctx context.Context, c *interlock.Call, live interlock.Decision) {
	defer func() { _ = recover() }()
	sc := *c
	sc.Hints = s.shadow.Policy.Hints(c.Tool, c.Upstream, c.Hints)
	// A shadow decision that cannot be completed still names its rule and
	// mode, which is what is compared.
	d, _ := s.shadow.Policy.Decide(ctx, &sc)
	if d.Rule == live.Rule && d.Mode == live.Mode {
		return
	}
	s.differ(ctx, &audit.Record{Event: "shadow_differs", Tenant: c.Tenant, Principal: c.Principal,
		Tool: c.Tool, Upstream: c.Upstream, Rule: live.Rule, Mode: string(live.Mode),
		ShadowRule: d.Rule, ShadowMode: string(d.Mode)})
}

// shadowRecorder writes shadow differences in the background.
type shadowRecorder struct {
	slots   chan struct{}
	pending sync.WaitGroup
}

// shadowDiffers records a difference between the live and the shadow
// policy, without making the call wait for the audit log.
func (g *Gateway) shadowDiffers(ctx context.Context, rec *audit.Record) {
	select {
	case g.shadowing.slots <- struct{}{}:
	default:
		g.log.Warn("shadow policy differs; too many differences are being written to record this one",
			"tool", rec.Tool, "live", fmt.Sprintf("%s/%s", rec.Rule, rec.Mode), "shadow", fmt.Sprintf("%s/%s", rec.ShadowRule, rec.ShadowMode))
		if g.metrics != nil {
			g.metrics.Event(rec.Event)
		}
		return
	}
	g.shadowing.pending.Go(func() {
		defer func() { <-g.shadowing.slots }()
		g.event(context.WithoutCancel(ctx), rec.Event, rec)
	})
}
