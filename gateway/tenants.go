package gateway

import (
	"context"
	"slices"

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
		if len(g.config().Tenants) == 0 {
			return next(ctx, method, req)
		}
		tenant := identify(ctx, &mcp.CallToolRequest{Extra: req.GetExtra()}).Tenant
		if names, limited := g.config().TenantUpstreams(tenant); limited {
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
		visible := make([]*mcp.Tool, 0, len(list.Tools))
		for _, t := range list.Tools {
			if g.toolAllowed(tenant, t.Name) {
				visible = append(visible, t)
			}
		}
		list.Tools = visible
		return list, nil
	}
}

// toolAllowed reports whether callers of tenant may see and call the
// mirrored tool name.
func (g *Gateway) toolAllowed(tenant, name string) bool {
	g.mu.Lock()
	u := g.owner[name]
	g.mu.Unlock()
	upstream := ""
	if u != nil {
		upstream = u.cfg.Name
	}
	return g.config().ToolAllowed(tenant, name, upstream)
}

// visibleTools returns the mirrored tools callers of tenant may see.
func (g *Gateway) visibleTools(tenant string) []*mcp.Tool {
	tools := g.advertisedTools()
	visible := tools[:0]
	for _, t := range tools {
		if g.toolAllowed(tenant, t.Name) {
			visible = append(visible, t)
		}
	}
	return visible
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
