package gateway

import (
	"context"
	"slices"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/interlock-mcp/interlock/config"
)

// tenantView identifies the caller once per request, for itself and the
// gate (see [identify]), and hides from each caller what their tenant may not use (the
// tenants section of the config), on every protocol generation: there is
// one server, so a tools/list is filtered as it leaves, and the upstreams
// the tenant may use go into the context of every other request, for the
// pass-through of resources and prompts (see [mayUse]). Hiding a tool is a
// courtesy to the model; the refusal of a hidden tool's call is the
// gate's, in the decision path, like every other.
func (g *Gateway) tenantView(next mcp.MethodHandler) mcp.MethodHandler {
	return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
		cfg := g.config()
		who := identify(ctx, &mcp.CallToolRequest{Extra: req.GetExtra()})
		names, limited := cfg.Policy.TenantUpstreams(who.Tenant)
		ctx = withState(ctx, func(s *requestState) {
			s.who, s.identified = who, true
			if limited {
				s.limits = &tenantUpstreams{names}
			}
		})
		res, err := next(ctx, method, req)
		if len(cfg.Policy.Tenants) == 0 || method != "tools/list" || err != nil {
			return res, err
		}
		list, ok := res.(*mcp.ListToolsResult)
		if !ok {
			return res, err
		}
		list.Tools = g.allowed(cfg, who.Tenant, list.Tools)
		return list, nil
	}
}

// allowed keeps, of the mirrored tools given, those callers of tenant may
// see and call under cfg.
func (g *Gateway) allowed(cfg *config.File, tenant string, tools []*mcp.Tool) []*mcp.Tool {
	visible := make([]*mcp.Tool, 0, len(tools))
	table := g.table()
	for _, t := range tools {
		upstream := ""
		if m := table.find(t.Name); m != nil {
			upstream = m.upstream.cfg.Name
		}
		if cfg.Policy.ToolAllowed(tenant, t.Name, upstream) {
			visible = append(visible, t)
		}
	}
	return visible
}

// visibleTools returns the mirrored tools callers of tenant may see.
func (g *Gateway) visibleTools(tenant string) []*mcp.Tool {
	return g.allowed(g.config(), tenant, g.advertisedTools())
}

// mayUse reports whether the caller of the request in ctx may use the
// resources and prompts of u: a tenant limited to some upstreams sees
// nothing of the others.
func mayUse(ctx context.Context, u *upstream) bool {
	limits := stateOf(ctx).limits
	return limits == nil || slices.Contains(limits.names, u.cfg.Name)
}

// seesAll reports whether callers of tenant see every upstream and tool:
// the tenants section limits them to none. What the gateway holds for
// every caller (its metrics, the details of /healthz and /readyz) is
// theirs alone, since it names the upstreams, tools and gateways the
// others are not shown.
func seesAll(cfg *config.File, tenant string) bool {
	for _, t := range cfg.Policy.Tenants {
		if t.Name == tenant {
			return len(t.Upstreams) == 0 && len(t.Tools) == 0
		}
	}
	return true
}
