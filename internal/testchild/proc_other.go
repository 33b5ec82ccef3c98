//go:build !linux

package testchild

import (
	"syscall"
	"time"
)

// killedWithParent: only Linux kills a child with its parent (Pdeathsig);
// elsewhere a child outlives a test binary that died.
func killedWithParent() *syscall.SysProcAttr { return nil }

// waitStopped cannot see the stop without /proc: it returns at once.
func waitStopped(int, time.Duration) (time.Time, error) { return time.Now(), nil }
