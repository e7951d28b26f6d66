package gateway

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/interlock-mcp/interlock"
	"github.com/interlock-mcp/interlock/refusal"
)

// restCall is the body of POST /v1/tools/{name}/call.
type restCall struct {
	// Arguments are the tool's arguments.
	Arguments json.RawMessage `json:"arguments"`
	// Confirm is the agent's __confirm (mode flag).
	Confirm *bool `json:"confirm,omitempty"`
	// ConfirmToken is the __confirm_token of the handshake (mode token).
	ConfirmToken string `json:"confirm_token,omitempty"`
}

// writeJSON writes an answer of the REST face. None may be kept by a
// cache on the way: results, previews and approvals hold arguments.
func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// writeError answers err in the words and status of its code
// ([refusal.Of]); an error that is not the caller's to fix is
// INTERNAL_ERROR, without its text.
func writeError(w http.ResponseWriter, err error) {
	if e := refusal.Of(err); e != nil {
		err = e
	}
	body := interlock.BodyOf(err)
	writeJSON(w, refusal.Status(body.Code), body)
}

// restHandler serves the REST face for callers that do not speak MCP:
// POST /v1/tools/{name}/call runs one call through the gate, and
// GET /v1/tools lists the tools as MCP clients see them.
//
// A web page the user visits must not be able to drive a gateway on their
// machine: calls must be JSON (which a cross-origin page cannot send
// without a preflight this face never grants), cross-origin requests are
// refused, and without API keys the Host must be a loopback name, which
// defeats DNS rebinding.
func (g *Gateway) restHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/tools", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, map[string]any{"tools": g.visibleTools(g.gate.Identify(r.Context(), restRequest(r)).Tenant)})
	})
	mux.HandleFunc("POST /v1/tools/{name}/call", g.restCall)
	g.routeApprovals(mux)
	// A REST request is in flight as an MCP tool call is: refused once the
	// gateway drains, and waited for while it runs, so a call or a vote
	// never meets upstreams or stores that are closing.
	counted := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !g.inFlight.enter() {
			writeError(w, errDraining)
			return
		}
		defer g.inFlight.leave()
		mux.ServeHTTP(w, r)
	})
	guarded := crossOriginRefused(counted, func(w http.ResponseWriter) {
		writeError(w, &interlock.Error{Code: interlock.CodePermissionDenied, Message: crossOriginMessage, Hint: crossOriginHint})
	})
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !g.config().Auth.Configured() && !loopbackHost(r.Host) {
			writeError(w, &interlock.Error{Code: interlock.CodePermissionDenied,
				Message: fmt.Sprintf("Host %q is not a loopback name; without API keys this gateway answers only loopback names.", r.Host),
				Hint:    "Call http://127.0.0.1:<port>/ or http://localhost:<port>/, or ask the operator to configure API keys."})
			return
		}
		guarded.ServeHTTP(w, r)
	})
}

const (
	crossOriginMessage = "Cross-origin requests to the gateway are refused."
	crossOriginHint    = "Call the gateway from a server, an MCP client or a command-line client, not from a web page."
)

// crossOriginRefused passes on only requests that are not cross-origin
// browser requests (net/http's CrossOriginProtection: Sec-Fetch-Site, or
// Origin against Host); refuse answers the others.
func crossOriginRefused(next http.Handler, refuse func(http.ResponseWriter)) http.Handler {
	cop := http.NewCrossOriginProtection()
	cop.SetDenyHandler(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { refuse(w) }))
	return cop.Handler(next)
}

// loopbackHost reports whether a Host header names this machine.
func loopbackHost(host string) bool {
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	host = strings.Trim(host, "[]")
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

func (g *Gateway) restCall(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	tool, run, ok := g.gate.Tool(name)
	if !ok {
		writeError(w, interlock.Errorf(interlock.CodeNotFound, "List the tools with GET /v1/tools and call one of them.", "No tool named %q.", name))
		return
	}
	if !jsonContent(r) {
		writeError(w, &interlock.Error{Code: interlock.CodeValidationFailed,
			Message: "The request body must be JSON.",
			Hint:    "Send the body with Content-Type: application/json."})
		return
	}
	// The envelope is checked whole before it is decoded: a duplicate
	// "confirm" or "arguments" must not be settled by whichever reader
	// keeps the last one.
	data, err := readBody(w, r, int64(g.config().Policy.MaxArgumentBytes)+64<<10)
	if err != nil {
		writeError(w, err)
		return
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var call restCall
	if err := dec.Decode(&call); err != nil {
		writeError(w, &interlock.Error{Code: interlock.CodeValidationFailed, Err: err,
			Message: "The request body is not a JSON object of the form {\"arguments\": {…}, \"confirm\": true, \"confirm_token\": \"…\"}.",
			Hint:    `Send {"arguments": {…}} with the tool's arguments, plus "confirm_token" or "confirm" when asked to.`})
		return
	}
	raw, err := withMeta(call)
	if err != nil {
		writeError(w, err)
		return
	}
	res := g.gate.Call(r.Context(), tool, g.gate.Identify(r.Context(), restRequest(r)), raw, run)
	if !res.IsError {
		writeJSON(w, http.StatusOK, res)
		return
	}
	body, ours := interlock.GateBody(res)
	if !ours {
		// The tool's own error result: its verdict on the call (NOT_FOUND,
		// …) keeps the status of its code; any other is the tool's
		// failure, as it wrote it.
		body = interlock.BodyOfResult(res)
		if !body.Code.Verdict() {
			writeJSON(w, refusal.Status(""), res)
			return
		}
	}
	writeJSON(w, refusal.Status(body.Code), body)
}

// restRequest is a REST request as the gate identifies its caller: by the
// API key it carried.
func restRequest(r *http.Request) *mcp.CallToolRequest {
	return &mcp.CallToolRequest{Extra: &mcp.RequestExtra{TokenInfo: auth.TokenInfoFromContext(r.Context()), Header: r.Header}}
}

// withMeta folds the REST body's confirm and confirm_token into the
// arguments as the meta-arguments the gate reads.
func withMeta(call restCall) (json.RawMessage, error) {
	args := bytes.TrimSpace(call.Arguments)
	if call.Confirm == nil && call.ConfirmToken == "" {
		return args, nil
	}
	var fields map[string]json.RawMessage
	if len(args) > 0 && !bytes.Equal(args, []byte("null")) {
		if err := json.Unmarshal(args, &fields); err != nil {
			return nil, &interlock.Error{Code: interlock.CodeValidationFailed, Err: err,
				Message: "arguments must be a JSON object.", Hint: `Send "arguments" as an object of named values.`}
		}
	}
	if fields == nil {
		fields = map[string]json.RawMessage{}
	}
	if call.Confirm != nil {
		fields[interlock.MetaConfirm], _ = json.Marshal(*call.Confirm)
	}
	if call.ConfirmToken != "" {
		fields[interlock.MetaConfirmToken], _ = json.Marshal(call.ConfirmToken)
	}
	return json.Marshal(fields)
}
