package gateway

import (
	"bufio"
	"context"
	"errors"
	"io"
	"os"
	"sync"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/interlock-mcp/interlock/internal/pollable"
)

// ServeStdio serves one client over a newline-delimited stream, as
// interlock serve --stdio does on its standard input and output, until the
// client closes in or ctx ends. Its tools/call requests take the lane (see
// lane.go) as a session's do over HTTP; every other line goes to the SDK's
// server, as it would without the lane.
//
// A pipe in is read again through the runtime's poller (see
// internal/pollable): read as it is given, in blocking mode, the gateway
// could stall, every goroutine with it, until the client wrote again.
func (g *Gateway) ServeStdio(ctx context.Context, in io.Reader, out io.Writer) error {
	if f, ok := in.(*os.File); ok {
		if p := pollable.Open(f); p != f {
			defer p.Close()
			in = p
		}
	}
	w := &lineWriter{w: out}
	pr, pw := io.Pipe()
	ss, err := g.server.Connect(ctx, &mcp.IOTransport{Reader: pr, Writer: w}, nil)
	if err != nil {
		return err
	}
	l := g.newLane(0)
	s := l.session(ss, "")
	go func() {
		<-ctx.Done()
		_ = ss.Close()
	}()
	go func() {
		err := l.scan(ctx, s, in, pw, w)
		_ = pw.CloseWithError(err)
	}()
	return ss.Wait()
}

// scanBuffer is the longest line the lane reads whole; a longer one goes
// to the SDK as it comes, which applies its own limit.
const scanBuffer = 1 << 20

// scan reads the client's lines: each one the lane takes it serves, on a
// goroutine of its own as the SDK would; the rest it passes to sdk.
func (l *lane) scan(ctx context.Context, s *laneSession, in io.Reader, sdk io.Writer, out *lineWriter) error {
	br := bufio.NewReaderSize(in, scanBuffer)
	for {
		line, err := br.ReadSlice('\n')
		if errors.Is(err, bufio.ErrBufferFull) {
			// Too long to judge: the SDK reads it, with the rest of the line.
			if _, err := sdk.Write(line); err != nil {
				return err
			}
			for errors.Is(err, bufio.ErrBufferFull) {
				if line, err = br.ReadSlice('\n'); len(line) > 0 {
					if _, werr := sdk.Write(line); werr != nil {
						return werr
					}
				}
			}
			if err != nil {
				return err
			}
			continue
		}
		if len(line) > 0 && !l.stdioLine(ctx, s, line, out) {
			if _, werr := sdk.Write(line); werr != nil {
				return werr
			}
		}
		if err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		}
	}
}

// stdioLine serves a line of the client's the lane takes: a tools/call,
// or an answer to a question the lane asked. It reports whether it did; a
// cancellation it also passes on.
func (l *lane) stdioLine(ctx context.Context, s *laneSession, line []byte, out *lineWriter) bool {
	msgs := rpcMessages(line)
	if len(msgs) != 1 || (len(line) > 0 && firstNonSpace(line) == '[') {
		return false
	}
	m := msgs[0]
	switch {
	case m.Method == "tools/call":
		p, ok := l.takes(s, m)
		if !ok {
			return false
		}
		// What was decoded from the line is a copy: the reader may reuse
		// the line's bytes at once.
		callCtx, leave, ok := s.enter(ctx, m.ID)
		if !ok {
			return false
		}
		go func() {
			defer leave()
			l.call(callCtx, s, m, p, nil, &lineOut{w: out})
		}()
		return true
	case l.takesTask(m):
		go l.answerTask(ctx, s, m, nil, &lineOut{w: out})
		return true
	case l.takesTaskV1(s, m):
		go l.answerTaskV1(ctx, s, m, nil, &lineOut{w: out})
		return true
	case m.Method == "" && len(m.ID) > 0:
		return s.answer(m)
	case m.Method == "notifications/cancelled":
		s.cancel(m.Params)
	}
	return false
}

func firstNonSpace(b []byte) byte {
	for _, c := range b {
		switch c {
		case ' ', '\t', '\r', '\n':
			continue
		}
		return c
	}
	return 0
}

// lineWriter writes whole lines to a stream shared by the SDK's server and
// the lane, one writer at a time.
type lineWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (w *lineWriter) Write(b []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.w.Write(b)
}

func (w *lineWriter) Close() error { return nil }

// line writes msg and a newline in one write.
func (w *lineWriter) line(msg []byte) error {
	_, err := w.Write(append(msg, '\n'))
	return err
}

// lineOut is a lane call's output on a stdio stream.
type lineOut struct{ w *lineWriter }

func (o *lineOut) ahead(msg []byte) error { return o.w.line(msg) }

func (o *lineOut) last(msg []byte) { _ = o.w.line(msg) }
