//go:build unix && !aix

package main

import (
	"net"
	"syscall"

	"golang.org/x/sys/unix"
)

// pending reports whether bytes its client sent, or its end, wait to be
// read on c, without reading them: a peek that does not block.
func pending(c net.Conn) bool {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return false
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return false
	}
	var n int
	var peekErr error
	var one [1]byte
	err = rc.Control(func(fd uintptr) {
		for {
			n, _, peekErr = unix.Recvfrom(int(fd), one[:], unix.MSG_PEEK|unix.MSG_DONTWAIT)
			if peekErr != unix.EINTR {
				return
			}
		}
	})
	if err != nil {
		return false
	}
	// An error other than "nothing yet" (the end, a reset) is for the
	// read to report at once.
	return n > 0 || peekErr != unix.EAGAIN && peekErr != unix.EWOULDBLOCK
}
