package gateway

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/interlock-mcp/interlock/gateway/internal/sdkrules"
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
	if h := u.httpSideOf(cs); h != nil {
		return h
	}
	return noRawLink{}
}

// httpSideOf is the raw side of cs when it is a link to an HTTP upstream,
// nil otherwise.
func (u *upstream) httpSideOf(cs *mcp.ClientSession) *httpSession {
	if u.cfg.URL == "" {
		return nil
	}
	return u.httpLinkOf(cs)
}

// httpLinkOf is the raw side of cs, a link to an HTTP upstream.
func (u *upstream) httpLinkOf(cs *mcp.ClientSession) *httpSession {
	h := &httpSession{u: u, cs: cs, peer: u.peerOf(cs), id: cs.ID(), caller: u.sideOf(cs).caller}
	if ir := cs.InitializeResult(); ir != nil {
		h.protocol = ir.ProtocolVersion
	}
	return h
}

// noRawLink is the raw side of a link that has none: a child's link the
// gateway did not wrap, which dial never makes.
type noRawLink struct{}

func (noRawLink) request(context.Context, string, json.RawMessage) (json.RawMessage, error) {
	return nil, errors.New("the link has no raw side")
}

// peerOf is the client session that link cs serves alone; nil for a
// shared link.
func (u *upstream) peerOf(cs *mcp.ClientSession) *mcp.ServerSession {
	if !u.cfg.PerClient {
		// Every link is shared: no call looks through the links.
		return nil
	}
	u.linksMu.Lock()
	defer u.linksMu.Unlock()
	for ss, pl := range u.links {
		pl.mu.Lock()
		own := pl.cs == cs
		pl.mu.Unlock()
		if own {
			return ss
		}
	}
	return nil
}

// httpSession is a link to an HTTP upstream as the gateway's own requests
// use it: each is a POST on the session the SDK's client opened (none
// from 2026-07-28 on), with the headers and, from 2026-07-28 on, the
// _meta the SDK's client sends. The answer is read from a JSON body or
// from the event stream the upstream opens for the request. What else
// the upstream sends on that stream goes where the SDK's client would
// hand it: a question (a form, sampling, roots) to the client whose
// request it is, its answer posted back; progress and log messages to
// their owners (link.go decides both); a changed list to the gateway's
// mirror.
type httpSession struct {
	u    *upstream
	cs   *mcp.ClientSession
	peer *mcp.ServerSession // the client session the link serves alone, if any
	// id and protocol are the session's id and protocol version, as the
	// SDK's client names them in its headers.
	id, protocol string
	caller       *clientMeta // what the link's requests say of its client
}

// latest reports whether the link speaks 2026-07-28.
func (h *httpSession) latest() bool { return h.protocol >= protocolNew }

// ready reports whether the link can carry the gateway's own call of the
// upstream's tool: on a link of 2026-07-28, once the SDK's client has said
// who the client is (see clientMeta), and for a tool none of whose
// arguments the SDK's client would send in headers as well (see
// upstream.headed), which the gateway leaves to it.
func (h *httpSession) ready(tool string) bool {
	return !h.latest() || (h.caller != nil && h.caller.known() && !h.u.headed(tool))
}

// call makes a tools/call with params on the link, and returns the
// upstream's result as it wrote it, or its JSON-RPC error.
func (h *httpSession) call(ctx context.Context, params *mcp.CallToolParams) (json.RawMessage, error) {
	if h.latest() {
		h.caller.sign(params)
	}
	body, err := callBody(params, nil)
	if err != nil {
		return nil, err
	}
	return h.send(ctx, "tools/call", params.Name, body)
}

func (h *httpSession) request(ctx context.Context, method string, params json.RawMessage) (json.RawMessage, error) {
	return h.send(ctx, method, "", params)
}

