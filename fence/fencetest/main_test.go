package fencetest

import (
	"testing"

	"github.com/distlock/lock/internal/leakcheck"
	"github.com/distlock/lock/internal/testserver"
)

func TestMain(m *testing.M) { leakcheck.VerifyTestMain(testserver.Main(m)) }
