package pgadvisory_test

import (
	"testing"

	"github.com/distlock/lock/internal/leakcheck"

	"github.com/distlock/lock/conformance"
	"github.com/distlock/lock/internal/staleholder"
	"github.com/distlock/lock/internal/testserver"
)

func TestMain(m *testing.M) {
	conformance.HolderMain()      // the holder processes of the fault properties
	staleholder.Main(holderWrite) // the paused holder of sqlfence_linux_test.go
	leakcheck.VerifyTestMain(testserver.Main(m))
}