// send makes the request method with params on the link; name is what
// its Mcp-Name header says on a link of 2026-07-28 (a tool's name).
func (h *httpSession) send(ctx context.Context, method, name string, params json.RawMessage) (json.RawMessage, error) {
	id, _ := jsonrpc.MakeID("interlock-" + strconv.FormatUint(callSeq.Add(1), 10))
	body, err := jsonrpc.EncodeMessage(&jsonrpc.Request{ID: id, Method: method, Params: params})
	if err != nil {
		return nil, err
	}
	resp, err := h.post(ctx, method, name, body)
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, err
	}
	if mediaType(resp.Header.Get("Content-Type")) != "text/event-stream" {
		defer resp.Body.Close()
		b, err := io.ReadAll(io.LimitReader(resp.Body, maxUpstreamMessage))
		if err != nil {
			return nil, fmt.Errorf("%w: reading the answer to %s: %v", mcp.ErrConnectionClosed, method, err)
		}
		return answerTo(id, b)
	}
	events := bufio.NewScanner(resp.Body)
	events.Buffer(nil, maxUpstreamMessage)
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
			drain(resp.Body)
			return res, err
		}
	}
	resp.Body.Close()
	if ctx.Err() != nil {
		h.cancel(ctx, id)
		return nil, ctx.Err()
	}
	return nil, fmt.Errorf("%w: the stream of %s ended without its answer", mcp.ErrConnectionClosed, method)
}

// drain reads what is left of a request's event stream after its answer,
// and closes it: a connection whose body was read to its end goes back to
// the pool, where one closed unread is closed, and the next request would
// open another. The upstream ends the stream right after the answer (the
// end is most often read with it); a stream still open after
// maxDrainWait is closed, its connection with it. Draining off the
// caller's way would not do: the caller's next request would find the
// connection still busy, and open another.
func drain(body io.ReadCloser) {
	stop := time.AfterFunc(maxDrainWait, func() { body.Close() })
	_, _ = io.Copy(io.Discard, io.LimitReader(body, maxUpstreamMessage))
	stop.Stop()
	body.Close()
}

// maxDrainWait bounds how long drain waits for a stream to end.
const maxDrainWait = 10 * time.Millisecond

// cancel tells the upstream that the request id was cancelled, as the
// SDK's client does: best effort, and off the caller's way.
func (h *httpSession) cancel(ctx context.Context, id jsonrpc.ID) {
	go func() {
		nctx, stop := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
		defer stop()
		params, _ := json.Marshal(&mcp.CancelledParams{RequestID: id.Raw(), Reason: ctx.Err().Error()})
		note, err := jsonrpc.EncodeMessage(&jsonrpc.Request{Method: "notifications/cancelled", Params: params})
		if err != nil {
			return
		}
		if resp, err := h.post(nctx, "notifications/cancelled", "", note); err == nil {
			drain(resp.Body)
		}
	}()
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
		} else {
			h.notified(ctx, m)
		}
	}
	return nil, false, nil
}

// notified hands on a notification the upstream sent on a request's
// stream, as the SDK's client would.
func (h *httpSession) notified(ctx context.Context, n *jsonrpc.Request) {
	u := h.u
	switch n.Method {
	case "notifications/progress":
		var p mcp.ProgressNotificationParams
		if json.Unmarshal(n.Params, &p) == nil {
			u.relayProgress(ctx, &mcp.ProgressNotificationClientRequest{Session: h.cs, Params: &p})
		}
	case "notifications/message":
		var p mcp.LoggingMessageParams
		if json.Unmarshal(n.Params, &p) == nil {
			u.relayLog(ctx, h.peer, &mcp.LoggingMessageRequest{Session: h.cs, Params: &p})
		}
	case "notifications/tools/list_changed":
		u.toolsChanged(h.cs)
	case "notifications/prompts/list_changed":
		if h.peer == nil {
			u.hooks.promptsChanged()
		}
	case "notifications/resources/list_changed":
		if h.peer == nil {
			u.hooks.resourcesChanged()
		}
	case "notifications/resources/updated":
		var p mcp.ResourceUpdatedNotificationParams
		if h.peer == nil && json.Unmarshal(n.Params, &p) == nil {
			u.hooks.resourceUpdated(&p)
		}
	}
}

