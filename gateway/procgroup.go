package gateway

import (
	"context"
	"os/exec"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// groupGrace is how long the rest of a child's process group has, after
// the child itself stopped, to end on SIGTERM before it is killed.
const groupGrace = 2 * time.Second

// groupTransport starts a child in a process group of its own and, when
// the link closes, stops the whole group: a wrapper such as `npm exec` or
// a shell stops when told, but the server it started would otherwise live
// on as an orphan.
type groupTransport struct {
	mcp.Transport
	cmd *exec.Cmd
}

func (t groupTransport) Connect(ctx context.Context) (mcp.Connection, error) {
	conn, err := t.Transport.Connect(ctx)
	if err != nil {
		return nil, err
	}
	return &groupConn{Connection: conn, cmd: t.cmd}, nil
}

// groupConn is a child's connection, as groupTransport wraps it.
type groupConn struct {
	mcp.Connection
	cmd *exec.Cmd
}

// Close closes the connection as the SDK does (the child is asked to stop,
// then made to), then stops what is left of the child's group.
func (c *groupConn) Close() error {
	err := c.Connection.Close()
	if c.cmd.Process != nil {
		stopGroup(c.cmd.Process.Pid, groupGrace)
	}
	return err
}
