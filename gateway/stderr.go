package gateway

import (
	"bytes"
	"log/slog"
	"sync"
)

// maxStderrLine bounds one line of a child's standard error in the log;
// the rest of a longer line is dropped.
const maxStderrLine = 4096

// stderrLog writes a child's standard error to the gateway's log, one
// record a line, under the upstream's name.
type stderrLog struct {
	log      *slog.Logger
	upstream string

	mu      sync.Mutex
	line    []byte
	dropped int // bytes of the current line beyond maxStderrLine
}

func (w *stderrLog) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := len(p)
	for len(p) > 0 {
		i := bytes.IndexByte(p, '\n')
		chunk := p
		if i >= 0 {
			chunk = p[:i]
		}
		room := maxStderrLine - len(w.line)
		if len(chunk) > room {
			w.dropped += len(chunk) - room
			chunk = chunk[:room]
		}
		w.line = append(w.line, chunk...)
		if i < 0 {
			break
		}
		w.flush()
		p = p[i+1:]
	}
	return n, nil
}

// flush logs the line gathered so far. The caller holds w.mu.
func (w *stderrLog) flush() {
	attrs := []any{"upstream", w.upstream, "line", logText(string(bytes.TrimRight(w.line, "\r")))}
	if w.dropped > 0 {
		attrs = append(attrs, "cut_bytes", w.dropped)
	}
	w.log.Info("upstream stderr", attrs...)
	w.line, w.dropped = w.line[:0], 0
}
