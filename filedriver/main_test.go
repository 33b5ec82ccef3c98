package filedriver

import (
	"os"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	// The test binary doubles as the holder process of the crash tests
	// (process_test.go), which re-execute it with childDirEnv set.
	if os.Getenv(childDirEnv) != "" {
		os.Exit(runChild())
	}
	goleak.VerifyTestMain(m)
}
