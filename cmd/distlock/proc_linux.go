//go:build linux

package main

import (
	"os/exec"
	"syscall"
)

// setParentDeathSignal has the kernel kill the command if distlock dies without
// terminating it (SIGKILL, OOM): the lock dies with distlock, and the command
// must not go on as if it held it. It reaches the command alone; the
// groupWatcher kills the rest of its group.
func setParentDeathSignal(cmd *exec.Cmd) {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
}
