package sdkrules

import (
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// An IdleTimer closes a session after a timeout with no POST in progress,
// as the SDK's streamable handler does with StreamableHTTPOptions'
// SessionTimeout. Its methods do nothing on a nil IdleTimer, which stands
// for a session without a timeout.
type IdleTimer struct {
	timeout time.Duration

	mu    sync.Mutex
	refs  int         // POSTs in progress
	timer *time.Timer // nil once stopped for good
}

// NewIdleTimer starts the timer of a session that expire closes; nil when
// timeout is not positive.
func NewIdleTimer(timeout time.Duration, expire func()) *IdleTimer {
	if timeout <= 0 {
		return nil
	}
	return &IdleTimer{timeout: timeout, timer: time.AfterFunc(timeout, expire)}
}

// StartPOST holds the timer while a POST of the session is in progress.
func (t *IdleTimer) StartPOST() {
	if t == nil {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.timer == nil {
		return
	}
	if t.refs == 0 {
		t.timer.Stop()
	}
	t.refs++
}

// EndPOST restarts the timer when the last POST in progress ends.
func (t *IdleTimer) EndPOST() {
	if t == nil {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.timer == nil {
		return
	}
	t.refs--
	if t.refs == 0 {
		t.timer.Reset(t.timeout)
	}
}

// Stop stops the timer for good, as when the session has closed.
func (t *IdleTimer) Stop() {
	if t == nil {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.timer != nil {
		t.timer.Stop()
		t.timer = nil
	}
}

// ElicitMode returns p with its mode written out, as the SDK infers it
// for a question sent without one.
func ElicitMode(p *mcp.ElicitParams) *mcp.ElicitParams {
	if p == nil || p.Mode != "" {
		return p
	}
	q := *p
	if p.URL != "" || p.ElicitationID != "" {
		q.Mode = "url"
	} else {
		q.Mode = "form"
	}
	return &q
}
