package run

import (
	"fmt"
	"os"
	"testing"

	_ "github.com/distlock/lock/filedriver"
	"go.uber.org/goleak"
)

// TestMain doubles as a soak client process: Processes runs this binary with
// -client.
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == "-client" {
		if err := ClientMain(os.Args[2:], os.Stdout); err != nil {
			fmt.Fprintln(os.Stderr, "client:", err)
			os.Exit(2)
		}
		os.Exit(0)
	}
	goleak.VerifyTestMain(m)
}
