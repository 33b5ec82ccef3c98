//go:build !linux

package staleholder

import (
	"syscall"
	"testing"
	"time"
)

// killedWithParent: only Linux kills a child with its parent (Pdeathsig);
// elsewhere a holder outlives a test binary that died.
func killedWithParent() *syscall.SysProcAttr { return nil }

// waitStopped cannot observe the stop without /proc: it returns at once.
func waitStopped(testing.TB, int) time.Time { return time.Now() }
