package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"iter"
	"maps"
	"slices"
	"strings"
	"sync"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// Everything but tools passes through the gateway as the upstreams offer
// it: resources, resource templates and subscriptions, prompts,
// completion and logging. Prompts carry their upstream's prefix, as tools
// do; resources keep their URIs, and a read goes to the upstream that
// listed the URI (or whose template it came from), else to each upstream
// offering resources in turn until one has it.

// upstreamHooks are what an upstream's shared link tells the gateway.
type upstreamHooks struct {
	promptsChanged   func()
	resourcesChanged func()
	resourceUpdated  func(*mcp.ResourceUpdatedNotificationParams)
}

// catalog remembers which upstream offered each prompt, resource and
// resource template in the last listing.
type catalog struct {
	mu        sync.Mutex
	prompts   map[string]*upstream // by name as clients see it
	resources map[string]*upstream // by URI
	templates map[string]*upstream // by URI template
	// subscribers counts the client sessions subscribed to each URI; the
	// shared link subscribes upstream once for all of them.
	subscribers map[string]int
}

// passThrough serves the methods the gateway forwards, and completes the
// initialize result with what the upstreams offer.
func (g *Gateway) passThrough(next mcp.MethodHandler) mcp.MethodHandler {
	return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
		ss, _ := req.GetSession().(*mcp.ServerSession)
		if forwarded(method) {
			// Counted in flight as a tool call is, so that a gateway that
			// stops lets it end, and refused once it drains.
			if !g.inFlight.enter() {
				return nil, errShuttingDown
			}
			defer g.inFlight.leave()
		}
		switch method {
		case "initialize":
			res, err := next(ctx, method, req)
			if r, ok := res.(*mcp.InitializeResult); ok && err == nil {
				r.Capabilities, r.Instructions = g.offered(r.Capabilities, r.Instructions)
				r.Instructions = g.noteDown(ctx, req, r.Instructions)
				// A client of 2025-11-25 may ask for a task (tasks.go).
				return withTasks(r), nil
			}
			return res, err
		case "server/discover":
			res, err := next(ctx, method, req)
			if r, ok := res.(*mcp.DiscoverResult); ok && err == nil {
				r.Capabilities, r.Instructions = g.offered(r.Capabilities, r.Instructions)
				// A client of 2026-07-28 may ask for a task when a call
				// waits for approval (tasks.go).
				r.Capabilities.AddExtension(tasksExtension, nil)
				r.Instructions = g.noteDown(ctx, req, r.Instructions)
			}
			return res, err
		case "resources/list":
			return g.listResources(ctx, req)
		case "resources/templates/list":
			return g.listTemplates(ctx, req)
		case "resources/read":
			res, err := g.readResource(ctx, req, req.GetParams().(*mcp.ReadResourceParams))
			return relayed(ss, res, err)
		case "prompts/list":
			return g.listPrompts(ctx, req)
		case "prompts/get":
			res, err := g.getPrompt(ctx, req, req.GetParams().(*mcp.GetPromptParams))
			return relayed(ss, res, err)
		case "logging/setLevel":
			res, err := next(ctx, method, req)
			if err == nil {
				g.setLevel(ctx, req, req.GetParams().(*mcp.SetLoggingLevelParams).Level)
			}
			return res, err
		}
		return next(ctx, method, req)
	}
}

// relayed completes an upstream's result of prompts/get or resources/read
// for the client: from protocol 2026-07-28 on, such a result must say that
// it is complete (resultType), which a link of an earlier protocol does not
// tell, and the SDK says it only of results of its own handlers. The field
// is settable only through JSON, hence the round trip.
func relayed[R interface {
	mcp.Result
	NeedsInput() bool
}](ss *mcp.ServerSession, res R, err error) (mcp.Result, error) {
	if err != nil {
		return nil, err
	}
	if ss == nil || ss.InitializeParams() == nil || ss.InitializeParams().ProtocolVersion < protocolNew || res.NeedsInput() {
		return res, nil
	}
	// Marshalling and reading back what was just read from the upstream
	// cannot fail but on a bug; the client gets interlock's words for it.
	unrelayable := &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: "interlock could not relay the result of the server behind it"}
	fields, err := resultFields(res)
	if err != nil {
		return nil, unrelayable
	}
	fields["resultType"] = json.RawMessage(`"complete"`)
	if b, err := json.Marshal(fields); err != nil || json.Unmarshal(b, res) != nil {
		return nil, unrelayable
	}
	return res, nil
}

