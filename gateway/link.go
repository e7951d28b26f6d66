package gateway

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/interlock-mcp/interlock/exchange"
)

// pushProtocol is the protocol a client session's own upstream link
// speaks: the last one in which a server may push requests (elicitation,
// sampling, roots) to its client in the middle of a call.
const pushProtocol = "2025-11-25"

// ownsLink reports whether a downstream session can have an upstream
// session of its own (it does where the upstream is per_client, see
// perClient): a client of an earlier protocol that initialized a session
// (stdio, or streamable HTTP with sessions). Stateless requests and
// clients of 2026-07-28 always share the upstream's shared link.
func ownsLink(ss *mcp.ServerSession) bool {
	if ss == nil {
		return false
	}
	ip := ss.InitializeParams()
	return ip != nil && ip.ClientInfo != nil && ip.ProtocolVersion < protocolNew
}

// perClient reports whether ss is served by a link of its own: only when
// the upstream's config asks for it (per_client), since a link to a child
// is a process of its own. By default every client shares one link, and
// what the upstream asks during a call goes to the client of that call.
func (u *upstream) perClient(ss *mcp.ServerSession) bool {
	return u.cfg.PerClient && ownsLink(ss)
}

// protocolNew is the first protocol version served without sessions.
const protocolNew = "2026-07-28"

// peerLink is the upstream session that serves one downstream session.
type peerLink struct {
	mu      sync.Mutex
	cs      *mcp.ClientSession
	started bool // a link was made before
}

// open returns pl's link, made by dial when there is none (at first, or
// after the last one broke); restarted hears every remaking.
func (pl *peerLink) open(dial func() (*mcp.ClientSession, error), restarted func()) (*mcp.ClientSession, error) {
	pl.mu.Lock()
	defer pl.mu.Unlock()
	if pl.cs != nil {
		return pl.cs, nil
	}
	cs, err := dial()
	if err != nil {
		return nil, err
	}
	if pl.started {
		restarted()
	}
	pl.cs, pl.started = cs, true
	go func() {
		_ = cs.Wait()
		pl.mu.Lock()
		if pl.cs == cs {
			pl.cs = nil
		}
		pl.mu.Unlock()
	}()
	return cs, nil
}

// close closes pl's link, if one is open.
func (pl *peerLink) close() {
	pl.mu.Lock()
	cs := pl.cs
	pl.cs = nil
	pl.mu.Unlock()
	if cs != nil {
		_ = cs.Close()
	}
}

// restarted records that a link of u was made again, as what says.
func (u *upstream) restarted(what string) func() {
	return func() {
		if u.onEvent != nil {
			_, upstream := u.describe()
			u.onEvent("upstream_restarted", "reconnected "+what+" to "+upstream)
		}
	}
}

// linkFor returns the upstream session that serves ss: its own one where
// the upstream is per_client, else a shared one. An upstream that speaks
// 2026-07-28 asks its questions in results, which a client of an earlier
// protocol on a session would rather be asked during the call: such
// clients share a second link, of pushProtocol (see pushLink), so there
// are at most two, one per generation; for an upstream of an earlier
// protocol, one serves all.
func (u *upstream) linkFor(ctx context.Context, ss *mcp.ServerSession) (*mcp.ClientSession, error) {
	if u.perClient(ss) {
		return u.ownLink(ctx, ss)
	}
	shared, err := u.connect(ctx)
	if err != nil || !ownsLink(ss) || shared.InitializeResult().ProtocolVersion < protocolNew {
		return shared, err
	}
	return u.pushLink(ctx)
}

// pushLink returns the link shared by the clients of protocols before
// 2026-07-28 on sessions, made on first use and again after it broke.
func (u *upstream) pushLink(ctx context.Context) (*mcp.ClientSession, error) {
	u.linksMu.Lock()
	if u.push == nil {
		u.push = &peerLink{}
	}
	pl := u.push
	u.linksMu.Unlock()
	return pl.open(func() (*mcp.ClientSession, error) { return u.dial(ctx, nil, pushProtocol) },
		u.restarted("the link of clients before "+protocolNew))
}

