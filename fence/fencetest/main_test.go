package fencetest

import (
	"testing"

	"github.com/distlock/lock/internal/leakcheck"
	"github.com/distlock/lock/internal/staleholder"
	"github.com/distlock/lock/internal/testserver"
)

func TestMain(m *testing.M) {
	// The test binary doubles as the paused holder process (paused_test.go).
	staleholder.Main(holderWrite)
	leakcheck.VerifyTestMain(testserver.Main(m))
}