// resultFields is a result as the members of its JSON object, for adding
// the members the SDK's types cannot be given directly (resultType).
func resultFields(res mcp.Result) (map[string]json.RawMessage, error) {
	var b []byte
	if v, ok := res.(*verbatimResult); ok {
		// The upstream's bytes, read once already: marshalling them would
		// only scan them again.
		b = v.raw
	} else {
		var err error
		if b, err = json.Marshal(res); err != nil {
			return nil, err
		}
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(b, &fields); err != nil {
		return nil, err
	}
	return fields, nil
}

// objectBytes writes fields as one JSON object, its members in the order
// of their names as json.Marshal orders a map's. The values are written
// as they are: they were read from JSON, and json.Marshal would scan each
// again only to compact it.
func objectBytes(fields map[string]json.RawMessage) []byte {
	names := slices.Sorted(maps.Keys(fields))
	size := 2
	for _, k := range names {
		size += len(k) + len(fields[k]) + 4
	}
	out := make([]byte, 0, size)
	out = append(out, '{')
	for i, k := range names {
		if i > 0 {
			out = append(out, ',')
		}
		name, _ := json.Marshal(k)
		out = append(out, name...)
		out = append(out, ':')
		out = append(out, fields[k]...)
	}
	return append(out, '}')
}

// offered is the gateway's capabilities and instructions completed with
// what the connected upstreams offer: prompts, resources, completion and
// logging only when one of them does.
func (g *Gateway) offered(caps *mcp.ServerCapabilities, instructions string) (*mcp.ServerCapabilities, string) {
	out := &mcp.ServerCapabilities{Tools: &mcp.ToolCapabilities{ListChanged: true}}
	if caps != nil && caps.Tools != nil {
		out.Tools = caps.Tools
	}
	var notes []string
	if instructions != "" {
		notes = append(notes, instructions)
	}
	for _, u := range g.upstreams {
		init := u.initialized()
		if init == nil {
			continue
		}
		if c := init.Capabilities; c != nil {
			if c.Prompts != nil {
				out.Prompts = &mcp.PromptCapabilities{ListChanged: true}
			}
			if c.Resources != nil {
				if out.Resources == nil {
					out.Resources = &mcp.ResourceCapabilities{ListChanged: true}
				}
				out.Resources.Subscribe = out.Resources.Subscribe || c.Resources.Subscribe
			}
			if c.Completions != nil {
				out.Completions = &mcp.CompletionCapabilities{}
			}
			if c.Logging != nil {
				out.Logging = &mcp.LoggingCapabilities{}
			}
		}
		if init.Instructions != "" {
			notes = append(notes, "The server "+u.cfg.Name+" says: "+init.Instructions)
		}
	}
	return out, strings.Join(notes, "\n\n")
}

// noteDown adds to a client's instructions the upstreams it may use that
// are down now, by name alone: without a word, a client that finds their
// tools missing cannot tell an outage from a gateway that offers none.
// Why they are down is the operator's to read, in the log.
func (g *Gateway) noteDown(ctx context.Context, req mcp.Request, instructions string) string {
	cfg := g.config()
	who := identify(ctx, &mcp.CallToolRequest{Extra: req.GetExtra()})
	names, limited := cfg.Policy.TenantUpstreams(who.Tenant)
	var down []string
	for _, u := range g.upstreams {
		if (!limited || slices.Contains(names, u.cfg.Name)) && !u.connected() {
			down = append(down, u.cfg.Name)
		}
	}
	if len(down) == 0 {
		return instructions
	}
	which := "the upstream server " + down[0] + " is"
	if len(down) > 1 {
		which = "the upstream servers " + strings.Join(down, ", ") + " are"
	}
	note := fmt.Sprintf("UPSTREAM_UNAVAILABLE: %s down now, so their tools are missing; they appear, with a "+
		"tools/list_changed notification, when they run again. If you need them, tell the user which upstream is down.", which)
	if instructions == "" {
		return note
	}
	return instructions + "\n\n" + note
}

// offering returns the upstreams whose capabilities pass has, of those the
// caller in ctx may use.
func (g *Gateway) offering(ctx context.Context, has func(*mcp.ServerCapabilities) bool) []*upstream {
	var out []*upstream
	for _, u := range g.upstreams {
		if init := u.initialized(); init != nil && init.Capabilities != nil && has(init.Capabilities) && mayUse(ctx, u) {
			out = append(out, u)
		}
	}
	return out
}

func hasResources(c *mcp.ServerCapabilities) bool { return c.Resources != nil }
func hasPrompts(c *mcp.ServerCapabilities) bool   { return c.Prompts != nil }

// forwarded reports whether passThrough passes a request of method on to
// the upstreams.
func forwarded(method string) bool {
	switch method {
	case "resources/list", "resources/templates/list", "resources/read", "prompts/list", "prompts/get", "completion/complete":
		return true
	}
	return false
}

// errShuttingDown answers a request to be passed on that arrives while the
// gateway shuts down.
var errShuttingDown = &jsonrpc.Error{Code: jsonrpc.CodeInternalError,
	Message: "the gateway is shutting down and asked nothing of the servers behind it; ask again in a few seconds"}

// errUnreachable is what a client is told when an upstream could not
// serve a forwarded request; the reason stays in the log.
var errUnreachable = &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: "the server behind interlock could not answer; try again later"}

