package staleholder

import (
	"fmt"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"
)

// killedWithParent has the kernel kill the holder if the test binary dies
// first (a frozen holder could not notice). Pdeathsig follows the starting
// thread, so the starting goroutine keeps its thread until the holder has
// exited.
func killedWithParent() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}

// waitStopped waits until /proc shows pid stopped, and returns when.
func waitStopped(t testing.TB, pid int) time.Time {
	t.Helper()
	stat := fmt.Sprintf("/proc/%d/stat", pid)
	deadline := time.Now().Add(30 * time.Second)
	for {
		b, err := os.ReadFile(stat)
		if err != nil {
			t.Fatalf("freezing the holder process: %v", err)
		}
		// The state follows the parenthesised command name.
		if s := string(b); strings.HasPrefix(strings.TrimSpace(s[strings.LastIndexByte(s, ')')+1:]), "T") {
			return time.Now()
		}
		if time.Now().After(deadline) {
			t.Fatalf("the holder process did not stop within 30s of SIGSTOP")
		}
		time.Sleep(5 * time.Millisecond) // polling the kernel's state: there is nothing to wait on
	}
}
