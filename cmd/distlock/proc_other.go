//go:build !linux

package main

import "os/exec"

// Only Linux can have the kernel kill the command when distlock dies; elsewhere
// a command orphaned by a killed distlock runs on without the lock.
func setParentDeathSignal(*exec.Cmd) {}
