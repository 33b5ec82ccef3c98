package kit

import (
	"testing"

	"github.com/distlock/lock/internal/leakcheck"
)

func TestMain(m *testing.M) { leakcheck.VerifyTestMain(m) }
