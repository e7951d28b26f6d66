package gateway

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/interlock-mcp/interlock"
	"github.com/interlock-mcp/interlock/gateway/internal/sdkrules"
)

// writeRPCError answers an MCP request over HTTP with a JSON-RPC error. id
// is null when the request could not be read far enough to know it.
func writeRPCError(w http.ResponseWriter, status int, id json.RawMessage, code int64, message string) {
	if len(id) == 0 {
		id = json.RawMessage("null")
	}
	b, _ := responseBytes(id, nil, &jsonrpc.Error{Code: code, Message: message})
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(append(b, '\n'))
}

// responseBytes is the JSON-RPC response to the request whose id the
// client wrote as id: result, or rpcErr when it is set. The id is written
// back as the client wrote it, which go-sdk's jsonrpc.EncodeMessage, made
// for ids it parsed, would not promise.
func responseBytes(id json.RawMessage, result any, rpcErr *jsonrpc.Error) ([]byte, error) {
	if rpcErr != nil {
		result = nil
	}
	return json.Marshal(struct {
		JSONRPC string          `json:"jsonrpc"`
		ID      json.RawMessage `json:"id"`
		Result  any             `json:"result,omitempty"`
		Error   *jsonrpc.Error  `json:"error,omitempty"`
	}{"2.0", id, result, rpcErr})
}

// readBody reads a request body of at most limit bytes, and checks that it
// is JSON every reader decodes the same way: no duplicate keys, no invalid
// UTF-8 or lone surrogates. What the gate decides on and what the SDK or
// an upstream reads must never differ.
func readBody(w http.ResponseWriter, r *http.Request, limit int64) ([]byte, error) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, limit))
	if err != nil {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			return nil, &interlock.Error{Code: interlock.CodeValidationFailed, Err: err,
				Message: fmt.Sprintf("The request body is larger than %d bytes.", tooLarge.Limit),
				Hint:    "Send smaller arguments."}
		}
		return nil, &interlock.Error{Code: interlock.CodeValidationFailed, Err: err,
			Message: "The request body could not be read in full.",
			Hint:    "Send the whole body at once, promptly."}
	}
	if err := interlock.CheckJSON(body); err != nil {
		return nil, err
	}
	return body, nil
}

// rpcMessage is the part of a JSON-RPC message the gateway reads.
type rpcMessage struct {
	ID     json.RawMessage `json:"id"`
	Method string          `json:"method"`
	Params json.RawMessage `json:"params"`
	// Result and Error are those of a client's response to a question.
	Result json.RawMessage `json:"result"`
	Error  json.RawMessage `json:"error"`
	// decoded is Params as checkMessages read them, when it did.
	decoded any
}

// protocolVersion is the protocol version the message names in its
// params' _meta, as clients of 2026-07-28 and later do on every request;
// "" when it names none.
func (m rpcMessage) protocolVersion() string {
	var p struct {
		Meta map[string]json.RawMessage `json:"_meta"`
	}
	if json.Unmarshal(m.Params, &p) != nil {
		return ""
	}
	var v string
	_ = json.Unmarshal(p.Meta[mcp.MetaKeyProtocolVersion], &v)
	return v
}

// requestMessages returns the messages of a POST to /mcp, read once by
// mcpEnvelope; nil for other requests.
func requestMessages(r *http.Request) []rpcMessage {
	return stateOf(r.Context()).messages
}

// checkMessages reads an MCP body (one message or a batch) far enough to
// refuse params of the wrong shape. It returns the messages, or the id of
// the message at fault and the message for the client. It decodes params
// into the SDK's types first, so a client that sends params of the wrong
// shape gets the gateway's message, not the SDK's, which names Go types.
func checkMessages(body []byte) ([]rpcMessage, json.RawMessage, string) {
	msgs := rpcMessages(body)
	if msgs == nil {
		return nil, nil, "The body is not a JSON-RPC message or a batch of them."
	}
	for i, m := range msgs {
		if len(m.Params) == 0 || bytes.Equal(m.Params, []byte("null")) {
			continue
		}
		p := sdkrules.NewParams(m.Method)
		if p == nil {
			continue
		}
		if json.Unmarshal(m.Params, p) != nil {
			return nil, m.ID, fmt.Sprintf("The params of %s do not have the form the method takes; see the MCP specification.", m.Method)
		}
		msgs[i].decoded = p
	}
	return msgs, nil, ""
}

// rpcMessages reads an MCP body, one message or a batch; nil when it is
// neither.
func rpcMessages(body []byte) []rpcMessage {
	trimmed := bytes.TrimSpace(body)
	if len(trimmed) > 0 && trimmed[0] == '[' {
		var msgs []rpcMessage
		if json.Unmarshal(trimmed, &msgs) != nil || msgs == nil {
			return nil
		}
		return msgs
	}
	var m rpcMessage
	if json.Unmarshal(trimmed, &m) != nil {
		return nil
	}
	return []rpcMessage{m}
}

// mcpEnvelope reads each POST to /mcp in full, within the server's read
// timeout, and refuses ambiguous JSON and params of the wrong shape before
// the SDK sees them. Once the request is read it lifts the connection's
// read and write deadlines: the response is an event stream that lasts as
// long as the call (a form may wait for a human for minutes) or, for GET,
// the session. Idle sessions expire and the connection limit bounds them.
func mcpEnvelope(limit int64, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost {
			body, err := readBody(w, r, limit)
			if err != nil {
				status := http.StatusBadRequest
				if _, ok := errors.AsType[*http.MaxBytesError](err); ok {
					status = http.StatusRequestEntityTooLarge
				}
				writeRPCError(w, status, nil, jsonrpc.CodeParseError, interlock.BodyOf(err).Message)
				return
			}
			msgs, id, msg := checkMessages(body)
			if msgs == nil {
				code := int64(jsonrpc.CodeInvalidParams)
				if id == nil {
					code = jsonrpc.CodeInvalidRequest
				}
				writeRPCError(w, http.StatusBadRequest, id, code, msg)
				return
			}
			if m := msgs[0]; len(msgs) == 1 && m.Method == "tools/call" && len(m.ID) > 0 && asksTask(m.Params) &&
				(r.Header.Get(sessionIDHeader) == "" || r.Header.Get(protocolVersionHeader) != protocolTasks) {
				// Refused before the SDK, which has no tasks and would run
				// it as a plain call. A session of 2025-11-25 may ask for a
				// task of the lane, which refuses what it does not take.
				writeRPCError(w, http.StatusOK, m.ID, errTaskCall.Code, errTaskCall.Message)
				return
			}
			r = r.WithContext(withState(r.Context(), func(s *requestState) { s.messages = msgs }))
			r.Body = io.NopCloser(bytes.NewReader(body))
			r.ContentLength = int64(len(body))
		}
		rc := http.NewResponseController(w)
		_ = rc.SetReadDeadline(time.Time{})
		_ = rc.SetWriteDeadline(time.Time{})
		next.ServeHTTP(w, r)
	})
}
