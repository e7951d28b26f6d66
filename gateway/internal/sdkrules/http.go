package sdkrules

import (
	"context"
	"fmt"
	"io"
	"mime"
	"net"
	"net/http"
	"net/netip"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/auth"
)

// Protocol20260728 is the first protocol version the SDK serves without
// sessions, whose requests name the client in their _meta.
const Protocol20260728 = "2026-07-28"

// The headers of the streamable HTTP transport.
const (
	ProtocolVersionHeader = "Mcp-Protocol-Version"
	SessionIDHeader       = "Mcp-Session-Id"
	LastEventIDHeader     = "Last-Event-ID"
	MethodHeader          = "Mcp-Method"
	NameHeader            = "Mcp-Name"
)

// POSTAccepted reports whether the SDK's streamable handler lets a POST
// through to its session without a word: no Last-Event-ID, a JSON body,
// both answers accepted, and no sign of DNS rebinding.
func POSTAccepted(r *http.Request) bool {
	jsonOK, streamOK := Accepts(r.Header)
	return len(r.Header.Values(LastEventIDHeader)) == 0 && JSONContent(r.Header) && jsonOK && streamOK && !Rebinding(r)
}

// Rebinding reports whether r reached a loopback listener by a Host that
// is not loopback, as a DNS rebinding attack does; the SDK answers 403.
func Rebinding(r *http.Request) bool {
	local, ok := r.Context().Value(http.LocalAddrContextKey).(net.Addr)
	return ok && local != nil && IsLoopback(local.String()) && !IsLoopback(r.Host)
}

// IsLoopback reports whether addr, a host or host:port, is loopback.
func IsLoopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		host = strings.Trim(addr, "[]")
	}
	if host == "localhost" {
		return true
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.IsLoopback()
}

// JSONContent reports whether h declares its body application/json,
// parameters aside.
func JSONContent(h http.Header) bool {
	t, _, err := mime.ParseMediaType(h.Get("Content-Type"))
	return err == nil && t == "application/json"
}

// Accepts reports whether h's Accept headers take JSON, and an event
// stream.
func Accepts(h http.Header) (jsonOK, streamOK bool) {
	for _, value := range h.Values("Accept") {
		for _, token := range strings.Split(value, ",") {
			base, _, _ := strings.Cut(token, ";")
			switch strings.ToLower(strings.TrimSpace(base)) {
			case "application/json", "application/*":
				jsonOK = true
			case "text/event-stream", "text/*":
				streamOK = true
			case "*/*":
				jsonOK, streamOK = true, true
			}
		}
	}
	return jsonOK, streamOK
}

// ToolCallHeaders reports whether the headers of a tools/call of protocol
// 2026-07-28 are those the SDK requires of it: that version, the method
// and the tool's name. The caller checks that _meta names the same
// version (see LatestMeta); Mcp-Param-* headers it leaves to the SDK.
func ToolCallHeaders(h http.Header, tool string) bool {
	return h.Get(ProtocolVersionHeader) == Protocol20260728 && h.Get(MethodHeader) == "tools/call" && h.Get(NameHeader) == tool
}

// SessionOwner is the owner the SDK records for a session a request with
// ctx opens: its token's UserID, or "" without a token.
func SessionOwner(ctx context.Context) string {
	if ti := auth.TokenInfoFromContext(ctx); ti != nil {
		return ti.UserID
	}
	return ""
}

// MayUse reports whether a request with ctx may use a session of owner:
// any request when the session has no owner, else one whose token has the
// owner's UserID. The SDK answers others 403.
func MayUse(ctx context.Context, owner string) bool {
	if owner == "" {
		return true
	}
	ti := auth.TokenInfoFromContext(ctx)
	return ti != nil && ti.UserID == owner
}

// WriteMessageEvent writes msg to w as one event of an MCP event stream.
func WriteMessageEvent(w io.Writer, msg []byte) error {
	_, err := fmt.Fprintf(w, "event: message\ndata: %s\n\n", msg)
	return err
}
