package gateway

import (
	"context"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// tenantView hides from each caller's tools/list the tools their tenant
// may not use (the tenants section of the config), on every protocol
// generation: there is one server, so a listing is filtered as it leaves.
// Hiding is a courtesy to the model; the refusal of a hidden tool's call
// is the gate's, in the decision path, like every other.
func (g *Gateway) tenantView(next mcp.MethodHandler) mcp.MethodHandler {
	return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
		res, err := next(ctx, method, req)
		if method != "tools/list" || err != nil || len(g.file.Tenants) == 0 {
			return res, err
		}
		list, ok := res.(*mcp.ListToolsResult)
		if !ok {
			return res, err
		}
		tenant := identify(ctx, &mcp.CallToolRequest{Extra: req.GetExtra()}).Tenant
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
	return g.file.ToolAllowed(tenant, name, upstream)
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