// forwardError turns an upstream's failure into what the client sees: a
// JSON-RPC error the upstream answered keeps its code and interlock's
// words for it; anything else is errUnreachable.
func (u *upstream) forwardError(method string, err error) error {
	u.log().Warn("forwarded request failed", "upstream", u.cfg.Name, "method", method, "error", logText(err.Error()))
	var rpcErr *jsonrpc.Error
	if errors.As(err, &rpcErr) && rpcErr.Code != codeRejectedByTransport {
		msg := "the server behind interlock refused the request"
		switch rpcErr.Code {
		case jsonrpc.CodeInvalidParams:
			msg = "the server behind interlock rejected the params"
		case codeResourceNotFound:
			msg = "resource not found"
		case jsonrpc.CodeMethodNotFound:
			msg = "the server behind interlock does not offer this method"
		}
		return &jsonrpc.Error{Code: rpcErr.Code, Message: msg}
	}
	return errUnreachable
}

// codeResourceNotFound is the code the specification gives a read of an
// unknown resource.
const codeResourceNotFound = -32002

// gather lists one kind of item from every upstream offering resources,
// for the client request from, keeping the first item of each key, and
// keeps in *owned (a map of the catalog) the upstream of each key.
func gather[T any](ctx context.Context, g *Gateway, from mcp.Request, method string,
	list func(context.Context, *mcp.ClientSession) iter.Seq2[T, error], key func(T) string, owned *map[string]*upstream) ([]T, error) {
	items := []T{}
	owners := map[string]*upstream{}
	for _, u := range g.offering(ctx, hasResources) {
		err := u.forward(ctx, method, from, sessionLink, func(ctx context.Context, cs *mcp.ClientSession) error {
			for item, err := range list(ctx, cs) {
				if err != nil {
					return err
				}
				if _, taken := owners[key(item)]; taken {
					continue
				}
				owners[key(item)] = u
				items = append(items, item)
			}
			return nil
		})
		if err != nil {
			return nil, u.forwardError(method, err)
		}
	}
	g.catalog.mu.Lock()
	*owned = owners
	g.catalog.mu.Unlock()
	return items, nil
}

func (g *Gateway) listResources(ctx context.Context, from mcp.Request) (*mcp.ListResourcesResult, error) {
	items, err := gather(ctx, g, from, "resources/list",
		func(ctx context.Context, cs *mcp.ClientSession) iter.Seq2[*mcp.Resource, error] {
			return cs.Resources(ctx, nil)
		},
		func(r *mcp.Resource) string { return r.URI }, &g.catalog.resources)
	if err != nil {
		return nil, err
	}
	return &mcp.ListResourcesResult{Resources: items, Cacheable: uncached}, nil
}

