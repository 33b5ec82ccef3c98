package lock

import (
	"fmt"
	"strings"
)

// WithRequired makes the capabilities in caps (its true boolean fields:
// Fencing, Expiring, Notify, FIFO, Shared, WriterPreference, Permits) a
// condition of using the Locker: Open fails with an error matching
// ErrUnsupported that names each one the URL's driver lacks, for example
// "fencing" on redlock:// or redis://...?fencing=false, so a program that
// needs fencing tokens cannot start on a backend that has none. New cannot
// fail, so given to New (or to one call) it makes every Acquire, TryAcquire,
// Do and Campaign on a driver that lacks one of them fail the same way,
// before the backend is asked. caps's MinTTL and MaxTTL are not requirements;
// setting them is an error matching ErrInvalidArgument.
func WithRequired(caps Capabilities) Option {
	return func(o *options) {
		if caps.MinTTL != 0 || caps.MaxTTL != 0 {
			o.fail(fmt.Errorf("%w: WithRequired takes the boolean capabilities; MinTTL and MaxTTL are the backend's limits, not requirements", ErrInvalidArgument))
			return
		}
		o.required |= capsOf(caps)
	}
}

// capSet is a set of the boolean capabilities, one bit each in capNames's
// order, small enough to sit in the padding of the options every call copies.
type capSet uint8

// capNames names the capabilities in the order of their bits, as errors print them.
var capNames = [...]string{"fencing", "expiring", "notify", "fifo", "shared", "writer-preference", "permits"}

func capsOf(c Capabilities) capSet {
	var s capSet
	for bit, has := range [...]bool{c.Fencing, c.Expiring, c.Notify, c.FIFO, c.Shared, c.WriterPreference, c.Permits} {
		if has {
			s |= 1 << bit
		}
	}
	return s
}

// missingCapabilities returns the error for the capabilities in required that
// have lacks, nil if it has them all.
func missingCapabilities(required capSet, have Capabilities) error {
	missing := required &^ capsOf(have)
	if missing == 0 {
		return nil
	}
	var names []string
	for bit, name := range capNames {
		if missing&(1<<bit) != 0 {
			names = append(names, name)
		}
	}
	return fmt.Errorf("%w: this backend lacks the required capabilities: %s", ErrUnsupported, strings.Join(names, ", "))
}
