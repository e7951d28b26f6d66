package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/interlock-mcp/interlock/gateway/internal/sdkrules"
)

// A tool's result usually needs nothing from the gateway but to be passed
// on. Decoding it into the SDK's types on the upstream leg and encoding it
// again on the client's leg is most of what a call costs the gateway
// beyond the SDK's reading of each message, so an allowed call's result
// travels verbatim when both legs allow it:
//
//   - the link has a raw side (httplink.go): a child's connection, which
//     the gateway wraps, or an HTTP upstream's link, on which the gateway
//     makes its own POSTs (its connection tells the SDK things through
//     methods only the SDK can implement, so it stays unwrapped). On a
//     link of 2026-07-28 the raw side carries a call once it knows what
//     the SDK's client says of itself in each request (clientMeta), and
//     over HTTP only for a tool none of whose arguments travel in headers
//     too, which the SDK's client writes;
//   - the client speaks the link's generation of the protocol, or an
//     earlier one: both before 2026-07-28, so that neither SDK adds to the
//     result on its way; both 2026-07-28 on the lane (lane.go), which
//     completes the result itself as the SDK's server would (a result
//     type, the server's name in _meta); or a client before 2026-07-28 on
//     a link of 2026-07-28, whose result loses what that protocol added
//     (sdkrules.Earlier);
//   - the result is a plain one: not an error, and not asking the client
//     for input. Those are decoded as before, because the gate reads them.
//
// Such a call does not go through the SDK's client at all: the raw side
// writes it with an id of the gateway's own and hands its answer back as
// bytes (childConn.call, httpSession.call), so the SDK neither encodes the
// request nor sees the response. The gate is given a stand-in result
// (only what it reads: not an error, no input requests), and the
// receiving middleware, or the lane, swaps the stand-in for the upstream's
// bytes. The stand-in is known by its pointer alone, as the gate returns
// the very result a call that ran gave it: nothing an upstream writes in
// a result can pass for it.

// verbatim is one call whose result may travel as the upstream wrote it.
type verbatim struct {
	// latest says the client speaks 2026-07-28 and the lane completes the
	// result for it (see lane.completed): the link must speak it too.
	latest bool
	// older says the client speaks an earlier protocol than the link (a
	// link shared by clients of both): the result loses what the link's
	// protocol added (see sdkrules.Earlier).
	older bool

	// task is the client's params.task, for a tool whose upstream runs
	// tasks of its own: the call is passed on with it, and the upstream's
	// answer (the task it made) travels as its bytes (see
	// tasks_upstream.go).
	task json.RawMessage

	mu    sync.Mutex
	raw   json.RawMessage     // the upstream's result, once read
	stand *mcp.CallToolResult // the stand-in the gate was given for raw
}

// verbatimFor returns the *verbatim a call may use on link: the one in
// ctx, when the link speaks a protocol before 2026-07-28; nil otherwise.
func verbatimFor(ctx context.Context, link *mcp.ClientSession) *verbatim {
	v := stateOf(ctx).verbatim
	if v == nil {
		return nil
	}
	ir := link.InitializeResult()
	if ir == nil {
		return nil
	}
	newer := ir.ProtocolVersion >= protocolNew
	if newer && !v.latest {
		v.mu.Lock()
		v.older = true
		v.mu.Unlock()
		return v
	}
	if newer != v.latest {
		return nil
	}
	return v
}

// keep stores raw, the upstream's result for the call, as a client of an
// earlier protocol than the link's is to get it when it is one (a result
// that asks for input stays as it is, and is decoded: see plainResult),
// and returns what it stored.
func (v *verbatim) keep(raw json.RawMessage) json.RawMessage {
	if v.older {
		if earlier, ok := sdkrules.Earlier(raw); ok {
			raw = earlier
		}
	}
	v.mu.Lock()
	v.raw = raw
	v.mu.Unlock()
	return raw
}

