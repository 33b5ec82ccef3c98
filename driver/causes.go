package driver

import "errors"

// Loss causes. A driver that learns a lock is gone says why where it can tell,
// by wrapping one of these (or ErrForceReleased) in the ErrNotHeld it returns
// from Refresh or passes to Request.Lost: Lock.Err and Do's context.Cause then
// match it through package lock's re-exports. A loss whose cause the driver
// cannot tell wraps none of them.
var (
	// ErrExpired: the lock's validity ran out without a confirmed refresh (its
	// TTL or lease passed, or its key vanished the way an expired key does).
	ErrExpired = errors.New("lock expired")

	// ErrTakenOver: another owner was found holding the lock on the backend.
	ErrTakenOver = errors.New("lock taken over by another owner")

	// ErrServerChanged: the backend server holding the lock restarted or was
	// replaced (failover), and the lock did not survive it.
	ErrServerChanged = errors.New("lock server restarted or replaced")

	// ErrSessionExpired: the session the lock was bound to (a connection, a
	// ZooKeeper session, an etcd lease) ended, and the lock with it.
	ErrSessionExpired = errors.New("lock session expired")
)
