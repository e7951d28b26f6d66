// Package mcpgo puts interlock's gate in front of the tools of an MCP server
// written with github.com/mark3labs/mcp-go, as the root package does for
// servers written with the official go-sdk: a gated tool cannot run without
// the confirmation its policy demands.
//
// Both faces send every call through the same entry of the gate
// ([interlock.Gate.CallRequestWith]), with the client's raw arguments and
// what the client can carry back (forms, on either protocol generation);
// this package only translates between mcp-go's types and the gate's. Every
// mode, error body and audit record is therefore the one the go-sdk face
// gives for the same call.
//
// Use [AddTool] in place of s.AddTool for each tool to gate, or [Middleware]
// to gate every tool of a server. mcp-go runs task tools (s.AddTaskTool)
// outside its middleware chain: [AddTaskTool] registers one only when its
// policy can never gate it, and [Middleware] hides and refuses any other.
package mcpgo

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"sync"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"

	"github.com/interlock-mcp/interlock"
)

// AddTool registers t on s with h behind g: the gated counterpart of
// s.AddTool. Clients see t with its hints stated and the meta-arguments its
// policy accepts in its input schema, so mcp-go's input validation, when
// enabled, accepts them. Like s.AddTool, it panics when the tool cannot be
// registered (an invalid input schema), a programming error.
func AddTool(s *server.MCPServer, g *interlock.Gate, t mcp.Tool, h server.ToolHandlerFunc) {
	p, err := prepare(g, t, h)
	if err != nil {
		panic(fmt.Sprintf("interlock: mcpgo.AddTool: %v", err))
	}
	handler := func(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		if gatedAlready(ctx, req.Params.Name) {
			// Middleware in front of this tool already gated the call and
			// passes business arguments only.
			return h(ctx, req)
		}
		return serve(ctx, s, g, p.tool, req, h), nil
	}
	added.Store(addedKey{s, t.Name}, &prepared{original: p.advertised, advertised: p.advertised, tool: p.tool, handler: funcID(handler)})
	s.AddTool(p.advertised, handler)
}

// added holds the tools AddTool registered, so that Middleware takes them
// as advertised already instead of advertising them a second time.
var added sync.Map // addedKey → *prepared

type addedKey struct {
	server *server.MCPServer
	name   string
}

// ErrTaskToolGated is the error of [AddTaskTool] for a tool its policy may
// gate.
var ErrTaskToolGated = errors.New("mcp-go runs task tools outside its tool middleware, so the gate cannot stand in front of them")

// AddTaskTool registers t on s as a task tool (s.AddTaskTool) only when g's
// policy lets every call of it run unconfirmed (mode allow in every case). A
// tool the policy may gate is refused with an error wrapping
// [ErrTaskToolGated]: register it with [AddTool] and an execution of
// TaskSupportOptional instead, whose task runs through the gate.
func AddTaskTool(s *server.MCPServer, g *interlock.Gate, t mcp.Tool, h server.TaskToolHandlerFunc) error {
	if mayGate(g, t) {
		return fmt.Errorf("interlock: task tool %q: %w", t.Name, ErrTaskToolGated)
	}
	s.AddTaskTool(t, h)
	return nil
}

// mayGate reports whether the policy may demand more than allow for a
// call of t.
func mayGate(g *interlock.Gate, t mcp.Tool) bool {
	modes := g.Policy().ToolModes(t.Name, "", hintsOf(t))
	return len(modes) == 0 || slices.ContainsFunc(modes, func(m interlock.Mode) bool { return m != interlock.ModeAllow })
}

// Middleware gates every tool of s that passes through it; install it with
// s.Use(Middleware(g, s)) or server.WithToolHandlerMiddleware. The tools of
// s, those registered later included, are listed as the gate advertises
// them and registered again in that form, so that mcp-go's input validation
// accepts their meta-arguments; a tool added after the last listing is
// re-registered on its first call, and until then a strict schema may
// refuse that call's meta-arguments, which runs nothing. Task tools the
// policy may gate are left out of the list and their calls refused as
// unknown. A call of a tool registered with [AddTool] is gated once, here.
func Middleware(g *interlock.Gate, s *server.MCPServer) server.ToolHandlerMiddleware {
	m := &middleware{gate: g, server: s, tools: map[string]*prepared{}}
	server.WithToolFilter(m.filter)(s)
	m.sync()
	return m.wrap
}

type middleware struct {
	gate   *interlock.Gate
	server *server.MCPServer

	mu sync.Mutex
	// tools are the tools the gate knows, by name: each one's definition
	// as registered and as advertised.
	tools map[string]*prepared
}

// prepared is a tool of an mcp-go server made ready for the gate.
type prepared struct {
	original   mcp.Tool // as its author registered it
	advertised mcp.Tool // as clients see it behind the gate
	tool       *interlock.Tool
	handler    uintptr // the handler it was prepared with
}