// plainResult reads the upstream's result far enough for the gate: v's
// stand-in when the result can travel verbatim, or the result decoded when
// the gate must read it.
func (v *verbatim) plainResult(raw json.RawMessage, latest bool) (*mcp.CallToolResult, error) {
	var peek struct {
		IsError       bool            `json:"isError"`
		InputRequests json.RawMessage `json:"inputRequests"`
		ResultType    string          `json:"resultType"`
		Content       json.RawMessage `json:"content"`
	}
	if err := json.Unmarshal(raw, &peek); err != nil {
		return nil, &notAResult{err}
	}
	// A link of 2026-07-28 says a result is complete; one of an earlier
	// protocol says nothing.
	complete := peek.ResultType == "" || (latest && peek.ResultType == "complete")
	plain := !peek.IsError && complete && len(peek.Content) > 0 && peek.Content[0] == '[' &&
		(len(peek.InputRequests) == 0 || string(peek.InputRequests) == "null")
	if plain {
		return v.standIn(), nil
	}
	return decodeResult(raw)
}

// decodeResult decodes raw, an upstream's answer to a tools/call.
func decodeResult(raw json.RawMessage) (*mcp.CallToolResult, error) {
	if len(raw) == 0 || raw[0] != '{' {
		return nil, &notAResult{errors.New("not a JSON object")}
	}
	res := new(mcp.CallToolResult)
	if err := json.Unmarshal(raw, res); err != nil {
		return nil, &notAResult{err}
	}
	return res, nil
}

// notAResult is an upstream's answer to a tools/call that is not a tool's
// result. The upstream answered: the call may have run, and the link is
// sound.
type notAResult struct{ err error }

func (e *notAResult) Error() string { return "the answer is not a tool's result: " + e.err.Error() }
func (e *notAResult) Unwrap() error { return e.err }

// standIn is the result the gate is given for the one v keeps. Its
// content is not nil, or the SDK's server would copy the stand-in to fill
// it in, and the copy would be sent.
func (v *verbatim) standIn() *mcp.CallToolResult {
	stand := &mcp.CallToolResult{Content: []mcp.Content{}}
	v.mu.Lock()
	v.stand = stand
	v.mu.Unlock()
	return stand
}

// verbatimResult is a tool's result that encodes as the upstream's bytes.
// The embedded result makes it an mcp.Result; it is the stand-in, and is
// never encoded.
type verbatimResult struct {
	*mcp.CallToolResult
	raw json.RawMessage
}

func (r *verbatimResult) MarshalJSON() ([]byte, error) { return r.raw, nil }

// verbatimResults lets the result of a client's tools/call travel as the
// upstream wrote it, for a client of a protocol before 2026-07-28 (see the
// comment at the top of this file).
func (g *Gateway) verbatimResults(next mcp.MethodHandler) mcp.MethodHandler {
	return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
		if method != "tools/call" || !earlierProtocol(req) {
			return next(ctx, method, req)
		}
		v := stateOf(ctx).verbatim
		if v == nil {
			v = new(verbatim)
			ctx = withState(ctx, func(s *requestState) { s.verbatim = v })
		}
		res, err := next(ctx, method, req)
		return v.result(res, err)
	}
}

// result is the answer to a call that v may have carried: the upstream's
// bytes in place of the stand-in the gate was given, or res as it is.
func (v *verbatim) result(res mcp.Result, err error) (mcp.Result, error) {
	stand, ok := res.(*mcp.CallToolResult)
	if err != nil || !ok || stand == nil || v == nil {
		return res, err
	}
	v.mu.Lock()
	raw, ours := v.raw, stand == v.stand
	v.mu.Unlock()
	if !ours {
		return res, err
	}
	return &verbatimResult{CallToolResult: stand, raw: raw}, nil
}

// earlierProtocol reports whether req comes from a client that speaks a
// protocol before 2026-07-28, and names none of its own in _meta.
func earlierProtocol(req mcp.Request) bool {
	ss, _ := req.GetSession().(*mcp.ServerSession)
	if ss == nil {
		return false
	}
	ip := ss.InitializeParams()
	if ip == nil || ip.ProtocolVersion == "" || sdkrules.CompletesResults(ip.ProtocolVersion) {
		return false
	}
	if p, ok := req.GetParams().(*mcp.CallToolParamsRaw); ok {
		if _, named := p.Meta[mcp.MetaKeyProtocolVersion]; named {
			return false
		}
	}
	return true
}

