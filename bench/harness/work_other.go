//go:build !linux

package harness

import "time"

// work is a holder's work: d of waiting (see work_linux.go).
func work(d time.Duration) { time.Sleep(d) }
