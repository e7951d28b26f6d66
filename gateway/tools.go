package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/interlock-mcp/interlock"
	"github.com/interlock-mcp/interlock/audit"
	"github.com/interlock-mcp/interlock/exchange"
)

// toolTable is every mirrored tool, as one value that is never changed
// once published: a refresh builds the next table and swaps it in whole
// (see [Gateway.publish]). It is the one registry of the gateway's tools.
// The lane, tools/list, the REST face, the tenants' views and check read
// it without a lock; the SDK's server and the gate keep registries of
// their own, and publish is the only place that writes them, from the
// difference between two tables.
type toolTable struct {
	byName map[string]*mirroredTool
	// listed is every tool as clients see it, sorted by name.
	listed []*mcp.Tool
}

// mirroredTool is one upstream tool behind the gate.
type mirroredTool struct {
	upstream *upstream
	// advertised is the tool as clients see it: the gateway's name, the
	// hints the policy sees, the meta-arguments its mode accepts.
	advertised *mcp.Tool
	// tool is what the gate decides on; run runs it on its upstream
	// outside a client's call (a preview, the REST face).
	tool *interlock.Tool
	run  interlock.Runner
	// handler serves a client's call, on the SDK's server or the lane.
	handler mcp.ToolHandler
	// headerBound says the tool's schema binds arguments to HTTP headers,
	// which the SDK checks for clients of 2026-07-28.
	headerBound bool
}

// headerBound reports whether m is a tool whose schema binds arguments to
// HTTP headers.
func headerBound(m *mirroredTool) bool { return m != nil && m.headerBound }

// table returns the tools in force.
func (g *Gateway) table() *toolTable { return g.tools.Load() }

// find returns the mirrored tool name; nil when there is none.
func (t *toolTable) find(name string) *mirroredTool { return t.byName[name] }

// toolHandler returns the handler of the mirrored tool name, as the
// server runs it; nil when there is none.
func (g *Gateway) toolHandler(name string) mcp.ToolHandler {
	if m := g.table().find(name); m != nil {
		return m.handler
	}
	return nil
}

// advertisedTools returns the mirrored tools as clients see them, by name.
func (g *Gateway) advertisedTools() []*mcp.Tool { return g.table().listed }

// ToolCounts returns, for each upstream by name, how many tools it mirrors.
func (g *Gateway) ToolCounts() map[string]int {
	counts := make(map[string]int, len(g.upstreams))
	for _, u := range g.upstreams {
		counts[u.cfg.Name] = 0
	}
	for _, m := range g.table().byName {
		counts[m.upstream.cfg.Name]++
	}
	return counts
}

func (g *Gateway) refreshLogged(u *upstream, via *mcp.ClientSession) {
	if err := g.refresh(context.Background(), u, via, false); err != nil {
		g.log.Error("refreshing tools", "upstream", u.cfg.Name, "error", err)
	}
	g.checkOffered(false)
}

