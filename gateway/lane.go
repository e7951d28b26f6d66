package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/interlock-mcp/interlock/gateway/internal/sdkrules"
)

// The lane serves the request that is nearly all of a client's traffic,
// one tools/call, without the SDK's server. Over HTTP the gateway has
// already read the body (mcpEnvelope), over stdio it reads each line first
// (stdio.go); the SDK would read the message four more times, each time
// with a decoder of its own, and run the call through its connection's
// goroutines. The lane builds the request the SDK would have built and
// runs it through the same middleware and the same tool handler, so the
// gate, the upstream leg and the audit are those of any other call.
//
// The lane takes only what it can answer exactly as the SDK would: one
// call of a mirrored tool (not a batch, not a retry with input responses),
// from a client of an earlier protocol on an
// initialized session, or from a client of 2026-07-28 whose _meta and
// headers are those the protocol requires; over HTTP, with the headers the
// SDK requires. Anything else goes to the SDK as before. A call's answer
// is plain JSON unless something must reach the client first (progress, a
// log message, a question for the human), in which case an HTTP response
// becomes an event stream, as the SDK's is. A question sent on the lane's
// stream is answered by the client in a message of its own, which the lane
// takes before the SDK sees it. TestLaneAnswersAsTheSDKDoes sends the
// same calls both ways and compares the answers.
//
// Because some POSTs of a session never reach the SDK, the lane also keeps
// the session's idle timeout itself, with the SDK's rule: a session
// expires after the timeout with no POST in progress.
//
// Every rule of the SDK's the lane copies is in package sdkrules, which
// names the SDK's file and line for each.

// laneOff sends every request to the SDK, so that tests can compare the
// lane's answers with the SDK's; laneServed counts the calls the lane
// answered, so that they can tell which path a call took.
var (
	laneOff    atomic.Bool
	laneServed atomic.Uint64
)

// lane serves tools/call for one HTTP handler, or one stdio stream.
type lane struct {
	g       *Gateway
	timeout time.Duration
	chain   mcp.MethodHandler

	mu       sync.Mutex
	sessions map[string]*laneSession
	shared   *laneSession // the session of calls without one (see stateless)
}

// laneSession is one session the lane knows.
type laneSession struct {
	ss    *mcp.ServerSession
	owner string
	// shared says the session stands for many clients (see stateless):
	// their calls' ids may coincide, and none can be cancelled by id.
	shared bool

	idle *sdkrules.IdleTimer // closes the session when idle; nil without a timeout

	mu sync.Mutex
	// calls are the lane calls in flight, by JSON-RPC id, and waiters the
	// questions asked on a lane stream; made on first use, since most
	// sessions are idle most of the time.
	calls   map[string]context.CancelFunc
	waiters map[string]chan rpcAnswer
}

// rpcAnswer is a client's response to a question.
type rpcAnswer struct {
	Result json.RawMessage
	Error  *jsonrpc.Error
}

func (g *Gateway) newLane(timeout time.Duration) *lane {
	l := &lane{g: g, timeout: timeout, sessions: map[string]*laneSession{}}
	final := func(ctx context.Context, _ string, req mcp.Request) (mcp.Result, error) {
		call := req.(*mcp.CallToolRequest)
		h := g.toolHandler(call.Params.Name)
		if h == nil {
			return nil, sdkrules.UnknownTool(call.Params.Name)
		}
		res, err := h(ctx, call)
		if err == nil {
			res = sdkrules.NonNullContent(res)
		}
		return res, err
	}
	// The gateway's own middleware, as the SDK's server runs it.
	l.chain = final
	for _, m := range slices.Backward(g.receiving()) {
		l.chain = m(l.chain)
	}
	return l
}

