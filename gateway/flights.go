package gateway

import (
	"context"
	"reflect"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// flights is an upstream's table of requests in flight on its links, with
// their owners: every request the gateway sends on a link is entered here
// before it is sent and removed when it is answered, and each progress
// token the gateway gave the upstream points at the client request it was
// given for. The table answers one question, whose request a message of
// the upstream belongs to. It sends, routes and answers nothing: owners.go
// forwards, link.go's handlers decide what a client may be asked, held.go
// parks calls.
type flights struct {
	mu  sync.Mutex
	all map[*inflight]struct{}
	seq uint64
	// progress maps the progress tokens interlock gave the upstream to the
	// clients' own.
	progress map[string]progressEntry
	// dropped counts the upstream's log messages that belonged to no one
	// client's request.
	dropped atomic.Int64
}

// inflight is one request in flight on an upstream's link: a flight. Its
// owner is the client request that caused it; a flight of the gateway's
// own has none.
type inflight struct {
	// method is the method forwarded, for the operator's log.
	method string
	// ctx is the client request's, so that what the upstream pushes during
	// the request travels with it to its client (on its stream).
	ctx context.Context
	// peer is the client session of the owner; nil for the gateway's own.
	peer *mcp.ServerSession
	// req is the owner's request when it is a tool call; nil otherwise.
	req *mcp.CallToolRequest
	// pushable are the capabilities of the owner's client when the
	// upstream's questions can be pushed to it during the request: a
	// client of a protocol before 2026-07-28, on a session. nil otherwise.
	pushable *mcp.ClientCapabilities
	// level is the log level the request names in its _meta (2026-07-28),
	// "" when it names none.
	level mcp.LoggingLevel
	// link is the upstream session the request went over, nil until the
	// link is open.
	link *mcp.ClientSession
	// seq orders the flights of an upstream and names each one.
	seq uint64
	// cancelled records that a question of the upstream could not be
	// carried and was answered with cancel.
	cancelled bool
	// held is set when the call is held across its client's requests
	// (see held.go): the upstream's questions go to it.
	held *heldCall
	// task is set when the request is about a task the upstream made (see
	// tasks_upstream.go): what the upstream says of its task during the
	// request goes to it, under the gateway's id.
	task *taskIDs
}

// newFlight describes the client request from, served in ctx, as the owner
// of a flight; from is nil for a request of the gateway's own.
func newFlight(ctx context.Context, method string, from mcp.Request) *inflight {
	fl := &inflight{method: method, ctx: ctx}
	if from == nil {
		return fl
	}
	fl.peer, _ = from.GetSession().(*mcp.ServerSession)
	fl.req, _ = from.(*mcp.CallToolRequest)
	var meta mcp.Meta
	if fl.req != nil {
		// A tool call, the common case, is read without reflection.
		meta = fl.req.Params.Meta
	} else if p := from.GetParams(); p != nil && !reflect.ValueOf(p).IsNil() {
		// A list may come without params: a nil pointer in the interface.
		meta = p.GetMeta()
	}
	if level, ok := meta[mcp.MetaKeyLogLevel].(string); ok {
		fl.level = mcp.LoggingLevel(level)
	}
	fl.pushable = pushable(fl.peer, from.GetExtra(), meta)
	return fl
}

// pushable returns the capabilities of the client of a request on session
// ss when the upstream's questions can be pushed to it during the request:
// a client of a protocol before 2026-07-28, over stdio or on an HTTP
// session. nil for any other: a client of 2026-07-28 takes questions only
// as input requests in a result, and one without a session has no stream
// a request could be sent on.
func pushable(ss *mcp.ServerSession, extra *mcp.RequestExtra, meta mcp.Meta) *mcp.ClientCapabilities {
	if ss == nil {
		return nil
	}
	if v, ok := meta[mcp.MetaKeyProtocolVersion].(string); ok && v >= protocolNew {
		return nil
	}
	if extra != nil && extra.Header != nil && ss.ID() == "" {
		// Over HTTP without a session there is no stream to ask it on.
		return nil
	}
	ip := ss.InitializeParams()
	if ip == nil || ip.ProtocolVersion >= protocolNew {
		return nil
	}
	return ip.Capabilities
}

// track enters fl in the table; the returned func
// removes it. fl.link may still be nil: a per_client link opens on its
// client's first request, and a question the upstream asks as it opens
// belongs to that request (see callOpening).
func (t *flights) track(fl *inflight) func() {
	t.mu.Lock()
	t.seq++
	fl.seq = t.seq
	if t.all == nil {
		t.all = map[*inflight]struct{}{}
	}
	t.all[fl] = struct{}{}
	t.mu.Unlock()
	return func() {
		t.mu.Lock()
		delete(t.all, fl)
		t.mu.Unlock()
	}
}

// about records that fl is a request about the upstream's task ids.
func (t *flights) about(fl *inflight, ids taskIDs) {
	t.mu.Lock()
	fl.task = &ids
	t.mu.Unlock()
}

// boarded records that fl goes over link.
func (t *flights) boarded(fl *inflight, link *mcp.ClientSession) {
	t.mu.Lock()
	fl.link = link
	t.mu.Unlock()
}

// ownerOf returns the flight a message the upstream sent on link belongs
// to, nil when it belongs to none; meta is the message's _meta, where an
// HTTP link's client marked the flight of the POST whose stream carried it
// (ownerTrip) when marked is set. A message of an HTTP link without a mark
// came on the session's own stream, tied to no request: it is placed as on a stdio
// link, which says nothing of any message.
func (t *flights) ownerOf(link *mcp.ClientSession, meta mcp.Meta, marked bool) *inflight {
	if link == nil {
		return nil
	}
	if id, ok := relatedTask(meta); ok {
		t.mu.Lock()
		for c := range t.all {
			if c.task != nil && c.task.upstream == id && c.link == link {
				t.mu.Unlock()
				return c
			}
		}
		t.mu.Unlock()
	}
	if seq, ok := flightMark(meta); ok && marked {
		t.mu.Lock()
		defer t.mu.Unlock()
		for c := range t.all {
			if c.seq == seq && c.link == link {
				return c
			}
		}
		return nil
	}
	return t.callOn(link)
}

// callOn returns the flight to which a message on a stdio link belongs:
// the only one in flight on it, or, when several are, the newest of them
// if they all came from one client session that initialized (stdio, or
// HTTP with a session), since the message can then reach no other client.
// Otherwise nil.
func (t *flights) callOn(link *mcp.ClientSession) *inflight {
	t.mu.Lock()
	defer t.mu.Unlock()
	var found *inflight
	for c := range t.all {
		if c.link != link {
			continue
		}
		if found != nil && (found.peer != c.peer || !ownsLink(c.peer)) {
			// Requests without a session of their own (a client of
			// 2026-07-28, stateless HTTP) may share a session value, and
			// the gateway's own have none: neither is one client.
			return nil
		}
		if found == nil || c.seq > found.seq {
			found = c
		}
	}
	return found
}

// callOpening returns the newest flight of peer's that waits for its link
// to open; nil when there is none.
func (t *flights) callOpening(peer *mcp.ServerSession) *inflight {
	t.mu.Lock()
	defer t.mu.Unlock()
	var found *inflight
	for c := range t.all {
		if c.link == nil && c.peer != nil && c.peer == peer && (found == nil || c.seq > found.seq) {
			found = c
		}
	}
	return found
}

// progressEntry is where the progress of one forwarded call goes.
type progressEntry struct {
	ctx     context.Context
	session *mcp.ServerSession
	token   any
}

// progressSeq numbers the progress tokens interlock gives upstreams, so a
// token never names two calls, whoever the clients are.
var progressSeq atomic.Uint64

// trackProgress gives a call that carries the client's progress token a
// token of interlock's own for the upstream; the returned func ends it.
func (t *flights) trackProgress(ctx context.Context, req *mcp.CallToolRequest) (string, func()) {
	if req == nil || req.Session == nil || req.Params.GetProgressToken() == nil {
		return "", func() {}
	}
	tok := "interlock-" + strconv.FormatUint(progressSeq.Add(1), 10)
	t.mu.Lock()
	if t.progress == nil {
		t.progress = map[string]progressEntry{}
	}
	t.progress[tok] = progressEntry{ctx: ctx, session: req.Session, token: req.Params.GetProgressToken()}
	t.mu.Unlock()
	return tok, func() {
		t.mu.Lock()
		delete(t.progress, tok)
		t.mu.Unlock()
	}
}

// retrackProgress points the progress of the call the upstream knows by
// tok at the client's request req: each round of a held call is a request
// of its own, with its own progress token or none.
func (t *flights) retrackProgress(ctx context.Context, tok string, req *mcp.CallToolRequest) {
	if tok == "" {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if _, ok := t.progress[tok]; !ok {
		return
	}
	e := progressEntry{ctx: ctx}
	if req != nil {
		e.session, e.token = req.Session, req.Params.GetProgressToken()
	}
	t.progress[tok] = e
}

// heldOf returns c's held call, nil when c is not held.
func (t *flights) heldOf(c *inflight) *heldCall {
	if c == nil {
		return nil
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	return c.held
}

// hold records that fl is held by h.
func (t *flights) hold(fl *inflight, h *heldCall) {
	t.mu.Lock()
	fl.held = h
	t.mu.Unlock()
}

// reown makes the client request req, served in ctx, the owner of the held
// flight fl: each round of a held call is a request of its own.
func (t *flights) reown(ctx context.Context, fl *inflight, req *mcp.CallToolRequest) {
	t.mu.Lock()
	fl.ctx, fl.req = ctx, req
	if req != nil {
		fl.peer = req.Session
	}
	t.mu.Unlock()
}

// cancel records that a question of the upstream during fl could not be
// carried to its client and was answered with cancel.
func (t *flights) cancel(fl *inflight) {
	t.mu.Lock()
	fl.cancelled = true
	t.mu.Unlock()
}

// wasCancelled reports whether cancel was recorded for fl.
func (t *flights) wasCancelled(fl *inflight) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return fl.cancelled
}

// progressOf returns where the progress the upstream reports under tok
// goes.
func (t *flights) progressOf(tok string) (progressEntry, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	e, ok := t.progress[tok]
	return e, ok
}