func (g *Gateway) listTemplates(ctx context.Context, from mcp.Request) (*mcp.ListResourceTemplatesResult, error) {
	items, err := gather(ctx, g, from, "resources/templates/list",
		func(ctx context.Context, cs *mcp.ClientSession) iter.Seq2[*mcp.ResourceTemplate, error] {
			return cs.ResourceTemplates(ctx, nil)
		},
		func(t *mcp.ResourceTemplate) string { return t.URITemplate }, &g.catalog.templates)
	if err != nil {
		return nil, err
	}
	return &mcp.ListResourceTemplatesResult{ResourceTemplates: items, Cacheable: uncached}, nil
}

// resourceOwners lists the upstreams to ask for uri: the one that listed
// it, or every upstream offering resources; only those the caller in ctx
// may use.
func (g *Gateway) resourceOwners(ctx context.Context, uri string) []*upstream {
	g.catalog.mu.Lock()
	defer g.catalog.mu.Unlock()
	return g.resourceOwnersLocked(ctx, uri, hasResources)
}

// uncached are the cache fields of every list and read the gateway
// answers: what it returns depends on the caller's link and on upstreams
// that may change at any time, so nobody but the caller may keep it, and
// not for long. The SDK fills the fields only in results of its own
// handlers, and protocol 2026-07-28 requires them.
var uncached = mcp.Cacheable{CacheScope: "private"}

func (g *Gateway) readResource(ctx context.Context, from mcp.Request, p *mcp.ReadResourceParams) (*mcp.ReadResourceResult, error) {
	var last error = &jsonrpc.Error{Code: codeResourceNotFound, Message: "resource not found"}
	for _, u := range g.resourceOwners(ctx, p.URI) {
		var res *mcp.ReadResourceResult
		err := u.forward(ctx, "resources/read", from, sessionLink, func(ctx context.Context, cs *mcp.ClientSession) (err error) {
			fwd := &mcp.ReadResourceParams{URI: p.URI}
			var sent bool
			if res, sent, err = sendEarlier[mcp.ReadResourceResult](ctx, u, cs, "resources/read", fwd); !sent {
				res, err = cs.ReadResource(ctx, fwd)
			}
			return err
		})
		if err == nil {
			res.Cacheable = uncached
			return res, nil
		}
		last = u.forwardError("resources/read", err)
	}
	return nil, last
}

func (g *Gateway) listPrompts(ctx context.Context, from mcp.Request) (*mcp.ListPromptsResult, error) {
	out := &mcp.ListPromptsResult{Prompts: []*mcp.Prompt{}, Cacheable: uncached}
	owners := map[string]*upstream{}
	for _, u := range g.offering(ctx, hasPrompts) {
		err := u.forward(ctx, "prompts/list", from, sessionLink, func(ctx context.Context, cs *mcp.ClientSession) error {
			for p, err := range cs.Prompts(ctx, nil) {
				if err != nil {
					return err
				}
				name := u.cfg.Prefix + p.Name
				if other, taken := owners[name]; taken {
					g.log.Error("skipping colliding prompt: give one of the upstreams a prefix", "prompt", name,
						"upstream", u.cfg.Name, "offered_by", other.cfg.Name)
					continue
				}
				owners[name] = u
				view := *p
				view.Name = name
				out.Prompts = append(out.Prompts, &view)
			}
			return nil
		})
		if err != nil {
			return nil, u.forwardError("prompts/list", err)
		}
	}
	g.catalog.mu.Lock()
	g.catalog.prompts = owners
	g.catalog.mu.Unlock()
	return out, nil
}

// promptOwner finds the upstream of a prompt as clients name it, listing
// the prompts again when it is not known yet.
func (g *Gateway) promptOwner(ctx context.Context, from mcp.Request, name string) *upstream {
	g.catalog.mu.Lock()
	u := g.catalog.prompts[name]
	g.catalog.mu.Unlock()
	if u != nil && mayUse(ctx, u) {
		return u
	}
	if _, err := g.listPrompts(ctx, from); err != nil {
		return nil
	}
	g.catalog.mu.Lock()
	defer g.catalog.mu.Unlock()
	if u := g.catalog.prompts[name]; u != nil && mayUse(ctx, u) {
		return u
	}
	return nil
}

