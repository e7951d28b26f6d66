package gateway

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/interlock-mcp/interlock"
)

// A client of 2026-07-28 cannot be sent a request: a server asks it
// something by answering the call with input requests, and the client
// calls again with its answers. An upstream of an earlier protocol asks
// in the middle of the call instead (elicitation/create,
// sampling/createMessage, roots/list) and waits for the answer. interlock
// joins the two by holding the call: the upstream's request stays open,
// the client is answered with the question as an input request, and its
// retry gives the answer to the upstream, after which the same call goes
// on to its result or its next question.
//
// The request state the client echoes names the held call. The gate seals
// it like the state of any question a tool asks (see interlock's relay):
// bound to the caller's tenant, principal, tool and arguments, single
// use, and let through without the policy's keys being asked again. The
// tool runs once: the retry continues it. A held call waits for the
// client no longer than heldTimeout; then the upstream's question is
// refused and the call is cancelled upstream.

// heldTimeout bounds how long a held call waits for the client's retry.
// A variable so that tests need not wait as long.
var heldTimeout = 2 * time.Minute

// heldPrefix starts the request state that names a held call.
const heldPrefix = "interlock-held:"

// heldCall is one call of a client of 2026-07-28 on a link of an earlier
// protocol, whose upstream request outlives the client's requests.
type heldCall struct {
	// ctx is the upstream request's; stop ends it.
	ctx  context.Context
	stop context.CancelFunc
	// asked carries the upstream's questions to whichever request of the
	// client waits for the call; done its outcome.
	asked chan *heldQuestion
	done  chan heldOutcome
	// fl is the call in flight, which each round points at the client's
	// current request, as it points the upstream's progress, under the
	// token interlock gave the upstream (progress, empty for none).
	fl       *inflight
	progress string
	// pending is the question the client was given, once parked; timer
	// expires the parked call.
	pending *heldQuestion
	asks    int
	timer   *time.Timer
}

// heldQuestion is one question of the upstream, waiting for its answer.
type heldQuestion struct {
	id      string
	request mcp.InputRequest
	answer  chan mcp.InputResponse
}

type heldOutcome struct {
	res *mcp.CallToolResult
	err error
}

// holds reports whether a call of req on link must be held: its client
// speaks 2026-07-28 and the link an earlier protocol, whose upstream asks
// its questions in the middle of the call.
func holds(req *mcp.CallToolRequest, link *mcp.ClientSession) bool {
	if req == nil {
		return false
	}
	// Named in each request of 2026-07-28; an earlier client's session
	// says its own.
	v, _ := req.Params.Meta[mcp.MetaKeyProtocolVersion].(string)
	if v == "" && req.Session != nil {
		if ip := req.Session.InitializeParams(); ip != nil {
			v = ip.ProtocolVersion
		}
	}
	if v < protocolNew {
		return false
	}
	ir := link.InitializeResult()
	return ir != nil && ir.ProtocolVersion < protocolNew
}

// hold starts call on a context of its own, which outlives ctx's request;
// finished runs when the upstream has answered.
func (u *upstream) hold(ctx context.Context, fl *inflight, progress string, call func(context.Context) (*mcp.CallToolResult, error), finished func()) *heldCall {
	hctx, stop := context.WithCancel(context.WithoutCancel(ctx))
	h := &heldCall{ctx: hctx, stop: stop, asked: make(chan *heldQuestion), done: make(chan heldOutcome, 1), fl: fl, progress: progress}
	u.flights.hold(fl, h)
	go func() {
		res, err := call(hctx)
		finished()
		stop()
		h.done <- heldOutcome{res, err}
	}()
	return h
}

