package driver

import (
	"errors"
	"strings"
	"testing"
)

// A set is distinct keys in byte order; anything else is ErrInvalidArgument
// naming the driver and the keys out of place.
func TestCheckSetAcceptsOnlyDistinctKeysInByteOrder(t *testing.T) {
	set := func(keys ...string) []*Request {
		reqs := make([]*Request, len(keys))
		for i, k := range keys {
			reqs[i] = &Request{Key: k, Owner: "o" + k}
		}
		return reqs
	}
	for _, ok := range [][]string{{"a"}, {"a", "b", "c"}, {"B", "a", "é"}} {
		if err := CheckSet("d", set(ok...)); err != nil {
			t.Errorf("CheckSet(%q) = %v, want nil", ok, err)
		}
	}
	for _, bad := range [][]string{{"b", "a"}, {"a", "a"}, {"a", "c", "b"}} {
		err := CheckSet("somedriver", set(bad...))
		if !errors.Is(err, ErrInvalidArgument) || !strings.Contains(err.Error(), "somedriver") {
			t.Errorf("CheckSet(%q) = %v, want ErrInvalidArgument naming the driver", bad, err)
		}
	}
}
