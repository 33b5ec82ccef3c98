package redisdriver

import (
	"testing"

	"github.com/distlock/lock/internal/leakcheck"

	"github.com/distlock/lock/conformance"
	"github.com/distlock/lock/internal/testserver"
)

func TestMain(m *testing.M) {
	conformance.HolderMain() // the holder processes of the fault properties
	leakcheck.VerifyTestMain(testserver.Main(m))
}
