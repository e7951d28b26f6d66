package gateway

import (
	"context"
	"slices"

	"github.com/interlock-mcp/interlock/config"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// tenantView hides from each caller what their tenant may not use (the
// tenants section of the config), on every protocol generation: there is
// one server, so a tools/list is filtered as it leaves, and the upstreams
// the tenant may use go into the context of every other request, for the
// pass-through of resources and prompts (see [mayUse]). Hiding a tool is a
// courtesy to the model; the refusal of a hidden tool's call is the
// gate's, in the decision path, like every other.
func (g *Gateway) tenantView(next mcp.MethodHandler) mcp.MethodHandler {
	return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
		cfg := g.config()
		if len(cfg.Tenants) == 0 {
			return next(ctx, method, req)
		}
		tenant := identify(ctx, &mcp.CallToolRequest{Extra: req.GetExtra()}).Tenant
		if names, limited := cfg.TenantUpstreams(tenant); limited {
			ctx = context.WithValue(ctx, upstreamsKey{}, names)
		}
		res, err := next(ctx, method, req)
		if method != "tools/list" || err != nil {
			return res, err
		}
		list, ok := res.(*mcp.ListToolsResult)
		if !ok {
			return res, err
		}
		list.Tools = g.allowed(cfg, tenant, list.Tools)
		return list, nil
	}
}

// allowed keeps, of the mirrored tools given, those callers of tenant may
// see and call under cfg.
func (g *Gateway) allowed(cfg *config.File, tenant string, tools []*mcp.Tool) []*mcp.Tool {
	visible := make([]*mcp.Tool, 0, len(tools))
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, t := range tools {
		upstream := ""
		if u := g.owner[t.Name]; u != nil {
			upstream = u.cfg.Name
		}
		if cfg.ToolAllowed(tenant, t.Name, upstream) {
			visible = append(visible, t)
		}
	}
	return visible
}

// visibleTools returns the mirrored tools callers of tenant may see.
func (g *Gateway) visibleTools(tenant string) []*mcp.Tool {
	return g.allowed(g.config(), tenant, g.advertisedTools())
}

// upstreamsKey keys, in a request's context, the names of the upstreams
// the caller's tenant may use, when it is limited to some.
type upstreamsKey struct{}

// mayUse reports whether the caller of the request in ctx may use the
// resources and prompts of u: a tenant limited to some upstreams sees
// nothing of the others.
func mayUse(ctx context.Context, u *upstream) bool {
	names, limited := ctx.Value(upstreamsKey{}).([]string)
	return !limited || slices.Contains(names, u.cfg.Name)
}
