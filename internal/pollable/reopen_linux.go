package pollable

import (
	"fmt"
	"os"
	"syscall"
)

// reopen opens the pipe f reads once more, non-blocking; nil when f is not
// a pipe or cannot be opened again.
func reopen(f *os.File) *os.File {
	fi, err := f.Stat()
	if err != nil || fi.Mode()&os.ModeNamedPipe == 0 {
		return nil
	}
	// Not f.Fd(), which would put a polled file in blocking mode.
	rc, err := f.SyscallConn()
	if err != nil {
		return nil
	}
	var fd uintptr
	if err := rc.Control(func(d uintptr) { fd = d }); err != nil {
		return nil
	}
	g, err := os.OpenFile(fmt.Sprintf("/proc/self/fd/%d", fd), os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil
	}
	if !Polled(g) {
		g.Close()
		return nil
	}
	return g
}
