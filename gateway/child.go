package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/interlock-mcp/interlock"
	"github.com/interlock-mcp/interlock/config"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// This file is the child process of a stdio upstream: its command and
// environment, its process group, and the connection to it (MCP's stdio
// transport). It speaks no protocol: the SDK's client session above the
// connection does the handshake and everything after, and link.go decides
// when a child is started again.

// ChildEnvBase lists the variables of the gateway's environment that every
// child gets: what a program needs to find its tools, its home, a locale, a
// time zone and a place for temporary files. The rest of the gateway's
// environment (cloud credentials, tokens of other services) stays with the
// gateway unless an upstream sets inherit_env.
var ChildEnvBase = []string{"PATH", "HOME", "USER", "LOGNAME", "LANG", "LC_ALL", "LC_CTYPE", "TZ", "TMPDIR", "TEMP", "TMP", "SYSTEMROOT"}

// childEnv is the environment of an upstream's child: the base list taken
// from environ (or all of it with inherit_env), then the upstream's own
// env. The sealing keys and the name of their file are never passed on: a
// server behind the gate must never be able to mint confirm tokens.
func childEnv(environ []string, cfg *config.Upstream) []string {
	var env []string
	for _, kv := range environ {
		name, _, _ := strings.Cut(kv, "=")
		if name == interlock.SecretEnv || name == config.SecretFileEnv {
			continue
		}
		if cfg.InheritEnv || slices.Contains(ChildEnvBase, name) {
			env = append(env, kv)
		}
	}
	for k, v := range cfg.Env {
		env = append(env, k+"="+v)
	}
	return env
}

// child makes the transport that starts the upstream's child, in a process
// group of its own, and stderr, which keeps what the child says on
// standard error. shared says the child serves the shared link, whose
// starts are compared with each other (see stderrLog).
func (u *upstream) child(shared bool) (mcp.Transport, *stderrLog) {
	cmd := exec.Command(u.cfg.Command[0], u.cfg.Command[1:]...)
	cmd.Dir = u.cfg.Dir
	cmd.Env = childEnv(os.Environ(), u.cfg)
	var stderr *stderrLog
	if shared {
		stderr = u.stderr.next(u.log(), u.cfg.Name)
	} else {
		stderr = &stderrLog{log: u.log(), upstream: u.cfg.Name}
	}
	cmd.Stderr = stderr
	inOwnGroup(cmd)
	return pipeTransport{cmd: cmd}, stderr
}

// pipeTransport runs a child and speaks MCP's stdio transport with it:
// JSON-RPC messages on its standard input and output, one per line. It
// does what the SDK's CommandTransport does, for the gateway's children
// only, because of what a message costs: the SDK's reader decodes every
// message two or three times (as a batch, as a message, its method), each
// time with a JSON decoder that allocates and clears a buffer of 32 KB, so
// a forwarded call cost the gateway some 100 KB of garbage on its way back
// from the child. Here one decoder reads the child's output for the life
// of the link, and each message is decoded once.
//
// When the connection closes it stops the child's whole process group: a
// wrapper such as `npm exec` or a shell stops when told, but the server it
// started would otherwise live on as an orphan.
type pipeTransport struct{ cmd *exec.Cmd }

// maxFrame bounds one message from a child, as the SDK bounds a line.
const maxFrame = mcp.DefaultMaxLineLength

// groupGrace is how long the rest of a child's process group has, after
// the child itself stopped, to end on SIGTERM before it is killed.
const groupGrace = 2 * time.Second

// terminateWait is how long a child has to exit after its input closes,
// and again after SIGTERM, before it is killed (as the SDK waits).
const terminateWait = 5 * time.Second

func (t pipeTransport) Connect(context.Context) (mcp.Connection, error) {
	stdout, err := t.cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	stdin, err := t.cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	if err := t.cmd.Start(); err != nil {
		return nil, err
	}
	c := &pipeConn{cmd: t.cmd, stdin: stdin, incoming: make(chan pipeRead), closed: make(chan struct{})}
	go c.read(&frameLimit{r: stdout, max: maxFrame})
	return c, nil
}

// pipeConn is the connection to one child.
type pipeConn struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser

	writeMu sync.Mutex

	// incoming hears what the reading goroutine read, so that Read can
	// give up when its context ends or the connection closes (a blocked
	// read of a pipe is not interrupted by either).
	incoming chan pipeRead
	queue    []jsonrpc.Message // the rest of a batch, read and not yet given
	closed   chan struct{}

	closeOnce sync.Once
	closeErr  error
}

// pipeRead is one frame read from the child: its messages, or why no more
// can be read.
type pipeRead struct {
	msgs []jsonrpc.Message
	err  error
}

// read decodes the child's output until it ends or the connection closes.
func (c *pipeConn) read(limit *frameLimit) {
	dec := json.NewDecoder(limit)
	for {
		var raw json.RawMessage
		err := dec.Decode(&raw)
		var msgs []jsonrpc.Message
		if err == nil {
			msgs, err = decodeFrame(raw)
		}
		select {
		case c.incoming <- pipeRead{msgs, err}:
		case <-c.closed:
			return
		}
		if err != nil {
			return
		}
		limit.n = 0
	}
}

