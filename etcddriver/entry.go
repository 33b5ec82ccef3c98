package etcddriver

import (
	"time"

	"github.com/distlock/lock/driver"
)

// An entry is one request's place: a key in etcd, or a place in the in-process
// queue in front of it.
//
// The etcd key of a lock is named by the lease, as concurrency.Mutex names it, so
// two requests of this Driver on the same key and lease would share one etcd key,
// and concurrency.Mutex with one shared session indeed lets several goroutines
// "hold" at once. Here the requests of one lease on one key form an in-process
// queue (a slot): only its head, the active entry, has an etcd key; the others
// wait for it to leave and then take their own turn in etcd, behind whoever queued
// there meanwhile. The layout stays exactly that of etcd's tools.
type entry struct {
	req   *driver.Request
	owner string
	s     *session
	key   string // <prefix>/<escaped key>/<lease hex>
	rng   string // <prefix>/<escaped key>/
	slot  *slot

	// Guarded by Driver.mu.
	state     entryState
	rev       int64         // create revision of key, the fencing token; 0 while unknown
	ready     chan struct{} // closed when a queued entry becomes active or is removed
	paidUntil time.Time     // a held lock not refreshed by then is deleted
}

type entryState int

const (
	stateQueued  entryState = iota // waiting in-process behind the slot's active entry
	stateActive                    // its etcd key exists or may exist; not the holder yet
	stateHeld                      // its etcd key has the lowest create revision
	stateRemoved                   // forgotten by the driver
)

type ownerKey struct{ key, owner string }

type slotKey struct {
	s   *session
	key string
}

// slot is the in-process queue of one lease and user key.
type slot struct {
	sk     slotKey
	active *entry
	queue  []*entry
}

// enterLocked registers a new entry for req on s: active if the slot is free,
// queued otherwise.
func (d *Driver) enterLocked(s *session, req *driver.Request) *entry {
	sk := slotKey{s, req.Key}
	sl := d.slots[sk]
	if sl == nil {
		sl = &slot{sk: sk}
		d.slots[sk] = sl
	}
	rng := rangePrefix(d.prefix, req.Key)
	e := &entry{req: req, owner: req.Owner, s: s, key: rng + s.hex, rng: rng, slot: sl, ready: make(chan struct{})}
	if sl.active == nil {
		sl.active = e
		e.state = stateActive
		close(e.ready)
	} else {
		e.state = stateQueued
		sl.queue = append(sl.queue, e)
	}
	d.entries[ownerKey{req.Key, req.Owner}] = e
	s.members[e] = struct{}{}
	return e
}

// removeLocked forgets e and, if it was its slot's active entry, makes the next
// queued entry active.
func (d *Driver) removeLocked(e *entry) {
	if e.state == stateRemoved {
		return
	}
	wasQueued := e.state == stateQueued
	e.state = stateRemoved
	if k := (ownerKey{e.req.Key, e.owner}); d.entries[k] == e {
		delete(d.entries, k)
	}
	delete(e.s.members, e)
	if len(e.s.members) == 0 {
		e.s.idleSince = time.Now()
	}
	sl := e.slot
	if wasQueued {
		close(e.ready)
		for i, q := range sl.queue {
			if q == e {
				sl.queue = append(sl.queue[:i], sl.queue[i+1:]...)
				break
			}
		}
	} else if sl.active == e {
		sl.active = nil
		if len(sl.queue) > 0 {
			next := sl.queue[0]
			sl.queue[0] = nil
			sl.queue = sl.queue[1:]
			sl.active = next
			next.state = stateActive
			close(next.ready)
		}
	}
	if sl.active == nil && len(sl.queue) == 0 && d.slots[sl.sk] == sl {
		delete(d.slots, sl.sk)
	}
}

// lookupLocked returns the entry of req, or nil.
func (d *Driver) lookupLocked(req *driver.Request) *entry {
	return d.entries[ownerKey{req.Key, req.Owner}]
}