// closePush closes the push link, if one is open.
func (u *upstream) closePush() {
	u.linksMu.Lock()
	pl := u.push
	u.linksMu.Unlock()
	if pl != nil {
		pl.close()
	}
}

// ownLink returns the link of ss alone, made on first use; it closes with
// the session.
func (u *upstream) ownLink(ctx context.Context, ss *mcp.ServerSession) (*mcp.ClientSession, error) {
	u.linksMu.Lock()
	if u.links == nil {
		u.links = map[*mcp.ServerSession]*peerLink{}
	}
	pl, known := u.links[ss]
	if !known {
		pl = &peerLink{}
		u.links[ss] = pl
		go func() {
			// The link lives as long as the downstream session.
			_ = ss.Wait()
			u.linksMu.Lock()
			delete(u.links, ss)
			u.linksMu.Unlock()
			pl.close()
		}()
	}
	u.linksMu.Unlock()
	return pl.open(func() (*mcp.ClientSession, error) { return u.dial(ctx, ss, pushProtocol) },
		u.restarted("a client's link"))
}

// dial opens an upstream session. peer is the downstream session it
// serves alone, or nil for a shared link; the link declares to the
// upstream what the clients behind it can answer. protocol is the
// version it asks for, "" for the latest.
func (u *upstream) dial(ctx context.Context, peer *mcp.ServerSession, protocol string) (*mcp.ClientSession, error) {
	transport, what, stderr := u.transport(peer == nil && protocol == "")
	side := rawSide{caller: new(clientMeta)}
	switch t := transport.(type) {
	case *mcp.StreamableClientTransport:
		// An HTTP upstream's connection tells the SDK things through
		// methods only the SDK implements, so it cannot be wrapped: what
		// the link says of its client is read from its HTTP requests.
		c := *t.HTTPClient
		c.Transport = callerTrip{next: c.Transport, caller: side.caller}
		t.HTTPClient = &c
	default:
		opened := func(c *childConn) { side.wire = c }
		transport = extrasTransport{Transport: childTransport{Transport: transport, pending: new(atomic.Int64), caller: side.caller, opened: opened}, extras: &u.extras}
	}
	client := mcp.NewClient(&mcp.Implementation{Name: "interlock", Version: u.version}, u.clientOptions(peer))
	client.AddReceivingMiddleware(u.questions(peer))
	cctx, cancel := context.WithTimeout(ctx, connectTimeout)
	defer cancel()
	var sopts *mcp.ClientSessionOptions
	if protocol != "" {
		sopts = &mcp.ClientSessionOptions{ProtocolVersion: protocol}
	}
	cs, err := client.Connect(cctx, transport, sopts)
	if err != nil {
		return nil, fmt.Errorf("upstream %q (%s): %s did not answer as an MCP server: %w; fix it in %s",
			u.cfg.Name, u.where(), what, withStderr(err, stderr), u.where())
	}
	u.sidesMu.Lock()
	if u.sides == nil {
		u.sides = map[*mcp.ClientSession]rawSide{}
	}
	u.sides[cs] = side
	u.sidesMu.Unlock()
	go func() {
		_ = cs.Wait()
		u.sidesMu.Lock()
		delete(u.sides, cs)
		u.sidesMu.Unlock()
	}()
	if peer != nil {
		u.forwardLevel(ctx, cs, peer)
	} else if c := cs.InitializeResult().Capabilities; c != nil && c.Logging != nil && cs.InitializeResult().ProtocolVersion < protocolNew {
		// The shared link serves clients that cannot set a level of their
		// own upstream: it takes everything, and each client session's
		// own level filters what reaches it. From 2026-07-28 on the level
		// travels with each request instead (see requestLevel).
		if err := cs.SetLoggingLevel(ctx, &mcp.SetLoggingLevelParams{Level: "debug"}); err != nil {
			u.log().Warn("setting the shared link's log level failed", "upstream", u.cfg.Name, "error", logText(err.Error()))
		}
	}
	return cs, nil
}

