package gateway

import (
	"context"
	"errors"
	"sort"
	"strings"

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
