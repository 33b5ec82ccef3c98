package fence_test

import (
	"testing"

	"github.com/distlock/lock/internal/leakcheck"
	"github.com/distlock/lock/internal/staleholder"
)

func TestMain(m *testing.M) {
	// The test binary doubles as the paused holder process of the file
	// backend's demonstration (kleppmann_file_test.go).
	staleholder.Main(holderPut)
	leakcheck.VerifyTestMain(m)
}