// clientOptions are the handlers of a link: what the upstream pushes goes
// to the downstream session it belongs to.
func (u *upstream) clientOptions(peer *mcp.ServerSession) *mcp.ClientOptions {
	opts := &mcp.ClientOptions{
		// Questions of the upstream are the downstream human's to answer:
		// input requests come back in the result and go to the client
		// through the gate; pushed elicitations are carried by elicit.
		ElicitationHandler: u.elicit,
		MultiRoundTrip:     &mcp.MultiRoundTripOptions{Disabled: true},
		LoggingMessageHandler: func(ctx context.Context, req *mcp.LoggingMessageRequest) {
			u.relayLog(ctx, peer, req)
		},
		ProgressNotificationHandler: u.relayProgress,
		Capabilities:                &mcp.ClientCapabilities{},
		// What the SDK says of the link (a stream that failed) is the operator's to read.
		Logger: u.log().With("upstream", u.cfg.Name),
	}
	// A change announced on any link is mirrored from that link, so a
	// client whose own child changed its tools sees them, and so do the
	// clients of the link of an earlier protocol (see pushLink), whose
	// child is not the shared link's; hints can only tighten whichever
	// link announces them.
	opts.ToolListChangedHandler = func(_ context.Context, req *mcp.ToolListChangedRequest) {
		u.toolsChanged(req.Session)
	}
	if peer == nil {
		// The shared link watches the other lists for every client; a
		// client's own link would only repeat it.
		opts.PromptListChangedHandler = func(context.Context, *mcp.PromptListChangedRequest) { u.hooks.promptsChanged() }
		opts.ResourceListChangedHandler = func(context.Context, *mcp.ResourceListChangedRequest) { u.hooks.resourcesChanged() }
		opts.ResourceUpdatedHandler = func(_ context.Context, req *mcp.ResourceUpdatedNotificationRequest) {
			u.hooks.resourceUpdated(req.Params)
		}
		// The shared link serves every client, so it declares all that a
		// client may answer: a server offers some tools only to a client
		// that can sample, list roots or show a form. A question is then
		// carried to the client whose call it belongs to, and refused when
		// that client did not declare the capability (see sample, questions
		// and elicit).
		opts.Capabilities.Elicitation = &mcp.ElicitationCapabilities{Form: &mcp.FormElicitationCapabilities{}, URL: &mcp.URLElicitationCapabilities{}}
		opts.Capabilities.Sampling = &mcp.SamplingCapabilities{}
		opts.Capabilities.RootsV2 = &mcp.RootCapabilities{ListChanged: true}
		opts.CreateMessageWithToolsHandler = u.sample
		return opts
	}
	caps := peer.InitializeParams().Capabilities
	if caps == nil {
		return opts
	}
	if caps.Elicitation != nil {
		opts.Capabilities.Elicitation = caps.Elicitation
	}
	if caps.Sampling != nil {
		opts.Capabilities.Sampling = caps.Sampling
		opts.CreateMessageWithToolsHandler = u.sample
	}
	if caps.RootsV2 != nil || caps.Roots.ListChanged {
		opts.Capabilities.RootsV2 = &mcp.RootCapabilities{}
	}
	return opts
}

// questions takes the upstream's requests of the client before the SDK's
// client does. A question goes to elicit unchecked: the client that shows
// it judges its form, so a form the SDK's client would refuse but the
// specification allows still reaches the human. roots/list is answered
// with the roots of the client behind the link (peer), never interlock's
// own; the shared link has none to offer.
func (u *upstream) questions(peer *mcp.ServerSession) mcp.Middleware {
	return func(next mcp.MethodHandler) mcp.MethodHandler {
		return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
			switch method {
			case "elicitation/create":
				return u.elicit(ctx, req.(*mcp.ElicitRequest))
			case "roots/list":
				return u.roots(ctx, peer, req.(*mcp.ListRootsRequest))
			}
			return next(ctx, method, req)
		}
	}
}

// declaresRoots reports whether caps say the client can list roots.
func declaresRoots(caps *mcp.ClientCapabilities) bool {
	return caps != nil && (caps.RootsV2 != nil || caps.Roots.ListChanged)
}

