//go:build !unix

package gateway

import (
	"os/exec"
	"time"
)

// inOwnGroup does nothing where there are no process groups to start.
func inOwnGroup(*exec.Cmd) {}

// stopGroup does nothing where there are no process groups: the SDK has
// stopped the child itself.
func stopGroup(int, time.Duration) {}