// wrap serves a session's tools/call on the lane and passes everything
// else to next, the SDK's handler for sessions.
func (l *lane) wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id := r.Header.Get(sessionIDHeader)
		if id == "" {
			if r.Method == http.MethodPost && opensSession(r) {
				// Known from the moment the SDK names it: the client may
				// send its next request as soon as it reads the answer,
				// before the SDK's handler has returned.
				owner := sdkrules.SessionOwner(r.Context())
				w = &namingWriter{ResponseWriter: w, named: func(id string) { l.register(id, owner) }}
				defer func() {
					// Had the server not yet listed the session then.
					l.register(w.Header().Get(sessionIDHeader), owner)
				}()
			}
			next.ServeHTTP(w, r)
			return
		}
		s := l.lookup(id)
		if s == nil || !sdkrules.MayUse(r.Context(), s.owner) || r.Method != http.MethodPost {
			// The SDK answers for sessions it does not know, for another
			// caller's session, and for streams and deletions.
			next.ServeHTTP(w, r)
			return
		}
		s.idle.StartPOST()
		defer s.idle.EndPOST()
		if msgs := requestMessages(r); len(msgs) == 1 {
			m := msgs[0]
			switch {
			case m.Method == "tools/call":
				if l.serve(w, r, s, m) {
					return
				}
				if asksTask(m.Params) {
					// Not for the SDK, which would run it as a plain call.
					writeRPCError(w, http.StatusOK, m.ID, errTaskCall.Code, errTaskCall.Message)
					return
				}
			case l.takesTaskV1(s, m) && r.Header.Get(protocolVersionHeader) == s.ss.InitializeParams().ProtocolVersion:
				extra := &mcp.RequestExtra{TokenInfo: auth.TokenInfoFromContext(r.Context()), Header: r.Header}
				l.answerTaskV1(r.Context(), s, m, extra, &httpOut{w: w})
				return
			case m.Method == "" && len(m.ID) > 0:
				if s.answer(m) {
					w.WriteHeader(http.StatusAccepted)
					return
				}
			case m.Method == "notifications/cancelled":
				s.cancel(m.Params)
			}
		}
		next.ServeHTTP(w, r)
	})
}

// wrapStateless serves on the lane a tools/call of protocol 2026-07-28,
// which needs no session, and passes everything else to next, the SDK's
// handler without sessions.
func (l *lane) wrapStateless(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost && r.Header.Get(sessionIDHeader) == "" && sdkrules.POSTAccepted(r) {
			if msgs := requestMessages(r); len(msgs) == 1 && taskMethods[msgs[0].Method] {
				if s := l.stateless(); s != nil && l.takesTask(msgs[0]) && taskHeaders(r.Header, msgs[0]) {
					extra := &mcp.RequestExtra{TokenInfo: auth.TokenInfoFromContext(r.Context()), Header: r.Header}
					l.answerTask(r.Context(), s, msgs[0], extra, &httpOut{w: w})
					return
				}
			} else if len(msgs) == 1 && msgs[0].Method == "tools/call" {
				if s := l.stateless(); s != nil {
					if p, ok := l.takes(s, msgs[0]); ok && p.latest && sdkrules.ToolCallHeaders(r.Header, p.Name) && !headerBound(l.g.table().find(p.Name)) {
						extra := &mcp.RequestExtra{TokenInfo: auth.TokenInfoFromContext(r.Context()), Header: r.Header}
						if l.run(r.Context(), s, msgs[0], p, extra, &httpOut{w: w}) {
							return
						}
					}
				}
			}
		}
		next.ServeHTTP(w, r)
	})
}

// stateless returns the session the lane's calls without a session run
// on, made on first use. Requests of 2026-07-28 carry what the gateway
// reads of a client in their _meta; the session is there because the
// gateway's handlers take a call's session to be where its client is, and
// it has none of its own: no id, nothing initialized. What the server
// sends it, such as notices of changed lists, is read and dropped.
func (l *lane) stateless() *laneSession {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.shared != nil {
		return l.shared
	}
	st, ct := mcp.NewInMemoryTransports()
	ss, err := l.g.server.Connect(l.g.life, st, nil)
	if err != nil {
		return nil
	}
	conn, err := ct.Connect(l.g.life)
	if err != nil {
		_ = ss.Close()
		return nil
	}
	go func() {
		for {
			if _, err := conn.Read(l.g.life); err != nil {
				return
			}
		}
	}()
	go func() {
		<-l.g.life.Done()
		_ = ss.Close()
		_ = conn.Close()
	}()
	l.shared = l.session(ss, "")
	l.shared.shared = true
	return l.shared
}

// register starts knowing the session the server opened under id, unless
// it knows it already.
func (l *lane) register(id, owner string) {
	if id == "" || l.lookup(id) != nil {
		return
	}
	var ss *mcp.ServerSession
	for s := range l.g.server.Sessions() {
		if s.ID() == id {
			ss = s
			break
		}
	}
	if ss == nil {
		return
	}
	s := l.session(ss, owner)
	s.idle = sdkrules.NewIdleTimer(l.timeout, func() { _ = ss.Close() })
	l.mu.Lock()
	if l.sessions[id] != nil {
		l.mu.Unlock()
		s.idle.Stop()
		return
	}
	l.sessions[id] = s
	l.mu.Unlock()
	go func() {
		_ = ss.Wait()
		l.mu.Lock()
		delete(l.sessions, id)
		l.mu.Unlock()
		s.idle.Stop()
	}()
}