// forwardLevel tells a new link the log level its client chose.
func (u *upstream) forwardLevel(ctx context.Context, cs *mcp.ClientSession, peer *mcp.ServerSession) {
	u.levelsMu.Lock()
	level, set := u.levels[peer]
	u.levelsMu.Unlock()
	if set {
		_ = cs.SetLoggingLevel(ctx, &mcp.SetLoggingLevelParams{Level: level})
	}
}

// roots answers the upstream's roots/list with the roots of the client
// its request in flight belongs to, or of the client the link serves alone
// (peer), never interlock's own; the shared link has none to offer
// outside a request.
func (u *upstream) roots(ctx context.Context, peer *mcp.ServerSession, req *mcp.ListRootsRequest) (*mcp.ListRootsResult, error) {
	var meta mcp.Meta
	if req.Params != nil {
		// roots/list may come without params.
		meta = req.Params.Meta
	}
	c := u.ownerOf(req.Session, meta)
	if h := u.flights.heldOf(c); h != nil {
		// A client of 2026-07-28 is asked in its call's result.
		if !declaresRoots(c.req.ClientCapabilities()) {
			return nil, noAnswer("roots", false)
		}
		a, err := h.ask(ctx, &mcp.ListRootsParams{})
		if res, ok := a.(*mcp.ListRootsResult); ok && err == nil {
			return res, nil
		}
		return nil, noAnswer("roots", true)
	}
	if c == nil && peer != nil {
		// A server may ask as soon as a client's own link is made, before
		// the call that made it is on it: that call's stream can carry the
		// question.
		c = u.flights.callOpening(peer)
	}
	if peer == nil {
		// The shared link asks the client of the request in flight;
		// outside one nobody's roots may be given.
		if c == nil || c.peer == nil || !declaresRoots(c.pushable) {
			return nil, &jsonrpc.Error{Code: jsonrpc.CodeMethodNotFound, Message: "no client of a request in flight offers roots"}
		}
		peer = c.peer
	}
	// Asked in the context of the client's request in flight, if any, the
	// question travels on that request's stream: over HTTP a client need
	// not hold another stream open for it. The upstream may answer that
	// request before it hears the roots, so the answer is awaited for as
	// long as the upstream waits for it, not only while the request runs.
	upstreamWaits := ctx
	if c != nil && c.peer == peer {
		onCall, stop := context.WithCancel(context.WithoutCancel(c.ctx))
		defer stop()
		defer context.AfterFunc(ctx, stop)()
		ctx = onCall
	}
	var res *mcp.ListRootsResult
	var err error
	if st := laneStreamOf(ctx); st != nil {
		res = new(mcp.ListRootsResult)
		err = st.ask(ctx, "roots/list", &mcp.ListRootsParams{}, res)
		if errors.Is(err, errAnswered) {
			// The call ended first: the client is asked as outside any
			// call.
			res, err = peer.ListRoots(upstreamWaits, &mcp.ListRootsParams{})
		}
	} else {
		res, err = peer.ListRoots(ctx, &mcp.ListRootsParams{})
	}
	if err != nil {
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: "the client did not list its roots"}
	}
	return res, nil
}

// sample carries the upstream's sampling request to the client whose
// request it belongs to.
func (u *upstream) sample(ctx context.Context, req *mcp.CreateMessageWithToolsRequest) (*mcp.CreateMessageWithToolsResult, error) {
	c := u.ownerOf(req.Session, req.Params.Meta)
	if c == nil || c.peer == nil {
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidRequest, Message: "no client can answer this sampling request"}
	}
	q := *req.Params
	q.Meta = c.aboutTask(unmarked(q.Meta))
	if h := u.flights.heldOf(c); h != nil {
		// A client of 2026-07-28 is asked in its call's result.
		if caps := c.req.ClientCapabilities(); caps == nil || caps.Sampling == nil {
			return nil, noAnswer("sampling", false)
		}
		a, err := h.ask(ctx, &q)
		if res, ok := a.(*mcp.CreateMessageWithToolsResult); ok && err == nil {
			return res, nil
		}
		return nil, noAnswer("sampling", true)
	}
	if c.pushable == nil || c.pushable.Sampling == nil {
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeMethodNotFound, Message: "the client of this request does not offer sampling"}
	}
	var res *mcp.CreateMessageWithToolsResult
	var err error
	if st := laneStreamOf(c.ctx); st != nil {
		res = new(mcp.CreateMessageWithToolsResult)
		err = st.ask(c.ctx, "sampling/createMessage", &q, res)
	} else {
		res, err = c.peer.CreateMessageWithTools(c.ctx, &q)
	}
	if err != nil {
		u.log().Warn("the client did not answer a sampling request", "upstream", u.cfg.Name, "error", logText(err.Error()))
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: "the client did not answer the sampling request"}
	}
	return res, nil
}