func prepare(g *interlock.Gate, t mcp.Tool, h server.ToolHandlerFunc) (*prepared, error) {
	st, err := sdkTool(t)
	if err != nil {
		return nil, err
	}
	gt, adv, err := g.Prepare(st, func(ctx context.Context, args json.RawMessage) (*sdkResult, error) {
		req := mcp.CallToolRequest{}
		req.Method = string(mcp.MethodToolsCall)
		req.Params.Name = t.Name
		if err := setArgs(&req, args); err != nil {
			return nil, err
		}
		res, err := h(ctx, req)
		if err != nil || res == nil {
			return nil, err
		}
		return toSDK(res)
	})
	if err != nil {
		return nil, err
	}
	out, err := advertised(t, adv)
	if err != nil {
		return nil, err
	}
	return &prepared{original: t, advertised: out, tool: gt, handler: funcID(h)}, nil
}

func funcID(h server.ToolHandlerFunc) uintptr { return reflect.ValueOf(h).Pointer() }

// sync prepares every tool of s the gate does not know in its current
// form and registers it again as advertised.
func (m *middleware) sync() {
	var again []server.ServerTool
	for name, st := range m.server.ListTools() {
		p, changed := m.lookup(name, st.Tool, st.Handler)
		if p != nil && changed {
			again = append(again, server.ServerTool{Tool: p.advertised, Handler: st.Handler})
		}
	}
	if len(again) > 0 {
		m.server.AddTools(again...)
	}
}

// lookup returns the tool named as the gate knows it, preparing it when
// its definition or handler changed; changed reports that s holds it in
// another form than advertised.
func (m *middleware) lookup(name string, t mcp.Tool, h server.ToolHandlerFunc) (p *prepared, changed bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	id := funcID(h)
	if p := m.tools[name]; p != nil && p.handler == id {
		if reflect.DeepEqual(p.advertised, t) {
			return p, false
		}
		if reflect.DeepEqual(p.original, t) {
			return p, true
		}
	}
	if v, ok := added.Load(addedKey{m.server, name}); ok {
		if p := v.(*prepared); p.handler == id && reflect.DeepEqual(p.advertised, t) {
			m.tools[name] = p
			return p, false
		}
	}
	p, err := prepare(m.gate, t, h)
	if err != nil {
		// Left unknown, its calls are refused (see wrap).
		delete(m.tools, name)
		return nil, false
	}
	m.tools[name] = p
	return p, true
}

// filter lists every regular tool as the gate advertises it and leaves out
// the task tools the gate cannot stand in front of. It runs for tools/list
// and, with the one tool called, before every call.
func (m *middleware) filter(_ context.Context, tools []mcp.Tool) []mcp.Tool {
	registered := m.server.ListTools()
	out := make([]mcp.Tool, 0, len(tools))
	for _, t := range tools {
		st, ok := registered[t.Name]
		if !ok || !reflect.DeepEqual(st.Tool, t) {
			// A task tool, or a session's own tool: shown as registered
			// when the policy never gates it.
			if mayGate(m.gate, t) {
				continue
			}
			out = append(out, t)
			continue
		}
		if p, _ := m.lookup(t.Name, st.Tool, st.Handler); p != nil {
			t = p.advertised
		}
		out = append(out, t)
	}
	m.sync()
	return out
}

func (m *middleware) wrap(next server.ToolHandlerFunc) server.ToolHandlerFunc {
	return func(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		var gt *interlock.Tool
		if t, h, ok := m.find(ctx, req.Params.Name); ok {
			if p, _ := m.lookup(req.Params.Name, t, h); p != nil {
				gt = p.tool
			}
		}
		if gt == nil {
			return fromSDK(interlock.Result(&interlock.Error{Code: interlock.CodeInternal,
				Message: fmt.Sprintf("%s cannot be gated; nothing ran.", req.Params.Name),
				Hint:    "Tell the operator; do not retry."})), nil
		}
		return serve(ctx, m.server, m.gate, gt, req, func(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return next(withGated(ctx, req.Params.Name), req)
		}), nil
	}
}

// find returns the definition and handler of the tool a call names: the
// session's own, else the server's.
func (m *middleware) find(ctx context.Context, name string) (mcp.Tool, server.ToolHandlerFunc, bool) {
	if s, ok := server.ClientSessionFromContext(ctx).(server.SessionWithTools); ok {
		if st, ok := s.GetSessionTools()[name]; ok {
			return st.Tool, st.Handler, true
		}
	}
	if st := m.server.GetTool(name); st != nil {
		return st.Tool, st.Handler, true
	}
	return mcp.Tool{}, nil, false
}

// gatedKey marks a context in which the middleware gated the call of the
// tool it names, so that a tool registered with AddTool does not gate it
// again.
type gatedKey struct{}

func withGated(ctx context.Context, tool string) context.Context {
	return context.WithValue(ctx, gatedKey{}, tool)
}

func gatedAlready(ctx context.Context, tool string) bool {
	name, ok := ctx.Value(gatedKey{}).(string)
	return ok && name == tool
}