func (g *Gateway) getPrompt(ctx context.Context, from mcp.Request, p *mcp.GetPromptParams) (*mcp.GetPromptResult, error) {
	u := g.promptOwner(ctx, from, p.Name)
	if u == nil {
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: "unknown prompt"}
	}
	fwd := *p
	fwd.Name = strings.TrimPrefix(p.Name, u.cfg.Prefix)
	// The client's _meta belongs to its hop: it may name a protocol the
	// upstream link does not speak.
	fwd.Meta = nil
	var res *mcp.GetPromptResult
	err := u.forward(ctx, "prompts/get", from, sessionLink, func(ctx context.Context, cs *mcp.ClientSession) (err error) {
		var sent bool
		if res, sent, err = sendEarlier[mcp.GetPromptResult](ctx, u, cs, "prompts/get", &fwd); !sent {
			res, err = cs.GetPrompt(ctx, &fwd)
		}
		return err
	})
	if err != nil {
		return nil, u.forwardError("prompts/get", err)
	}
	return res, nil
}

// complete forwards a completion to the upstream of the prompt or
// resource template it refers to.
func (g *Gateway) complete(ctx context.Context, req *mcp.CompleteRequest) (*mcp.CompleteResult, error) {
	p := *req.Params
	p.Meta = nil // as for prompts/get
	ref := *p.Ref
	p.Ref = &ref
	var u *upstream
	switch ref.Type {
	case "ref/prompt":
		if u = g.promptOwner(ctx, req, ref.Name); u != nil {
			ref.Name = strings.TrimPrefix(ref.Name, u.cfg.Prefix)
		}
	case "ref/resource":
		g.catalog.mu.Lock()
		u = g.catalog.templates[ref.URI]
		g.catalog.mu.Unlock()
		if u == nil || !mayUse(ctx, u) {
			u = nil
			if all := g.offering(ctx, hasResources); len(all) > 0 {
				u = all[0]
			}
		}
	}
	if u == nil {
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: "nothing behind interlock completes this reference"}
	}
	var res *mcp.CompleteResult
	err := u.forward(ctx, "completion/complete", req, sessionLink, func(ctx context.Context, cs *mcp.ClientSession) (err error) {
		res, err = cs.Complete(ctx, &p)
		return err
	})
	if err != nil {
		return nil, u.forwardError("completion/complete", err)
	}
	return res, nil
}

// subscribe subscribes upstream, once for all client sessions, to a
// resource; the SDK keeps which client sessions are subscribed and
// delivers each update to them.
func (g *Gateway) subscribe(ctx context.Context, req *mcp.SubscribeRequest) error {
	uri := req.Params.URI
	g.catalog.mu.Lock()
	defer g.catalog.mu.Unlock()
	// Owners first, so a caller joins another's subscription only to a
	// resource their tenant may use.
	owners := g.resourceOwnersLocked(ctx, uri, canSubscribe)
	if len(owners) == 0 {
		return &jsonrpc.Error{Code: codeResourceNotFound, Message: "resource not found"}
	}
	if g.catalog.subscribers[uri] > 0 {
		g.catalog.subscribers[uri]++
		return nil
	}
	var last error
	for _, u := range owners {
		err := u.forward(ctx, "resources/subscribe", req, sharedLink, func(ctx context.Context, cs *mcp.ClientSession) error {
			return cs.Subscribe(ctx, &mcp.SubscribeParams{URI: uri})
		})
		if err == nil {
			if g.catalog.subscribers == nil {
				g.catalog.subscribers = map[string]int{}
			}
			g.catalog.subscribers[uri] = 1
			return nil
		}
		last = u.forwardError("resources/subscribe", err)
	}
	return last
}

