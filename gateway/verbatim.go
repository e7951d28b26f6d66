package gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"sync/atomic"

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
//   - the upstream is a child, whose connection the gateway wraps (an HTTP
//     upstream's connection tells the SDK things through methods only the
//     SDK can implement, so it stays unwrapped);
//   - the link and the client speak the same generation of the protocol:
//     both before 2026-07-28, so that neither SDK adds to the result on its
//     way, or both 2026-07-28 on the lane (lane.go), which completes the
//     result itself as the SDK's server would (a result type, the server's
//     name in _meta);
//   - the result is a plain one: not an error, and not asking the client
//     for input. Those are decoded as before, because the gate reads them.
//
// The wrapped connection writes the call as the SDK made it, and takes the
// response for itself when it comes: the SDK's caller gets errVerbatim in
// its place, and decodes nothing. The gate is given a stand-in result
// (only what it reads: not an error, no input requests), and the
// receiving middleware, or the lane, swaps the stand-in for the upstream's
// bytes.

// verbatim is one call whose result may travel as the upstream wrote it.
type verbatim struct {
	// latest says the client speaks 2026-07-28 and the lane completes the
	// result for it (see lane.completed): the link must speak it too.
	latest bool
	// older says the client speaks an earlier protocol than the link (a
	// link shared by clients of both): the result loses what the link's
	// protocol added (see sdkrules.Earlier).
	older bool

	mu     sync.Mutex
	raw    json.RawMessage // the upstream's result, once read
	closed bool            // the attempt is over; a late result is dropped
	// conn and id name the request written for the attempt, so that
	// ending it stops the link waiting for an answer that may never come.
	conn *childConn
	id   jsonrpc.ID
}

// errVerbatim is the answer the SDK's caller gets for a call whose result
// the link took for itself.
var errVerbatim = &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: "interlock: the result was taken verbatim"}

// begin readies v for an attempt: what an earlier attempt read is dropped.
func (v *verbatim) begin() {
	v.mu.Lock()
	v.raw, v.closed, v.conn = nil, false, nil
	v.mu.Unlock()
}

// fill keeps the result of the attempt; false when the attempt is over.
func (v *verbatim) fill(raw json.RawMessage) bool {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.closed {
		return false
	}
	v.raw = raw
	return true
}

// end closes the attempt and returns the result it read, if any.
func (v *verbatim) end() json.RawMessage {
	v.mu.Lock()
	v.closed = true
	raw, conn, id := v.raw, v.conn, v.id
	v.conn = nil
	v.mu.Unlock()
	if conn != nil {
		conn.mu.Lock()
		if conn.waiting[id] == v {
			delete(conn.waiting, id)
		}
		conn.mu.Unlock()
	}
	return raw
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

// taken ends the attempt and returns the result the link read for v, if
// any, as a client of an earlier protocol than the link's is to get it
// when it is one (a result that asks for input stays as it is, and is
// decoded: see plainResult).
func (v *verbatim) taken() json.RawMessage {
	raw := v.end()
	if raw == nil || !v.older {
		return raw
	}
	earlier, ok := sdkrules.Earlier(raw)
	if !ok {
		return raw
	}
	v.mu.Lock()
	v.raw = earlier
	v.mu.Unlock()
	return earlier
}

// plainResult reads the upstream's result far enough for the gate: a
// stand-in, marked with standInMark, when the result can travel verbatim,
// or the result decoded when the gate must read it.
func plainResult(raw json.RawMessage, latest bool) (*mcp.CallToolResult, error) {
	var peek struct {
		IsError       bool            `json:"isError"`
		InputRequests json.RawMessage `json:"inputRequests"`
		ResultType    string          `json:"resultType"`
		Content       json.RawMessage `json:"content"`
	}
	if err := json.Unmarshal(raw, &peek); err != nil {
		return nil, fmt.Errorf("the result is not a JSON object: %w", err)
	}
	// A link of 2026-07-28 says a result is complete; one of an earlier
	// protocol says nothing.
	complete := peek.ResultType == "" || (latest && peek.ResultType == "complete")
	plain := !peek.IsError && complete && len(peek.Content) > 0 && string(peek.Content) != "null" &&
		(len(peek.InputRequests) == 0 || string(peek.InputRequests) == "null")
	if plain {
		// Content that is not nil, or the SDK's server would copy the
		// stand-in to fill it in, and the copy would be sent.
		return &mcp.CallToolResult{Content: []mcp.Content{}, Meta: mcp.Meta{standInMark: true}}, nil
	}
	res := new(mcp.CallToolResult)
	if err := json.Unmarshal(raw, res); err != nil {
		return nil, fmt.Errorf("the result is not a tool's result: %w", err)
	}
	return res, nil
}

// standInMark marks, in its _meta, the stand-in result the gate is given
// for a verbatim one.
const standInMark = "interlock/stand-in"

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
		v := new(verbatim)
		res, err := next(withState(ctx, func(s *requestState) { s.verbatim = v }), method, req)
		return v.result(res, err)
	}
}

