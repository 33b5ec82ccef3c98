package testserver

import "syscall"

// tcpSocket opens an IPv4 TCP socket, close-on-exec from the start.
func tcpSocket() (int, error) {
	return syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
}