// childTransport wraps the connection to a child: it counts the
// notifications handlers have yet to pass on (see settle), and carries the
// gateway's own calls (see childConn.call). opened hears the connection.
type childTransport struct {
	mcp.Transport
	pending *atomic.Int64
	caller  *clientMeta
	opened  func(*childConn)
}

func (t childTransport) Connect(ctx context.Context) (mcp.Connection, error) {
	conn, err := t.Transport.Connect(ctx)
	if err != nil {
		return nil, err
	}
	c := &childConn{Connection: conn, pending: t.pending, caller: t.caller, calls: map[jsonrpc.ID]chan *jsonrpc.Response{}}
	if t.opened != nil {
		t.opened(c)
	}
	return c, nil
}

// childConn is a child's connection, as childTransport wraps it. The SDK's
// client reads it and writes to it as to any connection; the gateway's own
// calls share it, under ids of their own, and their answers are taken out
// of what the SDK reads.
type childConn struct {
	mcp.Connection
	pending *atomic.Int64

	mu      sync.Mutex
	calls   map[jsonrpc.ID]chan *jsonrpc.Response // the gateway's calls written and not yet answered
	readErr error                                 // why reading stopped, once it has

	// caller is what the link's requests say of its client.
	caller *clientMeta
}

// clientMeta is what every request of 2026-07-28 on a link says of its
// client in _meta (protocol version, client info, capabilities), as the
// SDK's client wrote it on the link; the gateway's own calls say it
// again. It is learned from the SDK's small requests (server/discover,
// the tools/list a link makes first), never by reading through a call's
// arguments: a link of an earlier protocol has nothing to learn and would
// scan every call.
type clientMeta struct {
	p atomic.Pointer[map[string]json.RawMessage] // nil until learned
}

// callerKeys are the _meta keys of a request of 2026-07-28 that describe
// its client.
var callerKeys = []string{mcp.MetaKeyProtocolVersion, mcp.MetaKeyClientInfo, mcp.MetaKeyClientCapabilities}

// learn reads what a request of method with params, which the SDK's
// client wrote on the link, says of the client.
func (m *clientMeta) learn(method string, params json.RawMessage) {
	if method == "tools/call" || m.known() || !bytes.Contains(params, []byte(mcp.MetaKeyClientCapabilities)) {
		return
	}
	var p struct {
		Meta map[string]json.RawMessage `json:"_meta"`
	}
	if json.Unmarshal(params, &p) != nil || p.Meta[mcp.MetaKeyProtocolVersion] == nil {
		return
	}
	caller := map[string]json.RawMessage{}
	for _, k := range callerKeys {
		if v, ok := p.Meta[k]; ok {
			caller[k] = v
		}
	}
	m.p.Store(&caller)
}

// known reports whether the link's client is known.
func (m *clientMeta) known() bool { return m.p.Load() != nil }

// sign says in params's _meta who the link's client is, as the SDK's
// client would, leaving what params sets itself.
func (m *clientMeta) sign(params *mcp.CallToolParams) {
	caller := m.p.Load()
	if caller == nil {
		return
	}
	if params.Meta == nil {
		params.Meta = mcp.Meta{}
	}
	for k, v := range *caller {
		if _, set := params.Meta[k]; !set {
			params.Meta[k] = v
		}
	}
}

// ready reports whether the connection can carry a call of the gateway's
// own: on a link of 2026-07-28 (latest), once the SDK's client has said
// in a request of its own who the client is, which the call says again.
func (c *childConn) ready(latest bool) bool {
	return !latest || c.caller.known()
}

func (c *childConn) Write(ctx context.Context, msg jsonrpc.Message) error {
	if r, ok := msg.(*jsonrpc.Request); ok && r.IsCall() {
		c.caller.learn(r.Method, r.Params)
	}
	return c.Connection.Write(ctx, msg)
}

// call makes a tools/call with params on the connection, as bytes the
// gateway wrote (on a link of 2026-07-28, latest, with what it says of
// its client), and returns the upstream's result as the upstream wrote
// it, or its JSON-RPC error (a *jsonrpc.Error).
func (c *childConn) call(ctx context.Context, params *mcp.CallToolParams, latest bool) (json.RawMessage, error) {
	if latest {
		c.caller.sign(params)
	}
	body, err := callBody(params, nil)
	if err != nil {
		return nil, err
	}
	return c.request(ctx, "tools/call", body)
}

