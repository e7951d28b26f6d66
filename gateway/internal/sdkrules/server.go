package sdkrules

import (
	"encoding/json"
	"fmt"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// paramsOf names, for each method the gateway reads before the SDK, the
// SDK's type of its params.
var paramsOf = map[string]func() any{
	"initialize":                       func() any { return new(mcp.InitializeParams) },
	"notifications/initialized":        func() any { return new(mcp.InitializedParams) },
	"ping":                             func() any { return new(mcp.PingParams) },
	"tools/list":                       func() any { return new(mcp.ListToolsParams) },
	"tools/call":                       func() any { return new(mcp.CallToolParamsRaw) },
	"logging/setLevel":                 func() any { return new(mcp.SetLoggingLevelParams) },
	"completion/complete":              func() any { return new(mcp.CompleteParams) },
	"notifications/cancelled":          func() any { return new(mcp.CancelledParams) },
	"notifications/progress":           func() any { return new(mcp.ProgressNotificationParams) },
	"notifications/roots/list_changed": func() any { return new(mcp.RootsListChangedParams) },
}

// NewParams returns a new value of the SDK's type of method's params, for
// decoding into; nil for a method the gateway leaves to the SDK to read.
func NewParams(method string) any {
	if p, ok := paramsOf[method]; ok {
		return p()
	}
	return nil
}

// LatestMeta reports whether a request's _meta is one the SDK accepts for
// protocol 2026-07-28 without a word: that version, the client's
// capabilities as an object, and its name, if given, as an
// implementation's. Anything else the SDK judges.
func LatestMeta(meta map[string]any) bool {
	if v, _ := meta[mcp.MetaKeyProtocolVersion].(string); v != Protocol20260728 {
		return false
	}
	if _, ok := meta[mcp.MetaKeyClientCapabilities].(map[string]any); !ok {
		return false
	}
	if info, present := meta[mcp.MetaKeyClientInfo]; present {
		m, ok := info.(map[string]any)
		if !ok {
			return false
		}
		if name, ok := m["name"].(string); !ok || name == "" {
			return false
		}
		for k, v := range m {
			if _, ok := v.(string); !ok && k != "icons" {
				return false
			}
		}
	}
	return true
}

// UnknownTool is the SDK's answer to a call of a tool the server does not
// have.
func UnknownTool(name string) *jsonrpc.Error {
	return &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: fmt.Sprintf("unknown tool %q", name)}
}

// NonNullContent returns res with empty content in place of nil, unless
// it asks for input: the SDK's server never sends content null.
func NonNullContent(res *mcp.CallToolResult) *mcp.CallToolResult {
	if res == nil || res.Content != nil || res.InputRequests != nil {
		return res
	}
	res2 := *res
	res2.Content = []mcp.Content{}
	return &res2
}

// CompletesResults reports whether the SDK's server adds a resultType to
// the tools/call results it sends a client of protocol version: from
// 2026-07-28 on.
func CompletesResults(version string) bool { return version >= Protocol20260728 }

// Complete adds to the members of a tools/call result for a client of
// 2026-07-28 what the SDK's server adds: whether the call is complete or
// asks for input (resultType), and who answered (serverInfo in _meta),
// unless the result names someone already.
func Complete(fields map[string]json.RawMessage, server *mcp.Implementation) error {
	if _, asks := fields["inputRequests"]; asks {
		if content, has := fields["content"]; has && string(content) != "[]" && string(content) != "null" {
			return &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: "server bug: result has both content and inputRequests"}
		}
		fields["resultType"] = json.RawMessage(`"input_required"`)
	} else {
		fields["resultType"] = json.RawMessage(`"complete"`)
	}
	var meta map[string]json.RawMessage
	if raw, ok := fields["_meta"]; ok && string(raw) != "null" {
		if err := json.Unmarshal(raw, &meta); err != nil {
			return err
		}
	}
	if _, named := meta[mcp.MetaKeyServerInfo]; !named {
		if meta == nil {
			meta = map[string]json.RawMessage{}
		}
		var err error
		if meta[mcp.MetaKeyServerInfo], err = json.Marshal(server); err != nil {
			return err
		}
		if fields["_meta"], err = json.Marshal(meta); err != nil {
			return err
		}
	}
	return nil
}

// Earlier undoes Complete for a client of a protocol before 2026-07-28
// whose call went over a link of 2026-07-28: a complete result loses its
// resultType and the serverInfo the upstream's SDK put in _meta, which
// that client's SDK would never have been sent; every other member keeps
// its bytes. A result that is not complete (it asks for input) is returned
// as it is, with ok false: it is not the client's to be given as written.
func Earlier(raw json.RawMessage) (out json.RawMessage, ok bool) {
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(raw, &fields); err != nil {
		return raw, false
	}
	if rt, has := fields["resultType"]; has && string(rt) != `"complete"` {
		return raw, false
	}
	delete(fields, "resultType")
	if m, has := fields["_meta"]; has && string(m) != "null" {
		var meta map[string]json.RawMessage
		if err := json.Unmarshal(m, &meta); err != nil {
			return raw, false
		}
		delete(meta, mcp.MetaKeyServerInfo)
		if len(meta) == 0 {
			delete(fields, "_meta")
		} else {
			b, err := json.Marshal(meta)
			if err != nil {
				return raw, false
			}
			fields["_meta"] = b
		}
	}
	b, err := json.Marshal(fields)
	if err != nil {
		return raw, false
	}
	return b, true
}
