package redlockdriver

import (
	"context"
	"testing"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/distlock/lock/conformance"
	"github.com/distlock/lock/internal/testserver"
)

func TestMain(m *testing.M) {
	redis.SetLogger(quiet{}) // the fault tests stop and pause servers on purpose
	conformance.HolderMain() // the holder processes of the fault properties
	goleak.VerifyTestMain(testserver.Main(m))
}

// quiet drops go-redis's log lines.
type quiet struct{}

func (quiet) Printf(context.Context, string, ...any) {}
