//go:build !(darwin || dragonfly || freebsd || linux || netbsd || openbsd)

package filedriver

import (
	"fmt"
	"os"
	"runtime"

	"github.com/distlock/lock/driver"
)

// The driver needs flock(2) with BSD semantics (a lock per open file description,
// so two descriptors in one process exclude each other). Systems that only
// emulate it with fcntl locks (illumos, AIX) or lack it (Windows) are refused
// rather than given a lock that does not exclude.
const openFlags = os.O_RDWR | os.O_CREATE

const readFlags = os.O_RDONLY

var platformErr = fmt.Errorf("%w: the file driver needs flock(2), which %s does not provide", driver.ErrUnsupported, runtime.GOOS)

const (
	lockEx = 2
	lockSh = 1
)

func flockNB(*os.File, int) error { return platformErr }

func isSymlinkErr(error) bool { return false }