// ask gives the client of h the upstream's question q and waits for its
// answer, until the held call ends or the upstream withdraws the question
// (ctx, its request's, ends).
func (h *heldCall) ask(ctx context.Context, q mcp.InputRequest) (mcp.InputResponse, error) {
	hq := &heldQuestion{request: q, answer: make(chan mcp.InputResponse, 1)}
	select {
	case h.asked <- hq:
	case <-h.ctx.Done():
		return nil, h.ctx.Err()
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	select {
	case a := <-hq.answer:
		if a == nil {
			return nil, errors.New("the client answered without the response asked for")
		}
		return a, nil
	case <-h.ctx.Done():
		return nil, h.ctx.Err()
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// wait waits on behalf of the client's request ctx for the held call's
// outcome, or parks it at the upstream's next question: the client is
// answered with that question as an input request. parked says so. When
// ctx ends first (the client cancelled, the call's time ran out), the
// held call ends with it.
func (u *upstream) wait(ctx context.Context, h *heldCall) (res *mcp.CallToolResult, parked bool, err error) {
	select {
	case o := <-h.done:
		return o.res, false, o.err
	case q := <-h.asked:
		return u.park(h, q), true, nil
	case <-ctx.Done():
		h.stop()
		o := <-h.done
		if o.err == nil {
			// The upstream answered as it was told to stop.
			return o.res, false, nil
		}
		return nil, false, ctx.Err()
	}
}

// park keeps h for the client's retry and returns the input-required
// result that asks the client q.
func (u *upstream) park(h *heldCall, q *heldQuestion) *mcp.CallToolResult {
	h.asks++
	q.id = fmt.Sprintf("upstream_question_%d", h.asks)
	h.pending = q
	var raw [16]byte
	_, _ = rand.Read(raw[:])
	id := hex.EncodeToString(raw[:])
	u.heldMu.Lock()
	if u.held == nil {
		u.held = map[string]*heldCall{}
	}
	u.held[id] = h
	// Set under the lock, so that whoever takes h finds its timer.
	h.timer = time.AfterFunc(heldTimeout, func() {
		if u.takeHeld(id) != nil {
			u.log().Warn("a held call's client did not answer the upstream's question in time; cancelling the call",
				"upstream", u.cfg.Name, "waited", heldTimeout)
			h.stop()
		}
	})
	u.heldMu.Unlock()
	return &mcp.CallToolResult{InputRequests: mcp.InputRequestMap{q.id: q.request}, RequestState: heldPrefix + id}
}

// takeHeld removes and returns the held call id names; nil when this
// gateway holds none by that name.
func (u *upstream) takeHeld(id string) *heldCall {
	u.heldMu.Lock()
	defer u.heldMu.Unlock()
	h := u.held[id]
	delete(u.held, id)
	return h
}

// resume takes the held call the retry r names, for the client's request
// ctx, and gives the client's answer to the upstream's question; the
// caller waits for the call again.
func (u *upstream) resume(ctx context.Context, name string, req *mcp.CallToolRequest, r interlock.Retry) (*heldCall, error) {
	h := u.takeHeld(strings.TrimPrefix(r.State, heldPrefix))
	if h == nil {
		return nil, &interlock.Error{
			Code: interlock.CodeCancelled,
			Message: fmt.Sprintf("The call of %s that asked this question is no longer waiting here: its answer came after %s, "+
				"or to another replica of interlock than the one that holds the call. It did not finish; it may have done part of its work.",
				name, heldTimeout),
			Hint: fmt.Sprintf("Call %s again, without input responses, and answer its question within %s.", name, heldTimeout),
		}
	}
	h.timer.Stop()
	u.flights.reown(ctx, h.fl, req)
	u.flights.retrackProgress(ctx, h.progress, req)
	q := h.pending
	h.pending = nil
	q.answer <- answerFor(q.request, r.Responses[q.id])
	return h, nil
}

// answerFor returns a, when it answers the kind of question q is; nil
// otherwise.
func answerFor(q mcp.InputRequest, a mcp.InputResponse) mcp.InputResponse {
	switch a.(type) {
	case *mcp.ElicitResult:
		if _, ok := q.(*mcp.ElicitParams); ok {
			return a
		}
	case *mcp.CreateMessageWithToolsResult:
		if _, ok := q.(*mcp.CreateMessageWithToolsParams); ok {
			return a
		}
	case *mcp.ListRootsResult:
		if _, ok := q.(*mcp.ListRootsParams); ok {
			return a
		}
	}
	return nil
}

// noAnswer is the JSON-RPC error an upstream gets for a question of
// method its client did not answer: the client did not declare the
// capability (declared false) or answered nothing usable in time.
func noAnswer(method string, declared bool) *jsonrpc.Error {
	if !declared {
		return &jsonrpc.Error{Code: jsonrpc.CodeMethodNotFound, Message: "the client of this call does not offer " + method}
	}
	return &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: "the client did not answer " + method}
}

// heldCalls are an upstream's parked calls, by the name their request
// state gives them.
type heldCalls struct {
	heldMu sync.Mutex
	held   map[string]*heldCall
}
