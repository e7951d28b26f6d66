package main

import "golang.org/x/sys/unix"

// forbidDumps makes this process non-dumpable: no core dump, no ptrace
// attach and no /proc/<pid>/environ or /proc/<pid>/mem for processes of
// the same user without CAP_SYS_PTRACE, such as the gateway's own
// children. The sealing keys were in the environment this process started
// with, and the kernel keeps that copy readable there for its whole life.
func forbidDumps() error {
	return unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0)
}
