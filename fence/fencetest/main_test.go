package fencetest

import (
	"os"
	"testing"

	"github.com/distlock/lock/internal/leakcheck"
	"github.com/distlock/lock/internal/testserver"
)

func TestMain(m *testing.M) {
	// The test binary doubles as the paused holder process (paused_test.go).
	if os.Getenv(holderDirEnv) != "" {
		os.Exit(runHolder())
	}
	leakcheck.VerifyTestMain(testserver.Main(m))
}