// refresh mirrors the upstream's current tools: new ones are added, changed
// ones replaced, vanished ones removed. At start a name collision is an
// error; later it is logged and the newcomer skipped, so a misbehaving
// upstream cannot take over another's tool.
func (g *Gateway) refresh(ctx context.Context, u *upstream, via *mcp.ClientSession, starting bool) error {
	tools, err := u.tools(ctx, via)
	if err != nil {
		return err
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	old := g.table()
	next := make(map[string]*mirroredTool, len(old.byName)+len(tools))
	for name, m := range old.byName {
		if m.upstream != u {
			next[name] = m
		}
	}
	var errs []error
	bound := map[string]bool{}
	for _, t := range tools {
		name := u.cfg.Prefix + t.Name
		if other, taken := next[name]; taken {
			if other.upstream == u {
				continue // listed twice by its upstream
			}
			err := fmt.Errorf("tool %q is offered by upstreams %q and %q: give one of them a prefix (%s)", name, other.upstream.cfg.Name, u.cfg.Name, u.where())
			if starting {
				errs = append(errs, err)
			} else {
				g.log.Error("skipping colliding tool", "error", err)
			}
			continue
		}
		m, err := g.mirror(u, name, t, old.find(name))
		if err != nil {
			errs = append(errs, err)
			continue
		}
		next[name] = m
		if m.headerBound {
			bound[t.Name] = true
		}
	}
	u.headerBound.Store(&bound)
	g.publish(old, next)
	return errors.Join(errs...)
}

// publish makes next the tools in force, and tells the SDK's server and the
// gate what changed since old. The caller holds g.mu.
func (g *Gateway) publish(old *toolTable, next map[string]*mirroredTool) {
	var gone []string
	for name := range old.byName {
		if next[name] == nil {
			gone = append(gone, name)
		}
	}
	sort.Strings(gone)
	for name, m := range next {
		if old.find(name) != m {
			g.gate.Register(m.tool, m.run)
			g.server.AddTool(m.advertised, m.handler)
		}
	}
	t := &toolTable{byName: next, listed: make([]*mcp.Tool, 0, len(next))}
	for _, m := range next {
		t.listed = append(t.listed, m.advertised)
	}
	sort.Slice(t.listed, func(i, j int) bool { return t.listed[i].Name < t.listed[j].Name })
	g.tools.Store(t)
	if len(gone) > 0 {
		g.server.RemoveTools(gone...)
		for _, name := range gone {
			g.gate.Forget(name)
		}
	}
}

// mirror returns upstream tool t behind the gate under name: was, the
// entry it had, when its upstream still shows it as before.
func (g *Gateway) mirror(u *upstream, name string, t *mcp.Tool, was *mirroredTool) (*mirroredTool, error) {
	claimed := interlock.HintsOf(nil)
	if u.cfg.TrustsHints() {
		claimed = g.pin(u, t.Name, interlock.HintsOf(t.Annotations))
	}
	hints := g.config().Policy.Hints(name, u.cfg.Name, claimed)
	gt, err := interlock.NewTool(name, u.cfg.Name, hints, t.InputSchema)
	if err != nil {
		// The upstream still validates its own input; the gate cannot.
		g.log.Warn("input schema not usable for validation", "upstream", u.cfg.Name, "tool", name, "error", err)
		gt, _ = interlock.NewTool(name, u.cfg.Name, hints, nil)
	}
	view := *t
	view.Name = name
	adv, err := g.gate.Advertise(&view, u.cfg.Name, hints)
	if err != nil {
		return nil, fmt.Errorf("upstream %q: %w", u.cfg.Name, err)
	}
	// A confirmation binds the tool as clients were shown it, so a tool
	// re-announced between ask and redeem cannot inherit the answer.
	gt.Definition = interlock.DefinitionDigest(adv)
	if was != nil && was.upstream == u && was.tool.Definition == gt.Definition {
		// Shown as before, so decided as before: clients are not told of a
		// change, and confirmations given for it stay good.
		return was, nil
	}
	upstreamName := t.Name
	// Only a call that may be made twice is retried: a read-only or
	// idempotent tool, as the gate sees its hints.
	repeatable := gt.Hints.ReadOnly || gt.Hints.Idempotent
	handler := func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		if !g.inFlight.enter() {
			return interlock.Result(errDraining), nil
		}
		defer g.inFlight.leave()
		var passed *jsonrpc.Error
		run := func(ctx context.Context, args json.RawMessage) (*mcp.CallToolResult, error) {
			res, err := u.call(ctx, upstreamName, args, req, repeatable)
			passed = u.passed(err)
			return res, err
		}
		// A call the lane serves carries its questions on its own stream.
		var ask func(context.Context, *mcp.ElicitParams) (*mcp.ElicitResult, error)
		if st := laneStreamOf(ctx); st != nil {
			ask = st.elicit
		}
		res := g.gate.CallRequestWith(ctx, gt, req, exchange.Via(req, ask), run)
		if passed != nil {
			// The gate recorded the failure; the client gets the
			// upstream's own error, as the operator chose.
			return nil, passed
		}
		return res, nil
	}
	schema, _ := json.Marshal(adv.InputSchema)
	headerBound := bytes.Contains(schema, []byte(`"x-mcp-header"`))
	return &mirroredTool{
		upstream:   u,
		advertised: adv,
		tool:       gt,
		run: func(ctx context.Context, args json.RawMessage) (*mcp.CallToolResult, error) {
			return u.call(ctx, upstreamName, args, nil, repeatable)
		},
		handler:     handler,
		headerBound: headerBound,
	}, nil
}

// pin returns the hints an upstream claims for its tool, less anything
// they loosen since the tool was first listed: an upstream must not be able
// to turn a gated tool into one that runs without a key by re-announcing
// it (a rug pull). Tightening is taken at once and kept. Pins last until
// the gateway restarts or reloads. The caller holds g.mu.
func (g *Gateway) pin(u *upstream, tool string, claimed interlock.Hints) interlock.Hints {
	key := upstreamTool{u.cfg.Name, tool}
	first, seen := g.pinned[key]
	if !seen {
		g.pinned[key] = claimed
		return claimed
	}
	strict := interlock.Hints{
		ReadOnly:    first.ReadOnly && claimed.ReadOnly,
		Destructive: first.Destructive || claimed.Destructive,
		Idempotent:  first.Idempotent && claimed.Idempotent,
		OpenWorld:   first.OpenWorld || claimed.OpenWorld,
	}
	if loosened := loosenedHints(strict, claimed); len(loosened) > 0 {
		g.log.Warn("upstream loosened a tool's hints; the stricter ones stay until the gateway restarts or reloads",
			"upstream", u.cfg.Name, "tool", tool, "hints", strings.Join(loosened, ","))
		g.event(context.Background(), "hints_loosened", &audit.Record{Upstream: u.cfg.Name, Tool: tool,
			Detail: "kept the stricter value of " + strings.Join(loosened, ", ")})
	}
	g.pinned[key] = strict
	return strict
}

// loosenedHints names the hints in which claimed is looser than strict.
func loosenedHints(strict, claimed interlock.Hints) []string {
	var names []string
	if claimed.ReadOnly && !strict.ReadOnly {
		names = append(names, "readOnlyHint")
	}
	if !claimed.Destructive && strict.Destructive {
		names = append(names, "destructiveHint")
	}
	if claimed.Idempotent && !strict.Idempotent {
		names = append(names, "idempotentHint")
	}
	if !claimed.OpenWorld && strict.OpenWorld {
		names = append(names, "openWorldHint")
	}
	return names
}
