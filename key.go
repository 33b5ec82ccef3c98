package lock

import (
	"fmt"
	"unicode/utf8"

	"github.com/distlock/lock/driver"
)

// MaxKeyLen is the longest key in bytes. Any non-empty valid UTF-8 string up to
// this length is a key, and distinct keys are distinct locks on every backend.
const MaxKeyLen = driver.MaxKeyLen

func validateKey(key string) error {
	switch {
	case key == "":
		return fmt.Errorf("%w: empty", ErrInvalidKey)
	case len(key) > MaxKeyLen:
		return fmt.Errorf("%w: %d bytes, longer than %d", ErrInvalidKey, len(key), MaxKeyLen)
	case !utf8.ValidString(key):
		return fmt.Errorf("%w: not valid UTF-8", ErrInvalidKey)
	}
	return nil
}
