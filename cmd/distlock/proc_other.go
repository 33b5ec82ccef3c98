//go:build !linux

package main

import "os/exec"

// Only Linux can have the kernel kill the command itself when distlock dies;
// elsewhere the groupWatcher kills the command's group (where there are
// process groups), and with --signal-child-only or without groups a command
// orphaned by a killed distlock runs on without the lock.
func setParentDeathSignal(*exec.Cmd) {}
