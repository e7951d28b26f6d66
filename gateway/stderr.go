package gateway

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"hash/maphash"
	"log/slog"
	"slices"
	"strings"
	"sync"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// maxStderrLine bounds one line of a child's standard error in the log;
// the rest of a longer line is dropped.
const maxStderrLine = 4096

// What of a child's standard error its failure to start quotes to the
// operator: a child that exits at once says why in its last lines (a token
// not set, a package not found), and a usage text should not fill a message.
const (
	maxTailLines = 10
	maxTailBytes = 2048
)

// maxRememberedLines bounds how many lines of one start are remembered to
// tell whether the next start wrote the same.
const maxRememberedLines = 1000

// sameAsLastStart stands for a child's standard error that repeats the
// previous start's word for word.
const sameAsLastStart = "(same stderr as the last start)"

// stderrLog writes a child's standard error to the gateway's log, one
// record a line, under the upstream's name, and keeps its last lines for
// the message that says why the child did not start. With memory, a line
// that repeats the previous start's line at the same place is not logged
// again: a child that crash-loops writes its usage text into the log once,
// not on every restart.
type stderrLog struct {
	log      *slog.Logger
	upstream string

	mu      sync.Mutex
	line    []byte
	dropped int // bytes of the current line beyond maxStderrLine

	tail      []string // the last lines, at most maxTailLines and maxTailBytes
	tailBytes int
	hashes    []uint64 // of every line so far, up to maxRememberedLines
	last      []uint64 // the previous start's hashes; nil without memory
	held      int      // lines not logged, as they repeat the previous start's
	differs   bool     // a line differed from the previous start's
}

// stderrMemory is what an upstream remembers of its children's standard
// error from one start to the next: the writer of the last start.
type stderrMemory struct {
	mu   sync.Mutex
	prev *stderrLog
}

var stderrSeed = maphash.MakeSeed()

// next makes the writer of a new start of a child of upstream, which
// compares its lines with the previous start's.
func (m *stderrMemory) next(log *slog.Logger, upstream string) *stderrLog {
	w := &stderrLog{log: log, upstream: upstream, last: []uint64{}}
	m.mu.Lock()
	prev := m.prev
	m.prev = w
	m.mu.Unlock()
	if prev != nil {
		prev.mu.Lock()
		w.last = prev.hashes
		prev.mu.Unlock()
	}
	return w
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

// flush logs the line gathered so far, unless it repeats the previous
// start's. The caller holds w.mu.
func (w *stderrLog) flush() {
	text := logText(string(bytes.TrimRight(w.line, "\r")))
	dropped := w.dropped
	w.line, w.dropped = w.line[:0], 0
	w.keep(text)
	h := maphash.String(stderrSeed, text)
	i := len(w.hashes)
	if i < maxRememberedLines {
		w.hashes = append(w.hashes, h)
	}
	if w.last != nil && !w.differs && i < len(w.last) && w.last[i] == h {
		w.held++
		if w.held == len(w.last) {
			w.log.Info("upstream stderr", "upstream", w.upstream, "line", sameAsLastStart, "lines", w.held)
		}
		return
	}
	w.differs = true
	attrs := []any{"upstream", w.upstream, "line", text}
	if dropped > 0 {
		attrs = append(attrs, "cut_bytes", dropped)
	}
	w.log.Info("upstream stderr", attrs...)
}

// keep adds a line to the tail. The caller holds w.mu.
func (w *stderrLog) keep(text string) {
	if len(text) > maxTailBytes {
		text = cutText(text, maxTailBytes)
	}
	w.tail = append(w.tail, text)
	w.tailBytes += len(text)
	for len(w.tail) > maxTailLines || w.tailBytes > maxTailBytes {
		w.tailBytes -= len(w.tail[0])
		w.tail = w.tail[1:]
	}
}

// said is what the child's last lines were, as a JSON list of strings, or
// sameAsLastStart when the child wrote exactly what the previous start
// did, whose lines the log and the previous message hold already; "" when
// it wrote nothing.
func (w *stderrLog) said() string {
	if w == nil {
		return ""
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	tail := w.tail
	if len(w.line) > 0 {
		// A last line without its newline still says why.
		tail = append(slices.Clone(tail), logText(string(w.line)))
	}
	if len(tail) == 0 {
		return ""
	}
	if !w.differs && len(w.line) == 0 && w.held > 0 && w.held == len(w.last) {
		return sameAsLastStart
	}
	return jsonList(tail)
}

// stderrSaid is an error of a child that did not start, with what it said
// on standard error; its text is for the operator alone.
type stderrSaid struct {
	err  error
	said string
}

func (e stderrSaid) Error() string {
	cause := e.err.Error()
	if errors.Is(e.err, mcp.ErrConnectionClosed) {
		// A child that exited at start ends the handshake with EOF or a
		// broken pipe, whichever comes first: a race the operator need
		// not read, when its stderr says why.
		cause = "it closed the connection before answering initialize"
	}
	if e.said == sameAsLastStart {
		return cause + "; " + sameAsLastStart
	}
	return cause + "; its stderr ended with " + e.said
}

func (e stderrSaid) Unwrap() error { return e.err }

// withStderr adds to err what the child of w said on standard error.
func withStderr(err error, w *stderrLog) error {
	if said := w.said(); said != "" {
		return stderrSaid{err: err, said: said}
	}
	return err
}

// jsonList writes list as a JSON array of strings: a command whose
// argument holds a space, or a line with quotes, reads unambiguously.
func jsonList(list []string) string {
	var b strings.Builder
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if list == nil {
		list = []string{}
	}
	if err := enc.Encode(list); err != nil {
		return fmt.Sprintf("%q", list)
	}
	return strings.TrimSuffix(b.String(), "\n")
}

// CommandText is a command as every message shows it: a JSON array, so
// that ["npx","-y @scope/pkg"], one argument with a space, does not look
// like the two arguments it was meant to be.
func CommandText(argv []string) string { return jsonList(argv) }
