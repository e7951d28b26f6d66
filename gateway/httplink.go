package gateway

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// rawLink sends the gateway's own requests on an upstream's link and
// hands back the upstream's answers as the upstream wrote them: the
// result, or its JSON-RPC error as a *jsonrpc.Error. It does not open,
// restart or choose links (upstream.go and link.go do), and it does not
// decide who a message belongs to (flights.go does).
type rawLink interface {
	request(ctx context.Context, method string, params json.RawMessage) (json.RawMessage, error)
}

// rawLinkOf is the raw link of cs: the child's connection it wraps, or the
// HTTP session it holds.
func (u *upstream) rawLinkOf(cs *mcp.ClientSession) rawLink {
	if wire := u.wireOf(cs); wire != nil {
		return wire
	}
	if u.cfg.URL == "" {
		return nil
	}
	h := &httpSession{u: u, cs: cs, id: cs.ID()}
	if ir := cs.InitializeResult(); ir != nil {
		h.protocol = ir.ProtocolVersion
	}
	return h
}

// httpSession is a link to an HTTP upstream, as the gateway's own
// requests use it: each is a POST on the session the SDK's client opened,
// with the headers the SDK's client sends. The answer is read from a JSON
// body or from the event stream the upstream opens for the request; a
// form the upstream asks for on that stream goes to the client whose
// request it is (upstream.elicit), and its answer is posted back. Other
// requests of the upstream on the stream are answered with an error, and
// its notifications are not passed on.
type httpSession struct {
	u  *upstream
	cs *mcp.ClientSession
	// id and protocol are the session's id and protocol version, as the
	// SDK's client names them in its headers.
	id, protocol string
}

func (h *httpSession) request(ctx context.Context, method string, params json.RawMessage) (json.RawMessage, error) {
	id, _ := jsonrpc.MakeID("interlock-" + strconv.FormatUint(callSeq.Add(1), 10))
	body, err := jsonrpc.EncodeMessage(&jsonrpc.Request{ID: id, Method: method, Params: params})
	if err != nil {
		return nil, err
	}
	resp, err := h.post(ctx, body)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if mediaType(resp.Header.Get("Content-Type")) != "text/event-stream" {
		b, err := io.ReadAll(io.LimitReader(resp.Body, maxUpstreamMessage))
		if err != nil {
			return nil, fmt.Errorf("%w: reading the answer to %s: %v", mcp.ErrConnectionClosed, method, err)
		}
		return answerTo(id, b)
	}
	events := bufio.NewScanner(resp.Body)
	events.Buffer(make([]byte, 0, 64<<10), maxUpstreamMessage)
	var data bytes.Buffer
	for events.Scan() {
		line := events.Text()
		if rest, ok := strings.CutPrefix(line, "data:"); ok {
			data.WriteString(strings.TrimPrefix(rest, " "))
			continue
		}
		if line != "" || data.Len() == 0 {
			continue
		}
		msg := bytes.Clone(data.Bytes())
		data.Reset()
		if res, done, err := h.handle(ctx, id, msg); done {
			return res, err
		}
	}
	return nil, fmt.Errorf("%w: the stream of %s ended without its answer", mcp.ErrConnectionClosed, method)
}

// maxUpstreamMessage bounds one message an HTTP upstream sends the
// gateway's own requests.
const maxUpstreamMessage = 16 << 20

// handle reads msg, one message on the stream of the request id: the
// answer ends the request (done); a request of the upstream is answered.
func (h *httpSession) handle(ctx context.Context, id jsonrpc.ID, msg []byte) (json.RawMessage, bool, error) {
	m, err := jsonrpc.DecodeMessage(msg)
	if err != nil {
		return nil, false, nil
	}
	switch m := m.(type) {
	case *jsonrpc.Response:
		if m.ID != id {
			return nil, false, nil
		}
		if m.Error != nil {
			return nil, true, m.Error
		}
		return m.Result, true, nil
	case *jsonrpc.Request:
		if m.IsCall() {
			h.answer(ctx, m)
		}
	}
	return nil, false, nil
}

// answer answers a request the upstream sent on a request's stream.
func (h *httpSession) answer(ctx context.Context, q *jsonrpc.Request) {
	var result any
	var rpcErr *jsonrpc.Error
	var params mcp.ElicitParams
	switch {
	case q.Method != "elicitation/create":
		rpcErr = &jsonrpc.Error{Code: jsonrpc.CodeMethodNotFound, Message: "interlock does not carry " + q.Method + " here"}
	case json.Unmarshal(q.Params, &params) != nil:
		rpcErr = &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: "the params of elicitation/create are not an elicitation"}
	default:
		res, err := h.u.elicit(ctx, &mcp.ElicitRequest{Session: h.cs, Params: &params})
		if err != nil {
			rpcErr = &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: "the question could not be carried to the client"}
		} else {
			result = res
		}
	}
	raw, err := json.Marshal(result)
	if err != nil {
		return
	}
	reply, err := jsonrpc.EncodeMessage(&jsonrpc.Response{ID: q.ID, Result: raw, Error: rpcErr})
	if err != nil {
		return
	}
	if resp, err := h.post(ctx, reply); err == nil {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<10))
		resp.Body.Close()
	}
}

// post sends body on the session, as the SDK's client would.
func (h *httpSession) post(ctx context.Context, body []byte) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, h.u.cfg.URL, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	if h.id != "" {
		req.Header.Set(sessionIDHeader, h.id)
	}
	if h.protocol != "" {
		req.Header.Set(protocolVersionHeader, h.protocol)
	}
	resp, err := h.u.httpClient().Do(req)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", mcp.ErrConnectionClosed, err)
	}
	if resp.StatusCode != http.StatusOK && resp.StatusCode != http.StatusAccepted {
		resp.Body.Close()
		return nil, fmt.Errorf("the upstream answered HTTP %d", resp.StatusCode)
	}
	return resp, nil
}

// answerTo reads b, a JSON body, as the answer to the request id.
func answerTo(id jsonrpc.ID, b []byte) (json.RawMessage, error) {
	m, err := jsonrpc.DecodeMessage(b)
	if err != nil {
		return nil, fmt.Errorf("the upstream's answer is not a JSON-RPC message: %w", err)
	}
	r, ok := m.(*jsonrpc.Response)
	if !ok || r.ID != id {
		return nil, fmt.Errorf("the upstream's answer is not the answer to the request")
	}
	if r.Error != nil {
		return nil, r.Error
	}
	return r.Result, nil
}
