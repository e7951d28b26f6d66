package gateway

import (
	"context"
	"errors"
	"slices"
	"sort"
	"strings"
	"sync"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/interlock-mcp/interlock/config"
	"github.com/interlock-mcp/interlock/policy"
	"github.com/interlock-mcp/interlock/seal"
)

// StartEach connects the upstreams for which start returns true and
// mirrors their tools, like [Gateway.Start], but reports each upstream's
// failure apart, by upstream name, so that a check can point at the
// upstream's line.
func (g *Gateway) StartEach(ctx context.Context, start func(*config.Upstream) bool) map[string]error {
	failed := map[string]error{}
	for _, u := range g.upstreams {
		if !start(u.cfg) {
			continue
		}
		if err := g.refresh(ctx, u, nil, true); err != nil {
			// The check reports the cause; that serving would retry it is
			// beside the point here.
			if down, ok := errors.AsType[unreachable](err); ok {
				err = down.err
			}
			failed[u.cfg.Name] = err
		}
	}
	return failed
}

// OfferedTools returns every mirrored tool as the policy sees it: its name
// as clients see it, its upstream, its hints after the rules' overrides,
// and the arguments its input schema declares (meta-arguments left out).
func (g *Gateway) OfferedTools() []policy.OfferedTool {
	table := g.table()
	out := make([]policy.OfferedTool, 0, len(table.byName))
	for name, m := range table.byName {
		t := policy.OfferedTool{Name: name, Upstream: m.upstream.cfg.Name, Hints: m.tool.Hints}
		if schema, ok := m.advertised.InputSchema.(map[string]any); ok {
			props, _ := schema["properties"].(map[string]any)
			for arg := range props {
				if !strings.HasPrefix(arg, seal.MetaPrefix) {
					t.Arguments = append(t.Arguments, arg)
				}
			}
		}
		sort.Strings(t.Arguments)
		out = append(out, t)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// ListedTools returns the tools of every connected upstream as the
// upstream lists them, by the name clients see: annotations as stated (nil
// when it states none) and input schemas as given. [Gateway.OfferedTools]
// has the hints with the specification's defaults filled in; a starter
// configuration also says which of them the upstream stated.
func (g *Gateway) ListedTools(ctx context.Context) (map[string]*mcp.Tool, error) {
	out := map[string]*mcp.Tool{}
	var errs []error
	for _, u := range g.upstreams {
		if u.initialized() == nil {
			continue
		}
		tools, err := u.tools(ctx, nil)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		for _, t := range tools {
			out[u.cfg.Prefix+t.Name] = t
		}
	}
	return out, errors.Join(errs...)
}

// warnings are what is wrong with the configuration in force that does
// not stop the gateway: what the rules expect of tools the upstreams do
// not offer (a glob with a typo matches nothing, and the tool it meant
// falls to the default mode without a word), compared again at start, on
// each reload and whenever an upstream's tools change.
type warnings struct {
	mu    sync.Mutex
	tools []string
}

// Warnings returns what the gateway found wrong with its configuration
// and the tools it serves, each as file:line: message, for the banner,
// /readyz and the operator. It does not keep the gateway from serving.
func (g *Gateway) Warnings() []string {
	var out []string
	for _, w := range g.config().Warnings {
		out = append(out, w.Error())
	}
	g.warnings.mu.Lock()
	defer g.warnings.mu.Unlock()
	return append(out, g.warnings.tools...)
}

// logConfigWarnings logs what config.Parse found likely wrong with the
// file in force, which does not stop it.
func (g *Gateway) logConfigWarnings() {
	for _, w := range g.config().Warnings {
		g.log.Warn("the configuration is likely wrong here; interlock check says the same", "problem", w.Error())
	}
}

// checkOffered compares the rules in force with the tools the upstreams
// offer, as check --connect does, and logs what does not fit: always when
// loud (a start, a reload), else when it changed. While an upstream is
// down its tools are unknown, and a glob would seem to match nothing; the
// comparison waits until it is up, as its tools arriving call this again.
func (g *Gateway) checkOffered(loud bool) {
	for _, u := range g.upstreams {
		if !u.connected() {
			return
		}
	}
	var found []string
	for _, p := range g.config().Policy.CheckTools(g.OfferedTools()) {
		found = append(found, p.Error())
	}
	g.warnings.mu.Lock()
	changed := !slices.Equal(found, g.warnings.tools)
	g.warnings.tools = found
	g.warnings.mu.Unlock()
	if !loud && !changed {
		return
	}
	for _, w := range found {
		g.log.Warn("the rules do not fit the tools the upstreams offer; interlock check --connect says the same", "problem", w)
	}
}