// answer answers a request the upstream sent on a request's stream.
func (h *httpSession) answer(ctx context.Context, q *jsonrpc.Request) {
	result, err := h.asked(ctx, q)
	var rpcErr *jsonrpc.Error
	if err != nil {
		var ok bool
		if rpcErr, ok = errors.AsType[*jsonrpc.Error](err); !ok {
			rpcErr = &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: "the question could not be carried to the client"}
		}
	}
	// An error answer has no result member at all: a reader may take one
	// with both for no answer.
	var raw json.RawMessage
	if rpcErr == nil {
		if raw, err = json.Marshal(result); err != nil {
			return
		}
	}
	reply, err := jsonrpc.EncodeMessage(&jsonrpc.Response{ID: q.ID, Result: raw, Error: rpcErr})
	if err != nil {
		return
	}
	if resp, err := h.post(ctx, "", "", reply); err == nil {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<10))
		resp.Body.Close()
	}
}

// asked answers q, a question of the upstream, by the handler the SDK's
// client would have called.
func (h *httpSession) asked(ctx context.Context, q *jsonrpc.Request) (any, error) {
	invalid := &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: "the params of " + q.Method + " are not of its form"}
	switch q.Method {
	case "ping":
		return struct{}{}, nil
	case "elicitation/create":
		var p mcp.ElicitParams
		if json.Unmarshal(q.Params, &p) != nil {
			return nil, invalid
		}
		return h.u.elicit(ctx, &mcp.ElicitRequest{Session: h.cs, Params: &p})
	case "roots/list":
		var p mcp.ListRootsParams
		if len(q.Params) > 0 && json.Unmarshal(q.Params, &p) != nil {
			return nil, invalid
		}
		return h.u.roots(ctx, h.peer, &mcp.ListRootsRequest{Session: h.cs, Params: &p})
	case "sampling/createMessage":
		if caps := h.peerCapabilities(); h.peer == nil || (caps != nil && caps.Sampling != nil) {
			var p mcp.CreateMessageWithToolsParams
			if json.Unmarshal(q.Params, &p) != nil {
				return nil, invalid
			}
			return h.u.sample(ctx, &mcp.CreateMessageWithToolsRequest{Session: h.cs, Params: &p})
		}
	}
	return nil, &jsonrpc.Error{Code: jsonrpc.CodeMethodNotFound, Message: "method not found: " + q.Method}
}

// peerCapabilities are the capabilities of the client the link serves
// alone; nil for a shared link.
func (h *httpSession) peerCapabilities() *mcp.ClientCapabilities {
	if h.peer == nil {
		return nil
	}
	if ip := h.peer.InitializeParams(); ip != nil {
		return ip.Capabilities
	}
	return nil
}

// post sends body, a request of method (or an answer, with none) on the
// session, as the SDK's client would; name is its Mcp-Name.
func (h *httpSession) post(ctx context.Context, method, name string, body []byte) (*http.Response, error) {
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
	if h.latest() && method != "" {
		req.Header.Set(sdkrules.MethodHeader, method)
		if name != "" {
			req.Header.Set(sdkrules.NameHeader, name)
		}
	}
	resp, err := h.u.httpClient().Do(req)
	if err != nil {
		// Not an answer: the upstream was not reached (see failure).
		return nil, err
	}
	if resp.StatusCode != http.StatusOK && resp.StatusCode != http.StatusAccepted {
		defer resp.Body.Close()
		return nil, h.refusal(resp)
	}
	return resp, nil
}

// refusal is the error of a request the upstream answered with an HTTP
// status other than 200 or 202 (a refused call reaches post as its
// JSON-RPC error: see refusalTrip). A session the upstream no longer knows
// (404) loses the link.
func (h *httpSession) refusal(resp *http.Response) error {
	if resp.StatusCode == http.StatusNotFound && h.id != "" {
		return fmt.Errorf("%w: the upstream no longer knows the session (HTTP 404)", mcp.ErrConnectionClosed)
	}
	b, _ := io.ReadAll(io.LimitReader(resp.Body, maxRefusalBody))
	if m, err := jsonrpc.DecodeMessage(b); err == nil {
		if r, ok := m.(*jsonrpc.Response); ok && r.Error != nil {
			return r.Error
		}
	}
	return fmt.Errorf("the upstream answered HTTP %d", resp.StatusCode)
}

// maxRefusalBody bounds what of a refusal's body the gateway reads.
const maxRefusalBody = 4 << 10

// codeRefused is the JSON-RPC error code of a call an HTTP upstream
// refused by its HTTP status (see refusalTrip); the status is its data.
const codeRefused = -32090