func (c *pipeConn) Read(ctx context.Context) (jsonrpc.Message, error) {
	if len(c.queue) > 0 {
		msg := c.queue[0]
		c.queue = c.queue[1:]
		return msg, nil
	}
	select {
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-c.closed:
		return nil, io.EOF
	case r := <-c.incoming:
		if r.err != nil {
			return nil, r.err
		}
		c.queue = r.msgs[1:]
		return r.msgs[0], nil
	}
}

func (c *pipeConn) Write(ctx context.Context, msg jsonrpc.Message) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	data, err := jsonrpc.EncodeMessage(msg)
	if err != nil {
		return err
	}
	data = append(data, '\n')
	c.writeMu.Lock()
	defer c.writeMu.Unlock()
	_, err = c.stdin.Write(data)
	return err
}

// Close closes the child's input, as the stdio transport's shutdown
// begins, and waits for it to exit; one that does not is sent SIGTERM,
// and then killed. Then it stops what is left of the child's group.
func (c *pipeConn) Close() error {
	c.closeOnce.Do(func() {
		close(c.closed)
		c.closeErr = c.stop()
		if c.cmd.Process != nil {
			stopGroup(c.cmd.Process.Pid, groupGrace)
		}
	})
	return c.closeErr
}

func (c *pipeConn) stop() error {
	if err := c.stdin.Close(); err != nil {
		return fmt.Errorf("closing the child's input: %w", err)
	}
	exited := make(chan error, 1)
	go func() { exited <- c.cmd.Wait() }()
	wait := func() (error, bool) {
		select {
		case err := <-exited:
			return err, true
		case <-time.After(terminateWait):
			return nil, false
		}
	}
	if err, ok := wait(); ok {
		return err
	}
	if c.cmd.Process.Signal(syscall.SIGTERM) == nil {
		if err, ok := wait(); ok {
			return err
		}
	}
	if err := c.cmd.Process.Kill(); err != nil {
		return err
	}
	if err, ok := wait(); ok {
		return err
	}
	return errors.New("the child did not exit when killed")
}

func (c *pipeConn) SessionID() string { return "" }

// frameLimit fails a read once one frame has taken more than max bytes,
// so a child cannot make the gateway buffer without bound.
type frameLimit struct {
	r   io.Reader
	max int
	n   int
}

// errFrameTooLarge is the error of a frame over its limit.
var errFrameTooLarge = errors.New("a message from the child is over the size limit")

func (l *frameLimit) Read(p []byte) (int, error) {
	if l.n >= l.max {
		return 0, errFrameTooLarge
	}
	p = p[:min(len(p), l.max-l.n)]
	n, err := l.r.Read(p)
	l.n += n
	return n, err
}

// decodeFrame reads one frame: a message, or a batch of them (which a
// server of a protocol before 2025-06-18 may send).
func decodeFrame(raw json.RawMessage) ([]jsonrpc.Message, error) {
	if b := bytes.TrimLeft(raw, " \t\r\n"); len(b) == 0 || b[0] != '[' {
		msg, err := decodeMessage(raw)
		if err != nil {
			return nil, err
		}
		return []jsonrpc.Message{msg}, nil
	}
	var batch []json.RawMessage
	if err := json.Unmarshal(raw, &batch); err != nil {
		return nil, fmt.Errorf("reading a batch from the child: %w", err)
	}
	if len(batch) == 0 {
		return nil, errors.New("the child sent an empty batch")
	}
	msgs := make([]jsonrpc.Message, 0, len(batch))
	for _, m := range batch {
		msg, err := decodeMessage(m)
		if err != nil {
			return nil, err
		}
		msgs = append(msgs, msg)
	}
	return msgs, nil
}

// decodeMessage reads one JSON-RPC message as the SDK's reader does: a
// request or notification when it names a method, else a response, which
// must have an id.
func decodeMessage(raw json.RawMessage) (jsonrpc.Message, error) {
	var w struct {
		Version string          `json:"jsonrpc"`
		ID      any             `json:"id"`
		Method  *string         `json:"method"`
		Params  json.RawMessage `json:"params"`
		Result  json.RawMessage `json:"result"`
		Error   *jsonrpc.Error  `json:"error"`
	}
	if err := json.Unmarshal(raw, &w); err != nil {
		return nil, fmt.Errorf("reading a message from the child: %w", err)
	}
	if w.Version != "2.0" {
		return nil, fmt.Errorf("a message from the child has version %q, not \"2.0\"", w.Version)
	}
	id, err := jsonrpc.MakeID(w.ID)
	if err != nil {
		return nil, fmt.Errorf("a message from the child: %w", err)
	}
	if w.Method != nil {
		return &jsonrpc.Request{ID: id, Method: *w.Method, Params: w.Params}, nil
	}
	if !id.IsValid() {
		return nil, errors.New("a message from the child has neither a method nor an id")
	}
	resp := &jsonrpc.Response{ID: id, Result: w.Result}
	if w.Error != nil {
		resp.Error = w.Error
	}
	return resp, nil
}
