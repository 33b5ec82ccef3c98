package testchild

import (
	"fmt"
	"os"
	"strings"
	"syscall"
	"time"
)

// killedWithParent has the kernel kill the child when the thread that
// started it ends (Pdeathsig).
func killedWithParent() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}

// waitStopped waits until /proc shows pid stopped, within bound, and
// returns when.
func waitStopped(pid int, bound time.Duration) (time.Time, error) {
	stat := fmt.Sprintf("/proc/%d/stat", pid)
	deadline := time.Now().Add(bound)
	for {
		b, err := os.ReadFile(stat)
		if err != nil {
			return time.Time{}, err
		}
		// The state follows the parenthesised command name.
		if s := string(b); strings.HasPrefix(strings.TrimSpace(s[strings.LastIndexByte(s, ')')+1:]), "T") {
			return time.Now(), nil
		}
		if time.Now().After(deadline) {
			return time.Time{}, fmt.Errorf("testchild: process %d did not stop within %v of SIGSTOP", pid, bound)
		}
		time.Sleep(5 * time.Millisecond) // polling the kernel's state: there is nothing to wait on
	}
}
