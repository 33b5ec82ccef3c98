package pgadvisory_test

import (
	"os"
	"testing"

	"github.com/distlock/lock/internal/leakcheck"

	"github.com/distlock/lock/conformance"
	"github.com/distlock/lock/internal/testserver"
)

func TestMain(m *testing.M) {
	conformance.HolderMain() // the holder processes of the fault properties
	if os.Getenv(sqlHolderDSNEnv) != "" {
		os.Exit(runSQLHolder()) // the paused holder of sqlfence_test.go
	}
	leakcheck.VerifyTestMain(testserver.Main(m))
}
