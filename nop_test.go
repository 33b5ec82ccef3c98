package lock_test

import (
	"context"
	"unicode/utf8"

	"github.com/distlock/lock/driver"
)

// nopDriver grants every lock; it serves tests of the portable layer's own
// validation, which must reject bad input before any driver call.
type nopDriver struct{}

func (nopDriver) Capabilities() driver.Capabilities { return driver.Capabilities{Expiring: true} }
func (nopDriver) TryAcquire(context.Context, *driver.Request) (driver.Grant, error) {
	return driver.Grant{}, nil
}
func (nopDriver) Refresh(context.Context, *driver.Request) error { return nil }
func (nopDriver) Release(context.Context, *driver.Request) error { return nil }
func (nopDriver) Close() error                                   { return nil }

func utf8Valid(s string) bool { return utf8.ValidString(s) }
