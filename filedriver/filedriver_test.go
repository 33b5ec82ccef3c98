package filedriver_test

import (
	"context"
	"testing"

	"github.com/distlock/lock"
	"github.com/distlock/lock/conformance"
	"github.com/distlock/lock/driver"
	"github.com/distlock/lock/filedriver"
)

func TestConformance(t *testing.T) {
	dir := t.TempDir() // one lock directory, as processes of one host would share
	conformance.Run(t, conformance.Harness{
		// A gap, kept visible here until closed: shared flocks on the lock file
		// and the semaphore's slot files ignore each other.
		MixedShapes: "a shared lock and a semaphore's permits on one key are granted together",
		// Each client is a Driver of its own: its own descriptors, its own flocks,
		// as a separate process would have.
		NewDriver: func(context.Context) (driver.Driver, error) { return filedriver.New(dir) },
		// Closing a client's descriptors is what the kernel does when its process
		// dies.
		Sever: func(_ context.Context, d driver.Driver) error {
			d.(*filedriver.Driver).Sever()
			return nil
		},
		SeverCause: lock.ErrSessionExpired,
		// Holder processes lock the same directory: frozen, the kernel keeps
		// their flocks; killed, it frees them at once.
		URL: "file://" + dir,
	})
}

// Sets of keys (conformance.BenchmarkSets): the file driver takes them one at
// a time (a flock is one file's).
func BenchmarkSets(b *testing.B) {
	dir := b.TempDir()
	conformance.BenchmarkSets(b, conformance.Harness{
		NewDriver: func(context.Context) (driver.Driver, error) { return filedriver.New(dir) },
	})
}
