package driver_test

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"syscall"
	"testing"

	"github.com/distlock/lock/driver"
)

func TestUnreachableTellsNetworkFailuresFromConfiguration(t *testing.T) {
	for _, c := range []struct {
		err  error
		want bool
	}{
		{&net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}, true},
		{fmt.Errorf("read: %w", syscall.ECONNRESET), true},
		{fmt.Errorf("reading the reply: %w", io.EOF), true},
		{os.ErrDeadlineExceeded, true},
		{net.ErrClosed, true},
		{&net.OpError{Op: "dial", Net: "tcp", Err: &net.DNSError{Err: "timeout", Name: "db", IsTimeout: true}}, true},
		{&net.OpError{Op: "dial", Net: "tcp", Err: &net.DNSError{Err: "no such host", Name: "db", IsNotFound: true}}, false},
		{errors.New("WRONGPASS invalid username-password pair"), false},
		{nil, false},
	} {
		if got := driver.Unreachable(c.err); got != c.want {
			t.Errorf("Unreachable(%v) = %v, want %v", c.err, got, c.want)
		}
	}
}
