package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/interlock-mcp/interlock"
	"github.com/interlock-mcp/interlock/policy"
)

// connectTimeout bounds starting a child and the MCP handshake with it.
const connectTimeout = 30 * time.Second

// upstream is one MCP server the gateway runs as a child over stdio.
type upstream struct {
	cfg     *policy.Upstream
	file    string
	version string
	// onToolsChanged is called, off the client's goroutine, when the child
	// announces that its tool list changed.
	onToolsChanged func(*upstream)

	mu      sync.Mutex
	session *mcp.ClientSession
	started bool // a session was made before
}

// where names the upstream's definition for messages to the operator.
func (u *upstream) where() string {
	if u.cfg.Line > 0 {
		return fmt.Sprintf("%s:%d", u.file, u.cfg.Line)
	}
	return u.file
}

// connect starts the child and completes the MCP handshake.
func (u *upstream) connect(ctx context.Context) (*mcp.ClientSession, error) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.session != nil {
		return u.session, nil
	}
	cmd := exec.Command(u.cfg.Command[0], u.cfg.Command[1:]...)
	cmd.Dir = u.cfg.Dir
	cmd.Env = os.Environ()
	for k, v := range u.cfg.Env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	cmd.Stderr = os.Stderr
	client := mcp.NewClient(&mcp.Implementation{Name: "interlock", Version: u.version}, &mcp.ClientOptions{
		ToolListChangedHandler: func(context.Context, *mcp.ToolListChangedRequest) {
			go u.onToolsChanged(u)
		},
	})
	cctx, cancel := context.WithTimeout(ctx, connectTimeout)
	defer cancel()
	cs, err := client.Connect(cctx, &mcp.CommandTransport{Command: cmd}, nil)
	if err != nil {
		return nil, fmt.Errorf("upstream %q (%s): command %q did not start as an MCP server: %w; fix its command in %s",
			u.cfg.Name, u.where(), strings.Join(u.cfg.Command, " "), err, u.where())
	}
	u.session = cs
	if u.started {
		// A restarted child may offer other tools than the one before.
		go u.onToolsChanged(u)
	}
	u.started = true
	go func() {
		// When the child exits, the next call reconnects.
		_ = cs.Wait()
		u.forget(cs)
	}()
	return cs, nil
}

// tools lists every tool the upstream offers, following pagination.
func (u *upstream) tools(ctx context.Context) ([]*mcp.Tool, error) {
	cs, err := u.connect(ctx)
	if err != nil {
		return nil, err
	}
	var out []*mcp.Tool
	for t, err := range cs.Tools(ctx, nil) {
		if err != nil {
			return nil, fmt.Errorf("upstream %q: listing tools: %w", u.cfg.Name, err)
		}
		out = append(out, t)
	}
	return out, nil
}

// call forwards a call the gate let through and returns the upstream's
// result untouched. Failures become server-side interlock errors; the
// upstream's internal error text stays in the gateway's log.
func (u *upstream) call(ctx context.Context, name string, args json.RawMessage) (*mcp.CallToolResult, error) {
	cs, err := u.connect(ctx)
	if err != nil {
		return nil, &interlock.Error{
			Code:    interlock.CodeUpstreamUnavailable,
			Message: fmt.Sprintf("The server behind %s is not running.", name),
			Hint:    "Retry in a few seconds; if it keeps failing, tell the operator that the upstream does not start.",
			Err:     err,
		}
	}
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: args})
	if err == nil {
		return res, nil
	}
	var rpcErr *jsonrpc.Error
	switch {
	case errors.Is(err, mcp.ErrConnectionClosed), errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		u.forget(cs)
		return nil, &interlock.Error{
			Code:    interlock.CodeUpstreamUnavailable,
			Message: fmt.Sprintf("The connection to the server behind %s closed during the call; it may or may not have run.", name),
			Hint:    "Check the current state with a read-only tool before retrying, then retry once.",
			Err:     err,
		}
	case errors.Is(err, context.DeadlineExceeded):
		return nil, &interlock.Error{
			Code:    interlock.CodeUpstreamTimeout,
			Message: fmt.Sprintf("The server behind %s did not answer in time; it may or may not have run.", name),
			Hint:    "Check the current state with a read-only tool before retrying.",
			Err:     err,
		}
	case errors.As(err, &rpcErr) && rpcErr.Code == jsonrpc.CodeInvalidParams:
		return nil, &interlock.Error{
			Code:    interlock.CodeValidationFailed,
			Message: fmt.Sprintf("The server behind %s rejected the arguments: %s", name, rpcErr.Message),
			Hint:    fmt.Sprintf("Fix the arguments as the message says, then call %s again.", name),
			Err:     err,
		}
	}
	return nil, &interlock.Error{
		Code:    interlock.CodeUpstreamError,
		Message: fmt.Sprintf("The server behind %s failed to handle the call.", name),
		Hint:    "Retry once; if it fails again, tell the operator.",
		Err:     err,
	}
}

// forget drops a session that broke, so the next call starts the child again.
func (u *upstream) forget(cs *mcp.ClientSession) {
	u.mu.Lock()
	if u.session == cs {
		u.session = nil
	}
	u.mu.Unlock()
	_ = cs.Close()
}

func (u *upstream) close() error {
	u.mu.Lock()
	cs := u.session
	u.session = nil
	u.mu.Unlock()
	if cs == nil {
		return nil
	}
	return cs.Close()
}
