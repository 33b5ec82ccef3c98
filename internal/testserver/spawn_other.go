//go:build unix && !linux

package testserver

import (
	"os/exec"
	"syscall"
)

// spawn starts cmd in its own process group. Without Linux's parent-death signal a
// server outlives a test binary that is killed before Main could stop it.
func spawn(cmd *exec.Cmd) error {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Setpgid = true
	return cmd.Start()
}

func stopSpawner() {}

// descendants is not known without /proc; signals reach the process group only.
func descendants(pid int) []int { return nil }

// killTree kills pid's process group and waits until done is closed.
func killTree(pid int, done <-chan struct{}) {
	_ = syscall.Kill(-pid, syscall.SIGKILL)
	<-done
}
