//go:build !linux

package filedriver

// Without inotify a waiter cannot be woken by the kernel, so the driver does not
// implement driver.Acquirer here and the portable layer polls TryAcquire with
// backoff.
const notifySupported = false

type notifier struct{}

func (notifier) close() {}
