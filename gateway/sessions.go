package gateway

import (
	"encoding/json"
	"fmt"
	"net/http"
	"sync"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/interlock-mcp/interlock/gateway/internal/sdkrules"
)

// sessionOwner encodes a tenant and a principal as one string, the owner of
// an MCP session: the SDK lets only requests whose TokenInfo.UserID equals
// the creator's use a session. A JSON array cannot be forged by a name
// that contains a separator, so alice in acme and alice in globex, or
// "a:b" in "c" and "b" in "c:a", own different sessions.
func sessionOwner(tenant, principal string) string {
	b, _ := json.Marshal([]string{tenant, principal})
	return string(b)
}

// sessionIDHeader is the header the streamable HTTP transport names
// sessions by.
const sessionIDHeader = sdkrules.SessionIDHeader

// sessionCap bounds the open sessions of each owner. The SDK closes idle
// sessions; sessionCap only counts, from the sessions the server still
// holds, so a closed or expired session frees its place at once.
type sessionCap struct {
	max    int
	server *mcp.Server
	// refused hears each session refused, for the log and the metrics;
	// nil when nobody listens.
	refused func(owner string, max int)

	mu sync.Mutex
	// owners maps each session this face opened to its owner.
	owners map[string]string
	// opening counts, per owner, requests that may be opening a session.
	opening map[string]int
}

func newSessionCap(max int, server *mcp.Server, refused func(owner string, max int)) *sessionCap {
	return &sessionCap{max: max, server: server, refused: refused, owners: map[string]string{}, opening: map[string]int{}}
}

// sessionRefused logs and counts a session refused by a sessionCap: a
// client that never closes its sessions is otherwise refused in silence.
func (g *Gateway) sessionRefused(owner string, max int) {
	g.log.Warn("refused a new MCP session (429): the caller holds the most open sessions allowed",
		"owner", logText(owner), "max_sessions_per_principal", max)
	if g.metrics != nil {
		g.metrics.Event("session_refused")
	}
}

// wrap refuses, with 429, a request that would open a session beyond the
// caller's cap.
func (c *sessionCap) wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost || r.Header.Get(sessionIDHeader) != "" || !opensSession(r) {
			next.ServeHTTP(w, r)
			return
		}
		owner := sdkrules.SessionOwner(r.Context())
		if !c.reserve(owner) {
			if c.refused != nil {
				c.refused(owner, c.max)
			}
			writeRPCError(w, http.StatusTooManyRequests, nil, jsonrpc.CodeInvalidRequest, fmt.Sprintf(
				"This caller already has %d open MCP sessions, the most allowed. Close one (DELETE /mcp with its %s header) "+
					"or reuse it; idle sessions also expire.", c.max, sessionIDHeader))
			return
		}
		defer func() { c.settle(owner, w.Header().Get(sessionIDHeader)) }()
		next.ServeHTTP(w, r)
	})
}

// opensSession reports whether a POST without a session carries an
// initialize request, the only one that leaves a session open. Requests of
// newer protocols need none, and clients send them to probe.
func opensSession(r *http.Request) bool {
	for _, m := range requestMessages(r) {
		if m.Method == "initialize" {
			return true
		}
	}
	return false
}

// reserve takes a place for owner if it has one left.
func (c *sessionCap) reserve(owner string) bool {
	// A session that never completed initialize is being closed by the
	// SDK (a client may probe with a newer protocol first); it holds no
	// place.
	live := map[string]bool{}
	for ss := range c.server.Sessions() {
		if ss.InitializeParams() != nil {
			live[ss.ID()] = true
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	n := c.opening[owner]
	for id, o := range c.owners {
		switch {
		case !live[id]:
			delete(c.owners, id)
		case o == owner:
			n++
		}
	}
	if n >= c.max {
		return false
	}
	c.opening[owner]++
	return true
}

// settle turns a reservation into the session the request opened, if any.
func (c *sessionCap) settle(owner, id string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.opening[owner]--; c.opening[owner] == 0 {
		delete(c.opening, owner)
	}
	if id != "" {
		c.owners[id] = owner
	}
}