// callBody is the JSON of a tools/call's params; task, when set, is the
// client's params.task, passed on as it wrote it to an upstream that runs
// tasks of its own (see tasks_upstream.go).
func callBody(params *mcp.CallToolParams, task json.RawMessage) (json.RawMessage, error) {
	if params.Arguments == nil {
		params.Arguments = json.RawMessage("{}")
	}
	body, err := json.Marshal(params)
	if err != nil || task == nil {
		return body, err
	}
	return append(append(append(body[:len(body)-1], `,"task":`...), task...), '}'), nil
}

// callSeq numbers the gateway's own requests on a child's connection; the
// ids are strings, which the SDK's numbered ids can never equal.
var callSeq atomic.Uint64

// request sends method with params on the connection, under an id of the
// gateway's own, and returns the upstream's result as the upstream wrote
// it, or its JSON-RPC error (a *jsonrpc.Error). A connection that broke
// gives an error that is mcp.ErrConnectionClosed; a request its context
// ended is cancelled at the upstream, as the SDK's client would.
func (c *childConn) request(ctx context.Context, method string, params json.RawMessage) (json.RawMessage, error) {
	id, _ := jsonrpc.MakeID("interlock-" + strconv.FormatUint(callSeq.Add(1), 10))
	answer := make(chan *jsonrpc.Response, 1)
	c.mu.Lock()
	if c.readErr != nil {
		err := c.readErr
		c.mu.Unlock()
		return nil, fmt.Errorf("%w: %v", mcp.ErrConnectionClosed, err)
	}
	// Waiting before writing: the answer may be read before Write returns.
	c.calls[id] = answer
	c.mu.Unlock()
	if err := c.Connection.Write(ctx, &jsonrpc.Request{ID: id, Method: method, Params: params}); err != nil {
		c.forget(id)
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, fmt.Errorf("%w: writing %s: %v", mcp.ErrConnectionClosed, method, err)
	}
	select {
	case r := <-answer:
		switch {
		case r == nil:
			c.mu.Lock()
			err := c.readErr
			c.mu.Unlock()
			return nil, fmt.Errorf("%w: %v", mcp.ErrConnectionClosed, err)
		case r.Error != nil:
			return nil, r.Error
		}
		return r.Result, nil
	case <-ctx.Done():
		c.forget(id)
		// Best effort, and off the caller's way, as the SDK's client does.
		go func() {
			nctx, stop := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
			defer stop()
			note, _ := json.Marshal(&mcp.CancelledParams{RequestID: id.Raw(), Reason: ctx.Err().Error()})
			_ = c.Connection.Write(nctx, &jsonrpc.Request{Method: "notifications/cancelled", Params: note})
		}()
		return nil, ctx.Err()
	}
}

// forget stops waiting for the answer to the call id; a late answer goes
// to the SDK, which drops an answer to no call of its own.
func (c *childConn) forget(id jsonrpc.ID) {
	c.mu.Lock()
	delete(c.calls, id)
	c.mu.Unlock()
}

func (c *childConn) Read(ctx context.Context) (jsonrpc.Message, error) {
	for {
		msg, err := c.Connection.Read(ctx)
		if err != nil {
			c.broken(err)
			return msg, err
		}
		switch m := msg.(type) {
		case *jsonrpc.Request:
			if !m.IsCall() && (m.Method == "notifications/message" || m.Method == "notifications/progress") {
				c.pending.Add(1)
			}
		case *jsonrpc.Response:
			c.mu.Lock()
			answer, ours := c.calls[m.ID]
			delete(c.calls, m.ID)
			c.mu.Unlock()
			if ours {
				answer <- m
				continue
			}
		}
		return msg, nil
	}
}

// broken ends every call waiting on the connection: no answer can come.
func (c *childConn) broken(err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.readErr == nil {
		c.readErr = err
	}
	for id, answer := range c.calls {
		close(answer)
		delete(c.calls, id)
	}
}
