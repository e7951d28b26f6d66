package gateway

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"net/http"
	"slices"
	"sync"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// Without sessions, the go-sdk's server lets a request of a protocol
// before 2026-07-28 run on after its client has gone: the handler's
// context does not end with the HTTP request, and a client's
// notifications/cancelled, which comes in a POST of its own with no
// session to name, reaches no call. The TypeScript SDK 1.x cancels so and
// leaves the call's stream open; the go-sdk client closes the stream. A
// call either client gave up on would run upstream to its end.
//
// statelessCalls ends such a call both ways. Each request served without
// a session runs under its HTTP request's context (boundToRequest), so a
// closed stream ends it. And each is known by its caller and JSON-RPC id
// while it runs, so a cancellation names it: the caller is the bearer
// credential the request carried (every request is one caller when the
// gateway needs none). Two calls of one caller may share an id (two
// clients with one key, each numbering its requests from 0); a
// cancellation that names more than one call in flight ends none of them
// rather than guess.
type statelessCalls struct {
	mu    sync.Mutex
	calls map[statelessCall][]*statelessRun
}

// statelessRun is one call in flight; its cancel ends it.
type statelessRun struct{ cancel context.CancelFunc }

// statelessCall names a call served without a session.
type statelessCall struct {
	caller [sha256.Size]byte
	id     string
}

// callOf names the call of caller (the request r) with the JSON-RPC id.
func callOf(r *http.Request, id json.RawMessage) statelessCall {
	credential, _ := bearerCredential(r)
	var compact bytes.Buffer
	if json.Compact(&compact, id) != nil {
		compact.Reset()
		compact.Write(id)
	}
	return statelessCall{caller: sha256.Sum256([]byte(credential)), id: compact.String()}
}

// wrap serves next, the handler of requests without sessions.
func (c *statelessCalls) wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		msgs := requestMessages(r)
		if r.Method != http.MethodPost || r.Header.Get(sessionIDHeader) != "" || len(msgs) != 1 {
			next.ServeHTTP(w, r)
			return
		}
		m := msgs[0]
		switch {
		case m.Method == "notifications/cancelled":
			var p struct {
				RequestID json.RawMessage `json:"requestId"`
			}
			if json.Unmarshal(m.Params, &p) == nil && len(p.RequestID) > 0 {
				c.cancel(callOf(r, p.RequestID))
			}
		case m.Method != "" && len(m.ID) > 0 && !newProtocol(r):
			// From 2026-07-28 on, the SDK and the lane end a request with
			// its stream, and a client cancels by closing it.
			ctx, cancel := context.WithCancel(r.Context())
			defer cancel()
			name, run := callOf(r, m.ID), &statelessRun{cancel: cancel}
			c.add(name, run)
			defer c.remove(name, run)
			r = r.WithContext(withState(ctx, func(s *requestState) { s.request = ctx }))
		}
		next.ServeHTTP(w, r)
	})
}

func (c *statelessCalls) add(name statelessCall, run *statelessRun) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.calls == nil {
		c.calls = map[statelessCall][]*statelessRun{}
	}
	c.calls[name] = append(c.calls[name], run)
}

func (c *statelessCalls) remove(name statelessCall, run *statelessRun) {
	c.mu.Lock()
	defer c.mu.Unlock()
	list := slices.DeleteFunc(c.calls[name], func(r *statelessRun) bool { return r == run })
	if len(list) == 0 {
		delete(c.calls, name)
	} else {
		c.calls[name] = list
	}
}

// cancel ends the call name names, when exactly one is in flight.
func (c *statelessCalls) cancel(name statelessCall) {
	c.mu.Lock()
	list := c.calls[name]
	var stop context.CancelFunc
	if len(list) == 1 {
		stop = list[0].cancel
	}
	c.mu.Unlock()
	if stop != nil {
		stop()
	}
}

// boundToRequest ends a handler's context with the HTTP request it serves,
// for requests served without a session (see statelessCalls).
func boundToRequest(next mcp.MethodHandler) mcp.MethodHandler {
	return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
		request := stateOf(ctx).request
		if request == nil {
			return next(ctx, method, req)
		}
		ctx, cancel := context.WithCancel(ctx)
		defer cancel()
		stop := context.AfterFunc(request, cancel)
		defer stop()
		return next(ctx, method, req)
	}
}