// resourceOwnersLocked lists the upstreams to ask for uri, of those whose
// capabilities pass has, for a caller holding catalog.mu: the one that
// listed it, or every one; only those the caller in ctx may use.
func (g *Gateway) resourceOwnersLocked(ctx context.Context, uri string, has func(*mcp.ServerCapabilities) bool) []*upstream {
	if u := g.catalog.resources[uri]; u != nil {
		if !mayUse(ctx, u) {
			return nil
		}
		return []*upstream{u}
	}
	return g.offering(ctx, has)
}

func canSubscribe(c *mcp.ServerCapabilities) bool { return c.Resources != nil && c.Resources.Subscribe }

// unsubscribe drops a client session's subscription, and the upstream's
// when it was the last.
func (g *Gateway) unsubscribe(ctx context.Context, req *mcp.UnsubscribeRequest) error {
	uri := req.Params.URI
	g.catalog.mu.Lock()
	defer g.catalog.mu.Unlock()
	owners := g.resourceOwnersLocked(ctx, uri, canSubscribe)
	if len(owners) == 0 {
		// Nothing the caller may use: not theirs to drop.
		return nil
	}
	if g.catalog.subscribers[uri] > 1 {
		g.catalog.subscribers[uri]--
		return nil
	}
	if g.catalog.subscribers[uri] == 0 {
		return nil
	}
	delete(g.catalog.subscribers, uri)
	for _, u := range owners {
		_ = u.forward(ctx, "resources/unsubscribe", req, sharedLink, func(ctx context.Context, cs *mcp.ClientSession) error {
			return cs.Unsubscribe(ctx, &mcp.UnsubscribeParams{URI: uri})
		})
	}
	return nil
}

// setLevel passes a client session's log level on to its upstream links.
func (g *Gateway) setLevel(ctx context.Context, from mcp.Request, level mcp.LoggingLevel) {
	ss, _ := from.GetSession().(*mcp.ServerSession)
	if !ownsLink(ss) {
		return
	}
	for _, u := range g.offering(ctx, func(c *mcp.ServerCapabilities) bool { return c.Logging != nil }) {
		u.levelsMu.Lock()
		if u.levels == nil {
			u.levels = map[*mcp.ServerSession]mcp.LoggingLevel{}
		}
		if _, known := u.levels[ss]; !known {
			// The level is the session's: it goes when the session does.
			go func() {
				_ = ss.Wait()
				u.levelsMu.Lock()
				delete(u.levels, ss)
				u.levelsMu.Unlock()
			}()
		}
		u.levels[ss] = level
		u.levelsMu.Unlock()
		if !u.perClient(ss) {
			// The shared link takes every level; the session's own level
			// filters what reaches it (see relayLog).
			continue
		}
		err := u.forward(ctx, "logging/setLevel", from, sessionLink, func(ctx context.Context, cs *mcp.ClientSession) error {
			return cs.SetLoggingLevel(ctx, &mcp.SetLoggingLevelParams{Level: level})
		})
		if err != nil {
			u.log().Warn("forwarding the log level failed", "upstream", u.cfg.Name, "error", logText(err.Error()))
		}
	}
}

// phantom is the name of an entry the gateway adds to its server and
// removes at once, only so that the SDK tells every client session that
// a list changed; the gateway serves the lists itself, so no client ever
// sees it.
const phantom = "interlock-list-changed"

// promptsChanged tells every client session that the prompts changed.
func (g *Gateway) promptsChanged() {
	g.server.AddPrompt(&mcp.Prompt{Name: phantom}, func(context.Context, *mcp.GetPromptRequest) (*mcp.GetPromptResult, error) {
		return nil, errUnreachable
	})
	g.server.RemovePrompts(phantom)
}

// resourcesChanged tells every client session that the resources changed.
func (g *Gateway) resourcesChanged() {
	uri := "interlock:" + phantom
	g.server.AddResource(&mcp.Resource{URI: uri, Name: phantom}, func(context.Context, *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
		return nil, errUnreachable
	})
	g.server.RemoveResources(uri)
}

// resourceUpdated passes an upstream's update on to the subscribed client
// sessions.
func (g *Gateway) resourceUpdated(p *mcp.ResourceUpdatedNotificationParams) {
	if err := g.server.ResourceUpdated(context.Background(), p); err != nil {
		g.log.Debug("passing on a resource update", "error", err)
	}
}
