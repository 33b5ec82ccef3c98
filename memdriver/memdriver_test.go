package memdriver_test

import (
	"context"
	"testing"

	"github.com/distlock/lock/internal/leakcheck"

	"github.com/distlock/lock"
	"github.com/distlock/lock/conformance"
	"github.com/distlock/lock/driver"
	"github.com/distlock/lock/memdriver"
)

func TestMain(m *testing.M) { leakcheck.VerifyTestMain(m) }

func TestConformance(t *testing.T) {
	conformance.Run(t, conformance.Harness{
		NewDriver: func(context.Context) (driver.Driver, error) { return memdriver.New(t.Name()), nil },
		Sever: func(_ context.Context, d driver.Driver) error {
			d.(*memdriver.Driver).Sever()
			return nil
		},
		SeverCause: lock.ErrSessionExpired,
	})
}

// The TTL through the portable layer, whatever its value.
func FuzzTTL(f *testing.F) {
	conformance.FuzzTTL(f, conformance.Harness{
		NewDriver: func(context.Context) (driver.Driver, error) { return memdriver.New("fuzz-ttl"), nil },
		Sever:     func(_ context.Context, d driver.Driver) error { d.(*memdriver.Driver).Sever(); return nil },
	})
}

// Sets of keys (conformance.BenchmarkSets): memdriver takes free keys in one
// step (driver.SetAcquirer), the unit the server drivers' figures compare to.
func BenchmarkSets(b *testing.B) {
	conformance.BenchmarkSets(b, conformance.Harness{
		NewDriver: func(context.Context) (driver.Driver, error) { return memdriver.New(b.Name()), nil },
	})
}
