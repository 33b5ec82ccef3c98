//go:build unix && !linux

package testserver

import "syscall"

// tcpSocket opens an IPv4 TCP socket, close-on-exec. Without SOCK_CLOEXEC
// the flag is set after, under the fork lock, so that no child started
// meanwhile inherits it.
func tcpSocket() (int, error) {
	syscall.ForkLock.RLock()
	defer syscall.ForkLock.RUnlock()
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM, 0)
	if err == nil {
		syscall.CloseOnExec(fd)
	}
	return fd, err
}
