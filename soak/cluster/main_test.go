package cluster

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/distlock/lock/internal/testserver"
)

// The servers the tests start are stopped before goleak looks for goroutines
// left behind.
func TestMain(m *testing.M) { goleak.VerifyTestMain(testserver.Main(m)) }
