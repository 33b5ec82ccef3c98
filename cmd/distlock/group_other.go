//go:build !unix

package main

import (
	"errors"
	"os"
	"os/exec"
	"syscall"
)

// Without Unix process groups only the command itself is signalled, and
// processes it starts are its own to stop.
const groupsSupported = false

func setOwnGroup(*exec.Cmd)                     {}
func signalGroup(int, syscall.Signal) error     { return errors.ErrUnsupported }
func inTerminalForeground() bool                { return false }
func groupRuns(int) bool                        { return false }
func startGroupWatcher() (*groupWatcher, error) { return nil, errors.ErrUnsupported }

const groupWatcherCommand = "_group-watcher"

type groupWatcher struct{}

func (*groupWatcher) watch(int) error { return errors.ErrUnsupported }
func (*groupWatcher) stop()           {}

func (*groupWatcher) startGated(*exec.Cmd) (*exec.Cmd, error, error) {
	return nil, nil, errors.ErrUnsupported
}

const execGateCommand = "_exec-gated"

func runExecGate([]string) int {
	return usageError(os.Stderr, "distlock", "%s is distlock's own, not a command", execGateCommand)
}

func runGroupWatcher([]string) int {
	return usageError(os.Stderr, "distlock", "%s is distlock's own, not a command", groupWatcherCommand)
}
