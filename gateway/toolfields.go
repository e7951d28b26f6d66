package gateway

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"maps"
	"net/http"
	"slices"
	"strings"
	"sync"

	"github.com/interlock-mcp/interlock"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// The go-sdk's Tool has the fields of the protocol version it was written
// for; a field it does not model (such as execution, which says whether a
// tool runs as a task) is lost when the gateway reads an upstream's list.
// So the link keeps, beside what the SDK reads, the raw fields of each
// tool that the SDK's Tool has no place for, and tools/list hands them on
// as the upstream wrote them. Policy changes only the modelled fields
// (annotations, input and output schema), never these.

// modelledToolFields are the JSON members of the SDK's Tool, in lower
// case: a member that differs from one only in case is not an extra
// either, since a client that reads JSON without regard to case (Go's
// encoding/json does) would take it for the gate's.
var modelledToolFields = map[string]bool{
	"_meta": true, "annotations": true, "description": true, "inputschema": true,
	"name": true, "outputschema": true, "title": true, "icons": true,
}

// toolExtras are the fields of an upstream's tools the SDK does not model,
// by the upstream's own tool name.
type toolExtras struct {
	mu     sync.Mutex
	byTool map[string]map[string]json.RawMessage
}

// note reads one tools/list result and keeps the unmodelled fields of
// each tool in it.
func (x *toolExtras) note(result json.RawMessage) {
	var page struct {
		Tools []map[string]json.RawMessage `json:"tools"`
	}
	if json.Unmarshal(result, &page) != nil {
		return
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.byTool == nil {
		x.byTool = map[string]map[string]json.RawMessage{}
	}
	for _, t := range page.Tools {
		var name string
		if json.Unmarshal(t["name"], &name) != nil {
			continue
		}
		extra := map[string]json.RawMessage{}
		for k, v := range t {
			if !modelledToolFields[strings.ToLower(k)] {
				extra[k] = v
			}
		}
		if len(extra) == 0 {
			delete(x.byTool, name)
			continue
		}
		x.byTool[name] = extra
	}
}

// of returns the unmodelled fields of the upstream's tool name.
func (x *toolExtras) of(name string) map[string]json.RawMessage {
	x.mu.Lock()
	defer x.mu.Unlock()
	return x.byTool[name]
}

// extrasTransport wraps a link's transport to read the raw tools of each
// tools/list answer.
type extrasTransport struct {
	mcp.Transport
	extras *toolExtras
}

func (t extrasTransport) Connect(ctx context.Context) (mcp.Connection, error) {
	conn, err := t.Transport.Connect(ctx)
	if err != nil {
		return nil, err
	}
	return &extrasConn{Connection: conn, extras: t.extras, lists: map[jsonrpc.ID]bool{}}, nil
}

// extrasConn is a link's connection, as extrasTransport wraps it.
type extrasConn struct {
	mcp.Connection
	extras *toolExtras

	mu    sync.Mutex
	lists map[jsonrpc.ID]bool // tools/list requests written and not yet answered
}

func (c *extrasConn) Write(ctx context.Context, msg jsonrpc.Message) error {
	if r, ok := msg.(*jsonrpc.Request); ok && r.IsCall() && r.Method == "tools/list" {
		// Noted before writing: the answer may be read before Write returns.
		c.mu.Lock()
		c.lists[r.ID] = true
		c.mu.Unlock()
	}
	return c.Connection.Write(ctx, msg)
}

func (c *extrasConn) Read(ctx context.Context) (jsonrpc.Message, error) {
	msg, err := c.Connection.Read(ctx)
	if r, ok := msg.(*jsonrpc.Response); ok {
		c.mu.Lock()
		list := c.lists[r.ID]
		delete(c.lists, r.ID)
		c.mu.Unlock()
		if list && r.Error == nil {
			c.extras.note(r.Result)
		}
	}
	return msg, err
}

// maxListBody bounds the tools/list answer an HTTP upstream's transport
// keeps a copy of; a longer one is passed on without its extra fields.
const maxListBody = 8 << 20

// extrasTrip reads the tools/list answers of an HTTP upstream as they
// pass, for the same reason as extrasTransport: the connection of an HTTP
// upstream cannot be wrapped, so its HTTP client's transport is.
type extrasTrip struct {
	next   http.RoundTripper
	extras *toolExtras
}

func (t extrasTrip) RoundTrip(r *http.Request) (*http.Response, error) {
	// The request is read from a copy of its body (GetBody), so what is
	// sent is never touched; a body without one is not looked at.
	if r.Method != http.MethodPost || r.GetBody == nil || r.ContentLength < 0 || r.ContentLength > maxListBody {
		return t.next.RoundTrip(r)
	}
	copied, err := r.GetBody()
	if err != nil {
		return t.next.RoundTrip(r)
	}
	body, err := io.ReadAll(io.LimitReader(copied, maxListBody))
	_ = copied.Close()
	if err != nil {
		return t.next.RoundTrip(r)
	}
	var req struct {
		ID     json.RawMessage `json:"id"`
		Method string          `json:"method"`
	}
	resp, err := t.next.RoundTrip(r)
	// Most requests are calls: only a body that names the method is read.
	if err != nil || !bytes.Contains(body, []byte(`"tools/list"`)) || json.Unmarshal(body, &req) != nil ||
		req.Method != "tools/list" || len(req.ID) == 0 {
		return resp, err
	}
	resp.Body = &listBody{ReadCloser: resp.Body, id: req.ID, sse: strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream"), extras: t.extras}
	return resp, nil
}

// listBody keeps a copy of a tools/list answer as the SDK reads it, and
// notes the tools' extra fields once it has all of it.
type listBody struct {
	io.ReadCloser
	id     json.RawMessage
	sse    bool
	extras *toolExtras
	buf    bytes.Buffer
	done   bool
}

func (b *listBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if b.buf.Len()+n <= maxListBody {
		b.buf.Write(p[:n])
	}
	if !b.done && b.answer() {
		b.done = true
	}
	return n, err
}

// answer looks for the answer to the tools/list in what was read so far,
// and notes its tools when it is there.
func (b *listBody) answer() bool {
	var msgs [][]byte
	if b.sse {
		sc := bufio.NewScanner(bytes.NewReader(b.buf.Bytes()))
		sc.Buffer(make([]byte, 0, 64<<10), maxListBody)
		for sc.Scan() {
			if data, ok := bytes.CutPrefix(sc.Bytes(), []byte("data:")); ok {
				msgs = append(msgs, bytes.TrimSpace(data))
			}
		}
	} else {
		msgs = [][]byte{b.buf.Bytes()}
	}
	for _, m := range msgs {
		var resp struct {
			ID     json.RawMessage `json:"id"`
			Result json.RawMessage `json:"result"`
		}
		if json.Unmarshal(m, &resp) == nil && bytes.Equal(resp.ID, b.id) && len(resp.Result) > 0 {
			b.extras.note(resp.Result)
			return true
		}
	}
	return false
}

// toolsWithExtras is a tools/list result that encodes with each tool's
// unmodelled fields added back. The embedded result makes it an
// mcp.Result.
type toolsWithExtras struct {
	*mcp.ListToolsResult
	extras map[string]map[string]json.RawMessage // by the tool's name as clients see it
}

func (r *toolsWithExtras) MarshalJSON() ([]byte, error) {
	fields, err := resultFields(r.ListToolsResult)
	if err != nil {
		return nil, err
	}
	tools := make([]json.RawMessage, len(r.ListToolsResult.Tools))
	for i, t := range r.ListToolsResult.Tools {
		tb, err := json.Marshal(t)
		if err != nil {
			return nil, err
		}
		if extra := r.extras[t.Name]; len(extra) > 0 {
			var tf map[string]json.RawMessage
			if err := json.Unmarshal(tb, &tf); err != nil {
				return nil, err
			}
			for k, v := range extra {
				tf[k] = v
			}
			if tb, err = json.Marshal(tf); err != nil {
				return nil, err
			}
		}
		tools[i] = tb
	}
	if fields["tools"], err = json.Marshal(tools); err != nil {
		return nil, err
	}
	return json.Marshal(fields)
}

// toolFields adds the upstreams' unmodelled tool fields to tools/list.
func (g *Gateway) toolFields(next mcp.MethodHandler) mcp.MethodHandler {
	return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
		res, err := next(ctx, method, req)
		list, ok := res.(*mcp.ListToolsResult)
		if method != "tools/list" || err != nil || !ok || list == nil {
			return res, err
		}
		extras := map[string]map[string]json.RawMessage{}
		table := g.table()
		ss, _ := req.GetSession().(*mcp.ServerSession)
		tasks := ss != nil && sessionTasks(ss)
		for _, t := range list.Tools {
			m := table.find(t.Name)
			if m == nil {
				continue
			}
			u := m.upstream
			x := u.extras.of(strings.TrimPrefix(t.Name, u.cfg.Prefix))
			if _, own := x["execution"]; tasks && !own && g.waitsForApproval(m) {
				// A call that may wait for approval may run as a task
				// (tasks.go); the upstream's own say is kept.
				x = maps.Clone(x)
				if x == nil {
					x = map[string]json.RawMessage{}
				}
				x["execution"] = json.RawMessage(`{"taskSupport":"optional"}`)
			}
			if x != nil {
				extras[t.Name] = x
			}
		}
		if len(extras) == 0 {
			return res, nil
		}
		return &toolsWithExtras{ListToolsResult: list, extras: extras}, nil
	}
}

// waitsForApproval reports whether a call of m may wait for approval: a
// rule in force may decide it so.
func (g *Gateway) waitsForApproval(m *mirroredTool) bool {
	return slices.Contains(g.config().Policy.ToolModes(m.tool.Name, m.tool.Upstream, m.tool.Hints), interlock.ModeApproval)
}
