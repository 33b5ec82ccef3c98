//go:build !linux

package filedriver

// kernelWaiters cannot tell without Linux's /proc/locks.
func kernelWaiters(string) (int, bool) { return 0, false }
