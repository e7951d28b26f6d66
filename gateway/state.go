package gateway

import (
	"context"
	"net"

	"github.com/modelcontextprotocol/go-sdk/auth"

	"github.com/interlock-mcp/interlock"
)

// requestState is what the gateway learns of one request on its way in,
// kept in the request's context under one key. Each layer adds what it
// found to a copy (see withState), so a context holds what the layers
// above it found and nothing a sibling found; the one struct replaces a
// context key per fact and is read by the functions below, never by
// control flow that a reader would not see in the call path.
type requestState struct {
	conn       net.Conn           // the connection the request came on (ConnContext)
	messages   []rpcMessage       // a POST's messages, read once by mcpEnvelope
	token      *auth.TokenInfo    // the bearer credential requireAuth verified
	who        interlock.Identity // the caller, identified once by tenantView
	identified bool               // who is set
	lane       *laneStream        // the lane call's stream to its client
	verbatim   *verbatim          // a tools/call handler's carrier of the upstream's bytes
	limits     *tenantUpstreams   // the upstreams the caller's tenant may use, when limited
	request    context.Context    // the HTTP request a request without a session is served in (stateless.go)
	flight     *inflight          // the request in flight on an upstream's link (owners.go)
}

// tenantUpstreams names the upstreams a tenant limited to some may use.
type tenantUpstreams struct{ names []string }

// stateKey keys a request's requestState in its context.
type stateKey struct{}

// noState is the state of a context the gateway has added nothing to.
var noState requestState

// stateOf returns the state of the request ctx belongs to; never nil, and
// never to be written to.
func stateOf(ctx context.Context) *requestState {
	if s, ok := ctx.Value(stateKey{}).(*requestState); ok {
		return s
	}
	return &noState
}

// withState returns ctx with a copy of its state that set has changed.
func withState(ctx context.Context, set func(*requestState)) context.Context {
	s := *stateOf(ctx)
	set(&s)
	return context.WithValue(ctx, stateKey{}, &s)
}