// result is the answer to a call that v may have carried: the upstream's
// bytes in place of the stand-in the gate was given, or res as it is.
func (v *verbatim) result(res mcp.Result, err error) (mcp.Result, error) {
	stand, ok := res.(*mcp.CallToolResult)
	if err != nil || !ok || stand == nil || stand.Meta[standInMark] == nil {
		return res, err
	}
	// The stand-in, or a copy of it made on the way: either way the
	// upstream's bytes are the answer, and the stand-in never leaves.
	v.mu.Lock()
	raw := v.raw
	v.mu.Unlock()
	if raw == nil {
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: "the tool's result was lost in the gateway"}
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
// notifications handlers have yet to pass on (see settle), and takes the
// results of verbatim calls for itself.
type childTransport struct {
	mcp.Transport
	pending *atomic.Int64
}

func (t childTransport) Connect(ctx context.Context) (mcp.Connection, error) {
	conn, err := t.Transport.Connect(ctx)
	if err != nil {
		return nil, err
	}
	return &childConn{Connection: conn, pending: t.pending, waiting: map[jsonrpc.ID]*verbatim{}}, nil
}

// childConn is a child's connection, as childTransport wraps it.
type childConn struct {
	mcp.Connection
	pending *atomic.Int64

	mu      sync.Mutex
	waiting map[jsonrpc.ID]*verbatim // verbatim calls written and not yet answered
}

func (c *childConn) Write(ctx context.Context, msg jsonrpc.Message) error {
	if v := stateOf(ctx).wire; v != nil {
		if r, ok := msg.(*jsonrpc.Request); ok && r.IsCall() && r.Method == "tools/call" {
			// Waiting before writing: the answer may be read before Write
			// returns.
			v.mu.Lock()
			v.conn, v.id = c, r.ID
			v.mu.Unlock()
			c.mu.Lock()
			c.waiting[r.ID] = v
			c.mu.Unlock()
			err := c.Connection.Write(ctx, msg)
			if err != nil {
				c.mu.Lock()
				delete(c.waiting, r.ID)
				c.mu.Unlock()
			}
			return err
		}
	}
	return c.Connection.Write(ctx, msg)
}

func (c *childConn) Read(ctx context.Context) (jsonrpc.Message, error) {
	msg, err := c.Connection.Read(ctx)
	switch m := msg.(type) {
	case *jsonrpc.Request:
		if !m.IsCall() && (m.Method == "notifications/message" || m.Method == "notifications/progress") {
			c.pending.Add(1)
		}
	case *jsonrpc.Response:
		c.mu.Lock()
		v, ok := c.waiting[m.ID]
		delete(c.waiting, m.ID)
		c.mu.Unlock()
		if ok && m.Error == nil && v.fill(m.Result) {
			return &jsonrpc.Response{ID: m.ID, Error: errVerbatim}, err
		}
	}
	return msg, err
}
