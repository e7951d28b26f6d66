//go:build unix

package gateway

import (
	"os/exec"
	"syscall"
	"time"
)

// inOwnGroup makes cmd start a process group of its own, whose id is the
// child's pid.
func inOwnGroup(cmd *exec.Cmd) {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Setpgid = true
}

// stopGroup sends SIGTERM to the process group pgid, and SIGKILL to what
// is left of it after grace.
func stopGroup(pgid int, grace time.Duration) {
	if pgid <= 1 || syscall.Kill(-pgid, syscall.SIGTERM) != nil {
		// No such group left: nothing to stop.
		return
	}
	deadline := time.Now().Add(grace)
	for time.Now().Before(deadline) {
		if syscall.Kill(-pgid, 0) != nil {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	_ = syscall.Kill(-pgid, syscall.SIGKILL)
}
