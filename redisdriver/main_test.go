package redisdriver

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/distlock/lock/conformance"
	"github.com/distlock/lock/internal/testserver"
)

func TestMain(m *testing.M) {
	conformance.HolderMain() // the holder processes of the fault properties
	goleak.VerifyTestMain(testserver.Main(m))
}
