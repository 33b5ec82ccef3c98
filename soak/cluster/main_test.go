package cluster_test

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/distlock/lock/internal/testserver"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(testserver.Main(m)) }
