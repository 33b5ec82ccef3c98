package fence_test

import (
	"os"
	"testing"

	"github.com/distlock/lock/internal/leakcheck"
)

func TestMain(m *testing.M) {
	// The test binary doubles as the paused holder process of the file
	// backend's demonstration (kleppmann_file_test.go).
	if os.Getenv(holderDirEnv) != "" {
		os.Exit(runHolder())
	}
	leakcheck.VerifyTestMain(m)
}