// relayLog carries a log message of the upstream to the client session of
// the request that caused it, or to the client session the link serves
// (peer). One that belongs to no client's request on the shared link is
// dropped and counted, rather than risk handing one caller's log to
// another.
func (u *upstream) relayLog(ctx context.Context, peer *mcp.ServerSession, req *mcp.LoggingMessageRequest) {
	defer u.handled(req.Session)
	c := u.ownerOf(req.Session, req.Params.Meta)
	p := *req.Params
	p.Meta = unmarked(p.Meta)
	if (c == nil || c.peer == nil) && peer != nil {
		_ = peer.Log(ctx, &p)
		return
	}
	if c == nil || c.peer == nil {
		u.flights.dropped.Add(1)
		if u.onDropped != nil {
			u.onDropped()
		}
		u.log().Debug("dropped an upstream log message that belongs to no one client's request", "upstream", u.cfg.Name)
		return
	}
	if st := laneStreamOf(c.ctx); st != nil {
		// As the session's Log would: nothing until the client sets a
		// level, then what is at that level or above.
		level := u.levelOf(c.peer)
		if c.level != "" {
			// A request of 2026-07-28 names its level itself.
			level = c.level
		}
		if level != "" && levelRank(p.Level) >= levelRank(level) {
			_ = st.notify("notifications/message", &p)
		}
		return
	}
	_ = c.peer.Log(c.ctx, &p)
}

// levelOf is the log level the client of ss set, "" when none.
func (u *upstream) levelOf(ss *mcp.ServerSession) mcp.LoggingLevel {
	u.levelsMu.Lock()
	defer u.levelsMu.Unlock()
	return u.levels[ss]
}

// levelRank orders log levels by severity; an unknown level ranks lowest.
func levelRank(l mcp.LoggingLevel) int {
	for i, name := range []mcp.LoggingLevel{"debug", "info", "notice", "warning", "error", "critical", "alert", "emergency"} {
		if l == name {
			return i
		}
	}
	return -1
}

// relayProgress hands the upstream's progress back under the client's own
// token.
func (u *upstream) relayProgress(_ context.Context, req *mcp.ProgressNotificationClientRequest) {
	defer u.handled(req.Session)
	tok, _ := req.Params.ProgressToken.(string)
	e, ok := u.flights.progressOf(tok)
	if !ok || e.token == nil {
		// A round of a held call that asked for no progress hears none.
		return
	}
	p := *req.Params
	p.ProgressToken, p.Meta = e.token, unmarked(p.Meta)
	if st := laneStreamOf(e.ctx); st != nil {
		_ = st.notify("notifications/progress", &p)
		return
	}
	_ = e.session.NotifyProgress(e.ctx, &p)
}

