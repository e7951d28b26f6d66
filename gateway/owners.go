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

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// One link to an upstream serves every client session (unless per_client),
// so whatever the upstream sends in the middle of a request (a log line,
// progress, a question) must be tied to the client request that caused it,
// and reach that client alone. Every request the gateway sends on a link
// is a flight, entered in the upstream's table (flights.go) before it is
// sent and removed when it is answered; this file sends them (forward) and
// marks what an HTTP upstream says on a POST's stream (ownerTrip). The
// gateway's own requests (listing tools to mirror them, a preview for the
// gate) are flights without a client, so that nothing the upstream says
// during them is given to a client either.
//
// What the upstream sends reaches a client by these rules (see ownerOf):
//
//   - progress by its token, which interlock gave the upstream for one
//     request (trackProgress);
//   - on a streamable-HTTP upstream, a request or notification that came on
//     a POST's response stream belongs to that POST's flight, which the
//     link's HTTP client marks in the message as it reads it (ownerTrip);
//   - on a stdio upstream, which says nothing of which request a message
//     belongs to, and for one that came on an HTTP upstream's own stream
//     (not a POST's), to the one flight in flight on the link, or to the newest
//     of several when they all come from one client session (a per_client
//     link); with flights of more than one owner in flight, a question is
//     refused to the upstream and a log line dropped, never handed over;
//   - resources/updated to the sessions subscribed to that URI, and
//     list_changed to every session (the SDK's server keeps both).
//
// The table does not decide what the client may be asked; the handlers in
// link.go do, from what the flight says of its client (pushable).

// ownerOf returns the flight a message the upstream sent on link belongs
// to, nil when it belongs to none (see flights.ownerOf): only an HTTP
// link's client marks messages.
func (u *upstream) ownerOf(link *mcp.ClientSession, meta mcp.Meta) *inflight {
	return u.flights.ownerOf(link, meta, u.cfg.URL != "")
}

// forward sends the client request from (nil for the gateway's own) to the
// upstream as method, by send, on the link that route picks; the request
// is in the table of flights for as long as send runs. This is the one way
// a request other than a tool call reaches a link
// (TestEveryForwardedRequestHasAnOwner).
func (u *upstream) forward(ctx context.Context, method string, from mcp.Request, route route, send func(context.Context, *mcp.ClientSession) error) error {
	fl := newFlight(ctx, method, from)
	done := u.flights.track(fl)
	defer done()
	cs, err := route(ctx, u, fl)
	if err != nil {
		return err
	}
	u.flights.boarded(fl, cs)
	return send(withState(ctx, func(s *requestState) { s.flight = fl }), cs)
}

// sendEarlier makes the request method with params on the raw side of
// cs, when cs speaks a protocol before 2026-07-28, and decodes its answer;
// sent is false on a link of 2026-07-28, whose SDK client answers the
// upstream's rounds of questions in the middle of a read for it. What the
// upstream said before its answer is passed on first (settle), as for a
// call.
func sendEarlier[R any](ctx context.Context, u *upstream, cs *mcp.ClientSession, method string, params any) (res *R, sent bool, err error) {
	if ir := cs.InitializeResult(); ir == nil || ir.ProtocolVersion >= protocolNew {
		return nil, false, nil
	}
	body, err := json.Marshal(params)
	if err != nil {
		return nil, true, err
	}
	raw, err := u.rawLinkOf(cs).request(ctx, method, body)
	if err != nil {
		return nil, true, err
	}
	u.settle(cs)
	res = new(R)
	if len(raw) == 0 || raw[0] != '{' {
		return nil, true, fmt.Errorf("the answer to %s is not an object", method)
	}
	if err := json.Unmarshal(raw, res); err != nil {
		return nil, true, fmt.Errorf("the answer to %s is not of its form: %w", method, err)
	}
	return res, true, nil
}

// route picks the link a flight goes over.
type route func(context.Context, *upstream, *inflight) (*mcp.ClientSession, error)

// sessionLink is the link that serves the flight's client session (see
// linkFor).
func sessionLink(ctx context.Context, u *upstream, fl *inflight) (*mcp.ClientSession, error) {
	return u.linkFor(ctx, fl.peer)
}

// sharedLink is the link every client shares.
func sharedLink(ctx context.Context, u *upstream, _ *inflight) (*mcp.ClientSession, error) {
	return u.connect(ctx)
}

// onLink is the link cs, or the shared one when cs is nil.
func onLink(cs *mcp.ClientSession) route {
	if cs == nil {
		return sharedLink
	}
	return func(context.Context, *upstream, *inflight) (*mcp.ClientSession, error) { return cs, nil }
}

// metaFlight is the _meta key under which an HTTP link's client marks the
// flight whose POST stream carried a message.
const metaFlight = "interlock/flight"

// flightMark reads the flight an HTTP link's client marked in meta.
func flightMark(meta mcp.Meta) (uint64, bool) {
	s, ok := meta[metaFlight].(string)
	if !ok {
		return 0, false
	}
	seq, err := strconv.ParseUint(s, 10, 64)
	return seq, err == nil
}

// unmarked returns meta without the flight mark, for passing a message on
// to a client: the mark is the gateway's, not the upstream's.
func unmarked(meta mcp.Meta) mcp.Meta {
	if _, ok := meta[metaFlight]; !ok {
		return meta
	}
	out := make(mcp.Meta, len(meta)-1)
	for k, v := range meta {
		if k != metaFlight {
			out[k] = v
		}
	}
	if len(out) == 0 {
		return nil
	}
	return out
}

