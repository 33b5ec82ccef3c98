//go:build darwin || dragonfly || freebsd || linux || netbsd || openbsd

package filedriver

import (
	"errors"
	"os"
	"syscall"

	"github.com/distlock/lock/driver"
)

// openFlags opens a lock file for reading and writing the fencing counter,
// creating it if missing. O_NOFOLLOW refuses a symbolic link planted in a shared
// directory (such as the default under /tmp), so the counter is never written
// into a file the link points at. Package os adds O_CLOEXEC, so a command started
// by the holder does not inherit, and prolong, the lock.
const openFlags = os.O_RDWR | os.O_CREATE | syscall.O_NOFOLLOW

// readFlags opens a file of the driver's to read it (Inspect, List), never
// following a symbolic link and never creating it.
const readFlags = os.O_RDONLY | syscall.O_NOFOLLOW

// platformErr is nil where flock(2) is available.
var platformErr error

// The modes of flockNB.
const (
	lockEx = syscall.LOCK_EX
	lockSh = syscall.LOCK_SH
)

// flockNB takes an exclusive (lockEx) or shared (lockSh) flock(2) on f without
// waiting, converting a lock f already has. It returns driver.ErrLocked when
// another open file description holds a conflicting lock, whether in another
// process or this one.
func flockNB(f *os.File, mode int) error {
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	var ferr error
	if err := rc.Control(func(fd uintptr) {
		for {
			ferr = syscall.Flock(int(fd), mode|syscall.LOCK_NB)
			if ferr != syscall.EINTR {
				return
			}
		}
	}); err != nil {
		return err
	}
	switch {
	case ferr == nil:
		return nil
	case errors.Is(ferr, syscall.EWOULDBLOCK):
		return driver.ErrLocked
	default:
		return os.NewSyscallError("flock", ferr)
	}
}

// isSymlinkErr reports whether opening with O_NOFOLLOW failed on a symbolic link.
func isSymlinkErr(err error) bool { return errors.Is(err, syscall.ELOOP) }
