// Package pollable gives a program's standard input to the Go runtime's
// network poller, so that no goroutine waits for a client's next line
// inside a read(2) system call.
//
// A process that reads a pipe it was started with (stdin, as a stdio MCP
// server or `interlock serve --stdio` does) gets the pipe in blocking
// mode: os/exec hands a child its end that way, and os.Stdin then reads
// with a plain read(2) that sleeps in the kernel until the client writes.
// The Go 1.26 runtime can stall every goroutine of such a process. When a
// goroutine enters that read at the moment another one starts to stop the
// world (a garbage collection beginning, runtime.ReadMemStats), the
// stopping side may miss that the reader is in a system call: its P is
// neither given up nor taken, and the world stays stopping until the read
// returns. A stdio server that has just read a request and is about to
// answer it then answers only when the client writes something more; a
// client waiting for the answer waits forever. The go-sdk's stdio
// transport (v1.8.0) reads stdin on a goroutine of its own, and its next
// read begins as the request it just read is decoded, which is when a
// collection tends to start: about one call in a million over stdio went
// unanswered until the client gave up.
//
// A read through the poller never sleeps in the kernel: the goroutine
// parks, holds no P, and a stopping world does not wait for it. The
// runtime polls only files that were non-blocking when it first saw them,
// so [Open] opens the pipe again, non-blocking. Setting O_NONBLOCK on the
// descriptor the process was given would change the file description it
// shares with whoever else holds it (a shell, the parent); a new open of
// /proc/self/fd/N is a description of its own.
package pollable

import (
	"os"
	"time"
)

// Open returns f, or the same pipe opened again to read through the
// runtime's poller when f is a pipe the runtime cannot poll (see the
// package comment). The caller reads the returned file in place of f and
// closes it when done; f stays open.
func Open(f *os.File) *os.File {
	if f == nil || Polled(f) {
		return f
	}
	if g := reopen(f); g != nil {
		return g
	}
	return f
}

// Polled reports whether reads of f wait in the runtime's poller: only
// such files take a read deadline.
func Polled(f *os.File) bool {
	return f.SetReadDeadline(time.Time{}) == nil
}