// ownerTrip is the HTTP client transport of a link to a streamable-HTTP
// upstream. In each request and notification the upstream sends on a
// POST's response stream it marks, in _meta, the flight that POST was
// sent for (the request's context names it; a stream resumed with GET
// keeps the context of its POST), so that ownerOf finds it
// however many flights are in the air. It removes the mark from every
// other message, so that an upstream cannot forge one.
type ownerTrip struct{ next http.RoundTripper }

func (t ownerTrip) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := t.next.RoundTrip(r)
	if err != nil {
		return resp, err
	}
	mark := ""
	if fl := stateOf(r.Context()).flight; fl != nil {
		mark = strconv.FormatUint(fl.seq, 10)
	}
	switch mediaType(resp.Header.Get("Content-Type")) {
	case "text/event-stream":
		resp.Body = &markedStream{src: bufio.NewReader(resp.Body), body: resp.Body, mark: mark}
	case "application/json":
		// An answer in JSON is one message, by the specification the
		// response itself; anything else it carries is marked as on a
		// stream, which costs a look only when the mark's name is in it.
		resp.Body = &markedJSON{body: resp.Body, mark: mark}
	}
	return resp, nil
}

// mediaType is a Content-Type without its parameters, lower-cased.
func mediaType(ct string) string {
	mt, _, _ := strings.Cut(ct, ";")
	return strings.ToLower(strings.TrimSpace(mt))
}

// markedStream is a response's event stream with each message marked as
// ownerTrip says. It reads one event at a time, so every event reaches the
// SDK as soon as it is whole.
type markedStream struct {
	src  *bufio.Reader
	body io.Closer
	mark string
	out  []byte
	err  error
}

func (s *markedStream) Read(p []byte) (int, error) {
	for len(s.out) == 0 {
		if s.err != nil {
			return 0, s.err
		}
		s.out, s.err = s.event()
	}
	n := copy(p, s.out)
	s.out = s.out[n:]
	return n, nil
}

func (s *markedStream) Close() error { return s.body.Close() }

// event reads the stream through the blank line that ends one event, and
// returns the event with its message marked.
func (s *markedStream) event() ([]byte, error) {
	var lines [][]byte
	for {
		line, err := s.src.ReadBytes('\n')
		if len(line) > 0 {
			lines = append(lines, line)
		}
		if err != nil || len(bytes.TrimRight(line, "\r\n")) == 0 {
			return markEvent(lines, s.mark), err
		}
	}
}

// markEvent returns the lines of one event with the message its data
// fields carry marked; the lines as they were when there is nothing to
// mark or remove.
func markEvent(lines [][]byte, mark string) []byte {
	var data [][]byte
	first := -1
	for i, line := range lines {
		if v, ok := bytes.CutPrefix(line, []byte("data:")); ok {
			v = bytes.TrimPrefix(v, []byte(" "))
			data = append(data, bytes.TrimRight(v, "\r\n"))
			if first < 0 {
				first = i
			}
		}
	}
	marked, changed := markMessage(bytes.Join(data, []byte("\n")), mark)
	var out bytes.Buffer
	for i, line := range lines {
		switch {
		case !changed || first < 0:
			out.Write(line)
		case i == first:
			out.WriteString("data: ")
			out.Write(marked)
			out.WriteString("\n")
		case bytes.HasPrefix(line, []byte("data:")):
		default:
			out.Write(line)
		}
	}
	return out.Bytes()
}

// markMessage sets mark as the flight in the _meta of msg's params when
// msg is a request or notification, and removes any mark msg carried;
// changed is false when msg is left as it was.
func markMessage(msg []byte, mark string) (out []byte, changed bool) {
	forged := bytes.Contains(msg, []byte(metaFlight))
	if !forged && (mark == "" || !bytes.Contains(msg, []byte(`"method"`))) {
		return nil, false
	}
	var fields map[string]json.RawMessage
	if json.Unmarshal(msg, &fields) != nil {
		return nil, false
	}
	if _, ok := fields["method"]; !ok {
		// A response: a mark in it is data, never read as one.
		return nil, false
	}
	params := map[string]json.RawMessage{}
	if p, ok := fields["params"]; ok && string(p) != "null" {
		if json.Unmarshal(p, &params) != nil {
			return nil, false
		}
	}
	meta := map[string]json.RawMessage{}
	if m, ok := params["_meta"]; ok && string(m) != "null" {
		if json.Unmarshal(m, &meta) != nil {
			return nil, false
		}
	}
	delete(meta, metaFlight)
	if mark != "" {
		meta[metaFlight] = json.RawMessage(strconv.Quote(mark))
	}
	delete(params, "_meta")
	if len(meta) > 0 {
		params["_meta"], _ = json.Marshal(meta)
	}
	fields["params"], _ = json.Marshal(params)
	out, err := json.Marshal(fields)
	return out, err == nil
}

// markedJSON is a response in JSON, marked as ownerTrip says once it is
// read whole; the SDK reads such a response whole too.
type markedJSON struct {
	body io.ReadCloser
	mark string
	out  *bytes.Reader
}

func (j *markedJSON) Read(p []byte) (int, error) {
	if j.out == nil {
		raw, err := io.ReadAll(j.body)
		if err != nil {
			return 0, err
		}
		if marked, changed := markMessage(raw, j.mark); changed {
			raw = marked
		}
		j.out = bytes.NewReader(raw)
	}
	return j.out.Read(p)
}

func (j *markedJSON) Close() error { return j.body.Close() }
