package filedriver

import (
	"os"
	"testing"

	"github.com/distlock/lock/internal/leakcheck"

	"github.com/distlock/lock/conformance"
)

func TestMain(m *testing.M) {
	// The test binary doubles as the holder process of the crash tests
	// (process_test.go), which re-execute it with childDirEnv set.
	conformance.HolderMain() // the holder processes of the fault properties
	if os.Getenv(childDirEnv) != "" {
		os.Exit(runChild())
	}
	leakcheck.VerifyTestMain(m)
}
