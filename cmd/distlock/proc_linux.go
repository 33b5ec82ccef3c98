//go:build linux

package main

import (
	"os/exec"
	"syscall"
)

// setParentDeathSignal has the kernel kill the command if distlock dies without
// terminating it (SIGKILL, OOM): the lock dies with distlock, and the command
// must not go on as if it held it.
func setParentDeathSignal(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