// session makes the lane's record of ss.
func (l *lane) session(ss *mcp.ServerSession, owner string) *laneSession {
	return &laneSession{ss: ss, owner: owner}
}

// namingWriter calls named with the session id the SDK's answer carries,
// once, before the answer is written.
type namingWriter struct {
	http.ResponseWriter
	named func(id string)
	once  sync.Once
}

func (w *namingWriter) name() {
	w.once.Do(func() {
		if id := w.Header().Get(sessionIDHeader); id != "" {
			w.named(id)
		}
	})
}

func (w *namingWriter) WriteHeader(status int) {
	w.name()
	w.ResponseWriter.WriteHeader(status)
}

func (w *namingWriter) Write(b []byte) (int, error) {
	w.name()
	return w.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController reach the connection's writer.
func (w *namingWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

func (l *lane) lookup(id string) *laneSession {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.sessions[id]
}

// callParams are the params of a tools/call as the lane reads them.
type callParams struct {
	Name           string          `json:"name"`
	Arguments      json.RawMessage `json:"arguments"`
	Meta           map[string]any  `json:"_meta"`
	InputResponses json.RawMessage `json:"inputResponses"`
	RequestState   string          `json:"requestState"`
	// latest is set for a request of protocol 2026-07-28.
	latest bool
	// upstreamTask is the call's params.task when the tool's upstream
	// runs tasks of its own and the call goes on with it.
	upstreamTask json.RawMessage
	// task is set when the call asks to run as a task as clients before
	// 2026-07-28 do, which the gateway refuses (see errTaskCall); taskable
	// when a client of 2026-07-28 declares the tasks extension, so that a
	// call that waits for approval becomes a task (see tasks.go).
	task, taskable bool
}

// serve runs a tools/call on the lane; false when the lane does not take
// it and the SDK must.
func (l *lane) serve(w http.ResponseWriter, r *http.Request, s *laneSession, m rpcMessage) bool {
	if ip := s.ss.InitializeParams(); ip == nil || r.Header.Get(protocolVersionHeader) != ip.ProtocolVersion || !sdkrules.POSTAccepted(r) {
		return false
	}
	p, ok := l.takes(s, m)
	if !ok {
		return false
	}
	extra := &mcp.RequestExtra{TokenInfo: auth.TokenInfoFromContext(r.Context()), Header: r.Header}
	return l.run(r.Context(), s, m, p, extra, &httpOut{w: w})
}

// takes reads a tools/call the lane may serve for s: a call of a mirrored
// tool, with no answers to input requests, by a
// client of an earlier protocol on an initialized session, or by a client
// of 2026-07-28 that names itself in _meta as that protocol requires.
func (l *lane) takes(s *laneSession, m rpcMessage) (callParams, bool) {
	var p callParams
	if len(m.ID) == 0 || laneOff.Load() {
		return p, false
	}
	if d, ok := m.decoded.(*mcp.CallToolParamsRaw); ok {
		// Read once already, by the envelope.
		if len(d.InputResponses) > 0 || d.RequestState != "" {
			return p, false
		}
		p = callParams{Name: d.Name, Arguments: d.Arguments, Meta: d.Meta}
	} else if err := json.Unmarshal(m.Params, &p); err != nil || len(p.InputResponses) > 0 || p.RequestState != "" {
		return p, false
	}
	if _, named := p.Meta[mcp.MetaKeyProtocolVersion]; named {
		if !sdkrules.LatestMeta(p.Meta) {
			return p, false
		}
		p.latest = true
	} else if ip := s.ss.InitializeParams(); ip == nil || ip.ProtocolVersion >= protocolNew {
		return p, false
	}
	p.task = asksTask(m.Params)
	p.taskable = p.latest && wantsTask(p.Meta)
	return p, l.g.toolHandler(p.Name) != nil
}

// run serves a call the lane takes, and writes its answer to out; false
// when another call of the session in flight has the same id, which the
// SDK then refuses.
func (l *lane) run(ctx context.Context, s *laneSession, m rpcMessage, p callParams, extra *mcp.RequestExtra, out laneOut) bool {
	ctx, leave, ok := s.enter(ctx, m.ID)
	if !ok {
		return false
	}
	defer leave()
	l.call(ctx, s, m, p, extra, out)
	return true
}

// enter records a call of the session in flight, so that the client can
// cancel it; false when one with the same id is.
func (s *laneSession) enter(ctx context.Context, id json.RawMessage) (context.Context, func(), bool) {
	ctx, cancel := context.WithCancel(ctx)
	if s.shared {
		return ctx, cancel, true
	}
	key := string(id)
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, dup := s.calls[key]; dup {
		cancel()
		return nil, nil, false
	}
	if s.calls == nil {
		s.calls = map[string]context.CancelFunc{}
	}
	s.calls[key] = cancel
	return ctx, func() {
		cancel()
		s.mu.Lock()
		delete(s.calls, key)
		s.mu.Unlock()
	}, true
}

// call runs the call through the gateway's middleware and tool handler,
// and writes its answer.
func (l *lane) call(ctx context.Context, s *laneSession, m rpcMessage, p callParams, extra *mcp.RequestExtra, out laneOut) {
	st := &laneStream{s: s, out: out}
	if p.task && (p.latest || !sessionTasks(s.ss)) {
		st.answer(m.ID, nil, errTaskCall)
		return
	}
	ctx = withState(ctx, func(s *requestState) { s.lane = st })
	if p.task && l.g.upstreamTasks(p.Name) {
		// The upstream makes the task; the gate still decides first.
		p.upstreamTask, _ = taskOf(m.Params)
		ctx = withState(ctx, func(s *requestState) { s.verbatim = &verbatim{task: p.upstreamTask} })
	}
	req := &mcp.CallToolRequest{
		Session: s.ss,
		Params:  &mcp.CallToolParamsRaw{Name: p.Name, Arguments: p.Arguments, Meta: p.Meta},
		Extra:   extra,
	}
	var v *verbatim
	if p.latest {
		// The result is completed below from its JSON in any case, so a
		// link of the same protocol can hand over its bytes.
		v = &verbatim{latest: true}
		ctx = withState(ctx, func(s *requestState) { s.verbatim = v })
	}
	res, err := l.chain(ctx, "tools/call", req)
	if p.upstreamTask != nil && err == nil {
		// Only a call passed on with its task is read for the upstream's:
		// every other result goes on unread.
		if fields, id, made := upstreamTaskOf(res); made {
			res, err = l.g.tasks.adopt(ctx, identify(ctx, req), p, fields, id)
			laneServed.Add(1)
			st.answer(m.ID, res, err)
			return
		}
	}
	if p.task {
		res, err = l.g.tasks.created(ctx, identify(ctx, req), p, res, err)
		laneServed.Add(1)
		st.answer(m.ID, res, err)
		return
	}
	if p.taskable {
		if t := l.g.tasks.waiting(ctx, identify(ctx, req), p, res); t != nil {
			res, err = created(l.g.tasks.withInput(taskFields(t), t))
			laneServed.Add(1)
			st.answer(m.ID, res, err)
			return
		}
	}
	if p.latest {
		if res, err = v.result(res, err); err == nil {
			res, err = l.completed(res)
		}
	}
	laneServed.Add(1)
	st.answer(m.ID, res, err)
}

// completed adds to a result for a client of 2026-07-28 what the SDK's
// server adds (see sdkrules.Complete).
func (l *lane) completed(res mcp.Result) (mcp.Result, error) {
	fields, err := resultFields(res)
	if err != nil {
		return nil, err
	}
	if err := sdkrules.Complete(fields, l.g.impl); err != nil {
		return nil, err
	}
	return &verbatimResult{CallToolResult: &mcp.CallToolResult{}, raw: objectBytes(fields)}, nil
}

// jsonContent reports whether the body is declared JSON, as the SDK
// requires of MCP requests and the REST face of its own.
func jsonContent(r *http.Request) bool { return sdkrules.JSONContent(r.Header) }

// cancel stops the lane call a client's notifications/cancelled names.
func (s *laneSession) cancel(params json.RawMessage) {
	var p struct {
		RequestID json.RawMessage `json:"requestId"`
	}
	if json.Unmarshal(params, &p) != nil {
		return
	}
	s.mu.Lock()
	stop := s.calls[string(p.RequestID)]
	s.mu.Unlock()
	if stop != nil {
		stop()
	}
}

// answer hands a client's response to the question on a lane stream that
// waits for it; false when none does.
func (s *laneSession) answer(m rpcMessage) bool {
	s.mu.Lock()
	ch := s.waiters[string(m.ID)]
	delete(s.waiters, string(m.ID))
	s.mu.Unlock()
	if ch == nil {
		return false
	}
	a := rpcAnswer{Result: m.Result}
	if len(m.Error) > 0 {
		a.Error = new(jsonrpc.Error)
		if json.Unmarshal(m.Error, a.Error) != nil {
			a.Error = &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: "unreadable error"}
		}
	}
	ch <- a
	return true
}

// laneStreamOf returns the stream of the lane call ctx belongs to, if any.
func laneStreamOf(ctx context.Context) *laneStream {
	return stateOf(ctx).lane
}

// laneStream carries one lane call's messages to its client.
type laneStream struct {
	s   *laneSession
	out laneOut

	mu   sync.Mutex
	done bool
}

// laneOut is where a lane call's messages go: its HTTP response, or the
// stdio stream the session shares.
type laneOut interface {
	// ahead writes a message that must reach the client before the answer.
	ahead(msg []byte) error
	// last writes the answer.
	last(msg []byte)
}

// questionSeq numbers the questions the lane asks clients; its ids cannot
// be mistaken for the SDK's, which are numbers.
var questionSeq atomic.Uint64

// errAnswered is what a message meets that comes for a call's stream
// after the call was answered.
var errAnswered = errors.New("the call has been answered")

// send writes one message ahead of the answer.
func (st *laneStream) send(msg []byte) error {
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.done {
		return errAnswered
	}
	return st.out.ahead(msg)
}

// httpOut is a lane call's HTTP response: plain JSON, or an event stream
// once something must reach the client before the answer.
type httpOut struct {
	w         http.ResponseWriter
	streaming bool
}

func (o *httpOut) ahead(msg []byte) error {
	if !o.streaming {
		h := o.w.Header()
		h.Set("Content-Type", "text/event-stream")
		h.Set("Cache-Control", "no-cache")
		o.w.WriteHeader(http.StatusOK)
		o.streaming = true
	}
	if err := sdkrules.WriteMessageEvent(o.w, msg); err != nil {
		return err
	}
	return http.NewResponseController(o.w).Flush()
}

func (o *httpOut) last(msg []byte) {
	if o.streaming {
		_ = sdkrules.WriteMessageEvent(o.w, msg)
		return
	}
	o.w.Header().Set("Content-Type", "application/json")
	o.w.WriteHeader(http.StatusOK)
	_, _ = o.w.Write(msg)
}

// requestBytes is a request of the gateway's own to a client, with id, or
// a notification when id is the zero ID.
func requestBytes(id jsonrpc.ID, method string, params any) ([]byte, error) {
	p, err := json.Marshal(params)
	if err != nil {
		return nil, err
	}
	return jsonrpc.EncodeMessage(&jsonrpc.Request{ID: id, Method: method, Params: p})
}

// notify sends a notification on the stream.
func (st *laneStream) notify(method string, params any) error {
	b, err := requestBytes(jsonrpc.ID{}, method, params)
	if err != nil {
		return err
	}
	return st.send(b)
}

// ask sends a request to the client on the stream and decodes its answer
// into result.
func (st *laneStream) ask(ctx context.Context, method string, params, result any) error {
	id := `"interlock-` + strconv.FormatUint(questionSeq.Add(1), 10) + `"`
	ch := make(chan rpcAnswer, 1)
	st.s.mu.Lock()
	if st.s.waiters == nil {
		st.s.waiters = map[string]chan rpcAnswer{}
	}
	st.s.waiters[id] = ch
	st.s.mu.Unlock()
	defer func() {
		st.s.mu.Lock()
		delete(st.s.waiters, id)
		st.s.mu.Unlock()
	}()
	rid, _ := jsonrpc.MakeID(strings.Trim(id, `"`))
	b, err := requestBytes(rid, method, params)
	if err != nil {
		return err
	}
	if err := st.send(b); err != nil {
		return err
	}
	select {
	case a := <-ch:
		if a.Error != nil {
			return a.Error
		}
		return json.Unmarshal(a.Result, result)
	case <-ctx.Done():
		return ctx.Err()
	}
}

// elicit asks the client to show a form (or a URL) to its human.
func (st *laneStream) elicit(ctx context.Context, p *mcp.ElicitParams) (*mcp.ElicitResult, error) {
	res := new(mcp.ElicitResult)
	if err := st.ask(ctx, "elicitation/create", sdkrules.ElicitMode(p), res); err != nil {
		return nil, err
	}
	return res, nil
}

// answer writes the call's answer, and ends the stream.
func (st *laneStream) answer(id json.RawMessage, res mcp.Result, err error) {
	var rpcErr *jsonrpc.Error
	if err != nil {
		if rpcErr, _ = err.(*jsonrpc.Error); rpcErr == nil {
			rpcErr = &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: "interlock could not complete the call"}
		}
	}
	b, merr := responseBytes(id, res, rpcErr)
	if merr != nil {
		b, _ = responseBytes(id, nil, &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: "interlock could not encode the result"})
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	st.done = true
	st.out.last(b)
}