// elicit carries a question the upstream pushes during a request to the
// client whose request it is. Only a client of an earlier protocol with a
// session can be asked this way, or one of 2026-07-28 whose call is held;
// for any other client, or when the question belongs to no one client's
// request, the upstream is answered with cancel (and a tool call ends
// CANCELLED).
func (u *upstream) elicit(ctx context.Context, req *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
	c := u.ownerOf(req.Session, req.Params.Meta)
	if c == nil {
		u.log().Warn("upstream asked a question that belongs to no one client's request; answering cancel", "upstream", u.cfg.Name)
		return &mcp.ElicitResult{Action: "cancel"}, nil
	}
	q := *req.Params
	q.Meta = c.aboutTask(unmarked(q.Meta))
	if h := u.flights.heldOf(c); h != nil && heldCanShow(c.req, &q) {
		// A client of 2026-07-28 is asked in its call's result.
		a, err := h.ask(ctx, &q)
		if res, ok := a.(*mcp.ElicitResult); ok && err == nil {
			return res, nil
		}
		return &mcp.ElicitResult{Action: "cancel"}, nil
	}
	if c.peer != nil && c.canShow(&q) {
		if st := laneStreamOf(c.ctx); st != nil {
			return st.elicit(c.ctx, &q)
		}
		return c.peer.Elicit(c.ctx, &q)
	}
	u.flights.cancel(c)
	return &mcp.ElicitResult{Action: "cancel"}, nil
}

// canShow reports whether the client of fl can be sent the question q
// now: a client of an earlier protocol, on a session, that declared the
// question's mode of elicitation.
func (fl *inflight) canShow(q *mcp.ElicitParams) bool {
	caps := fl.pushable
	if caps == nil || caps.Elicitation == nil {
		return false
	}
	if q.Mode == "url" {
		return ownsLink(fl.peer) && caps.Elicitation.URL != nil
	}
	// Since 2025-11-25 "elicitation": {} still means form support; a
	// client that lists only URL mode cannot show a form.
	return caps.Elicitation.Form != nil || caps.Elicitation.URL == nil
}

// heldCanShow reports whether the client of a held call declared the mode
// of elicitation q asks for.
func heldCanShow(call *mcp.CallToolRequest, q *mcp.ElicitParams) bool {
	caps := call.ClientCapabilities()
	if caps == nil || caps.Elicitation == nil {
		return false
	}
	if q.Mode == "url" {
		return caps.Elicitation.URL != nil
	}
	return exchange.Of(call).Form
}

// maxNotificationWait bounds how long a finished call waits for the
// notifications the upstream sent before its result to be passed on.
const maxNotificationWait = time.Second

// rawSide is what the gateway keeps of a link beside the SDK's client.
type rawSide struct {
	wire   *childConn  // the wrapped connection of a link to a child
	caller *clientMeta // what the link's requests say of its client
}

// sideOf is link's raw side; zero for a link that is closed.
func (u *upstream) sideOf(link *mcp.ClientSession) rawSide {
	u.sidesMu.Lock()
	defer u.sidesMu.Unlock()
	return u.sides[link]
}

// wireOf is the wrapped connection of link, when link is to a child.
func (u *upstream) wireOf(link *mcp.ClientSession) *childConn {
	return u.sideOf(link).wire
}

// handled marks one counted notification of link as passed on.
func (u *upstream) handled(link *mcp.ClientSession) {
	if w := u.wireOf(link); w != nil && w.pending.Load() > 0 {
		w.pending.Add(-1)
	}
}

// settle waits until the notifications link read before the result of a
// call have been passed on, within maxNotificationWait.
func (u *upstream) settle(link *mcp.ClientSession) {
	w := u.wireOf(link)
	if w == nil {
		return
	}
	pending := w.pending
	deadline := time.Now().Add(maxNotificationWait)
	for pending.Load() > 0 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
}

// requestLevel is the log level a call on link asks of the upstream, for
// links of 2026-07-28, which carry it in each request: the client's own,
// when it names one, or everything for a client of an earlier protocol,
// whose session's level filters what reaches it. Empty when none applies.
func requestLevel(link *mcp.ClientSession, req *mcp.CallToolRequest) mcp.LoggingLevel {
	if req == nil || link.InitializeResult().ProtocolVersion < protocolNew {
		return ""
	}
	if level, ok := req.Params.Meta[mcp.MetaKeyLogLevel].(string); ok {
		return mcp.LoggingLevel(level)
	}
	// The version alone: reading the client's capabilities (exchange.Of)
	// would decode them on every call.
	if exchange.ProtocolVersion(req) >= exchange.ProtocolMRTR {
		return ""
	}
	return "debug"
}
