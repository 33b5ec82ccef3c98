//go:build unix && !linux

package main

import "syscall"

// groupRuns tells whether a process of the group pgid exists. Without /proc
// a zombie counts too, until its parent reaps it.
func groupRuns(pgid int) bool {
	err := syscall.Kill(-pgid, 0)
	return err == nil || err == syscall.EPERM
}
