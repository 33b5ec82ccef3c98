package conformance

import (
	"context"
	"time"

	"github.com/distlock/lock"
)

// LockSet is lockSet, for the self-tests' broken ways of taking sets.
type LockSet = lockSet

// BreakSets replaces how the set properties take a set, and the deadlock
// bound, for the self-tests; it is called once, in the child process that
// runs a broken variant.
func BreakSets(take func(ctx context.Context, lk *lock.Locker, keys []string, try bool) (LockSet, error), bound time.Duration) {
	takeSet, setDeadlockBound = take, bound
}