// refusalTrip turns an HTTP upstream's refusal of one call by its HTTP
// status (413 for a body over its limit, 503 for a moment's overload),
// with no JSON-RPC error in the body, into that call's JSON-RPC error:
// the SDK's client would otherwise break the link for it, and the gateway
// drop it, failing every other caller's call in flight on it. What
// concerns the link rather than the call is left as it was answered: a
// session the upstream no longer knows (404 on a session), credentials it
// does not take (401, 403), and the requests that open a link.
type refusalTrip struct{ next http.RoundTripper }

func (t refusalTrip) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := t.next.RoundTrip(r)
	// A redirect is the client's to follow (see httpClient).
	if err != nil || resp.StatusCode < 400 || r.Method != http.MethodPost || r.GetBody == nil ||
		resp.StatusCode == http.StatusUnauthorized || resp.StatusCode == http.StatusForbidden ||
		(resp.StatusCode == http.StatusNotFound && r.Header.Get(sessionIDHeader) != "") {
		return resp, err
	}
	body, _ := io.ReadAll(io.LimitReader(resp.Body, maxRefusalBody))
	resp.Body.Close()
	resp.Body = io.NopCloser(bytes.NewReader(body))
	if m, err := jsonrpc.DecodeMessage(body); err == nil {
		if a, ok := m.(*jsonrpc.Response); ok && a.Error != nil {
			return resp, nil // the upstream's own answer
		}
	}
	q := refusedCall(r)
	if q == nil {
		return resp, nil
	}
	data, _ := json.Marshal(map[string]int{"status": resp.StatusCode})
	msg, err := jsonrpc.EncodeMessage(&jsonrpc.Response{ID: q.ID, Error: &jsonrpc.Error{Code: codeRefused,
		Message: fmt.Sprintf("HTTP %d: %s", resp.StatusCode, strings.TrimSpace(string(body))), Data: data}})
	if err != nil {
		return resp, nil
	}
	return &http.Response{Status: "200 OK", StatusCode: http.StatusOK, Proto: resp.Proto, ProtoMajor: resp.ProtoMajor, ProtoMinor: resp.ProtoMinor,
		Header: http.Header{"Content-Type": {"application/json"}}, Body: io.NopCloser(bytes.NewReader(msg)),
		ContentLength: int64(len(msg)), Request: r}, nil
}

// refusedCall is the call r carries, unless it opens a link; nil when r
// carries no call.
func refusedCall(r *http.Request) *jsonrpc.Request {
	copied, err := r.GetBody()
	if err != nil {
		return nil
	}
	b, err := io.ReadAll(io.LimitReader(copied, maxUpstreamMessage))
	_ = copied.Close()
	if err != nil {
		return nil
	}
	m, err := jsonrpc.DecodeMessage(b)
	q, ok := m.(*jsonrpc.Request)
	if err != nil || !ok || !q.IsCall() || q.Method == "initialize" || q.Method == "server/discover" {
		return nil
	}
	return q
}

// refusedStatus is the HTTP status by which the upstream refused a call,
// when e says it did.
func refusedStatus(e *jsonrpc.Error) (int, bool) {
	var d struct{ Status int }
	if e.Code != codeRefused || json.Unmarshal(e.Data, &d) != nil || d.Status == 0 {
		return 0, false
	}
	return d.Status, true
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

// callerTrip reads what the requests of a link of 2026-07-28 say of the
// link's client (see clientMeta), from the first the SDK's client sends
// that is not a call of a tool: only those carry the Mcp-Method header,
// so a link of an earlier protocol is never read.
type callerTrip struct {
	next   http.RoundTripper
	caller *clientMeta
}

func (t callerTrip) RoundTrip(r *http.Request) (*http.Response, error) {
	if m := r.Header.Get(sdkrules.MethodHeader); m != "" && m != "tools/call" && !t.caller.known() && r.GetBody != nil {
		if copied, err := r.GetBody(); err == nil {
			body, err := io.ReadAll(io.LimitReader(copied, maxListBody))
			_ = copied.Close()
			if msg, derr := jsonrpc.DecodeMessage(body); err == nil && derr == nil {
				if q, ok := msg.(*jsonrpc.Request); ok {
					t.caller.learn(q.Method, q.Params)
				}
			}
		}
	}
	return t.next.RoundTrip(r)
}
