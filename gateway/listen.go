package gateway

import (
	"context"
	"slices"
	"sync"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// listens keeps, for each client session, its open subscriptions/listen
// streams, so that the end of one does not end the others'.
//
// The go-sdk's server (v1.8.0) keeps one list-change subscription per
// session and kind, and when any listen of a session ends it forgets all
// of them: a client that holds a stream for list changes and opens and
// closes another for a resource would hear no more list changes. Without
// sessions each request is a session of its own and nothing is shared,
// but over stdio, where one session carries every stream, a client of
// 2026-07-28 meets it at once (the go-sdk client opens exactly those two
// streams). So when a listen ends, each stream of the session still open
// that asked for list changes is subscribed again, on that stream's own
// request (its id is what the SDK stamps on the notifications), by a
// second run of the SDK's handler that lives as long as the stream. That
// run's acknowledgement is the SDK's to send, not the client's to hear,
// and the sending side drops it.
type listens struct {
	mu   sync.Mutex
	open map[*mcp.ServerSession][]*listen
	// again serializes subscribing streams again.
	again sync.Mutex
}

// listen is one open subscriptions/listen stream of a session.
type listen struct {
	ctx    context.Context
	filter mcp.NotificationSubscriptions
	// stopAgain and againEnded, under listens.again, are the cancel and
	// the end of the SDK's run that subscribed the stream again, if any:
	// one at most per stream, however often other streams end.
	stopAgain  context.CancelFunc
	againEnded chan struct{}
}

// againKey marks the context of a run that subscribes a stream again; its
// value is closed when the SDK has taken the subscription.
type againKey struct{}

const (
	methodListen      = "subscriptions/listen"
	notificationAcked = "notifications/subscriptions/acknowledged"
)

// listsChanges reports whether f asks for any list change.
func listsChanges(f mcp.NotificationSubscriptions) bool {
	return f.ToolsListChanged || f.PromptsListChanged || f.ResourcesListChanged
}

// receiving is the middleware that keeps track of each session's streams.
func (l *listens) receiving(next mcp.MethodHandler) mcp.MethodHandler {
	return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
		if method != methodListen || ctx.Value(againKey{}) != nil {
			return next(ctx, method, req)
		}
		p, ok := req.GetParams().(*mcp.SubscriptionsListenParams)
		ss, isServer := req.GetSession().(*mcp.ServerSession)
		if !ok || p == nil || p.Notifications == nil || !isServer {
			return next(ctx, method, req)
		}
		this := &listen{ctx: ctx, filter: *p.Notifications}
		this.filter.ResourceSubscriptions = nil
		l.mu.Lock()
		if l.open == nil {
			l.open = map[*mcp.ServerSession][]*listen{}
		}
		l.open[ss] = append(l.open[ss], this)
		l.mu.Unlock()

		res, err := next(ctx, method, req)
		l.ended(ss, this, next)
		return res, err
	}
}

// ended subscribes again the streams of ss still open once this one
// ended: the SDK forgot the session's list-change subscriptions as it did.
func (l *listens) ended(ss *mcp.ServerSession, this *listen, next mcp.MethodHandler) {
	l.again.Lock()
	defer l.again.Unlock()
	// The run that subscribed this stream again ends with it, and forgets
	// as it ends.
	if this.againEnded != nil {
		<-this.againEnded
	}
	l.mu.Lock()
	rest := slices.DeleteFunc(l.open[ss], func(o *listen) bool { return o == this })
	if len(rest) == 0 {
		delete(l.open, ss)
	} else {
		l.open[ss] = rest
	}
	var resubscribe []*listen
	for _, o := range rest {
		if o.ctx.Err() == nil && listsChanges(o.filter) {
			resubscribe = append(resubscribe, o)
		}
	}
	l.mu.Unlock()
	// Earlier runs go first, since each forgets everything as it ends.
	for _, o := range resubscribe {
		if o.stopAgain != nil {
			o.stopAgain()
			<-o.againEnded
		}
	}
	// Then one after another in the order the streams were opened, as the
	// SDK had them: for a kind asked on several streams, the last one
	// opened hears it.
	for _, o := range resubscribe {
		taken, ended := make(chan struct{}), make(chan struct{})
		ctx, cancel := context.WithCancel(context.WithValue(o.ctx, againKey{}, taken))
		o.stopAgain, o.againEnded = cancel, ended
		go func() {
			defer close(ended)
			filter := o.filter
			again := &mcp.SubscriptionsListenRequest{Session: ss, Params: &mcp.SubscriptionsListenParams{Notifications: &filter}}
			_, _ = next(ctx, methodListen, again)
		}()
		select {
		case <-taken:
		case <-ended:
		}
	}
}

// sending drops the acknowledgement of a run that subscribes a stream
// again: the client had its stream's acknowledgement when it opened it.
func (l *listens) sending(next mcp.MethodHandler) mcp.MethodHandler {
	return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
		if taken, ok := ctx.Value(againKey{}).(chan struct{}); ok && method == notificationAcked {
			close(taken)
			return nil, nil
		}
		return next(ctx, method, req)
	}
}
