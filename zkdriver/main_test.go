package zkdriver_test

import (
	"testing"

	"github.com/distlock/lock/internal/leakcheck"

	"github.com/distlock/lock/conformance"
	"github.com/distlock/lock/internal/staleholder"
	"github.com/distlock/lock/internal/testserver"
)

func TestMain(m *testing.M) {
	staleholder.Main(httpFencedWrite) // the paused-holder test's holder process
	conformance.HolderMain()          // the holder processes of the fault properties
	leakcheck.VerifyTestMain(testserver.Main(m))
}
