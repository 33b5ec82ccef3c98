package etcddriver

import (
	"time"

	"github.com/distlock/lock/driver"
)

// An entry is one request's key in etcd, waiting or holding.
//
// etcd's own tools name a contender's key by its lease alone, so with one shared
// session concurrency.Mutex lets several goroutines "hold" at once: they all own
// the same key. Here the first request of a lease on a key gets exactly that name,
// <prefix>/<escaped key>/<lease hex>, and each further request of the same lease
// on the same key while the first is there gets <lease hex>_<n>: its own place in
// etcd's queue, in the same range, where etcd's tools count it as a contender like
// any other key. Every request queues in etcd in arrival order, so waiters of one
// process are served in turn with everyone else's, and each waiter's watch is in
// place long before its turn comes.
type entry struct {
	req   *driver.Request
	owner string
	value string // what the acquisition writes as the key's value: keyValue(req)
	s     *session
	key   string // <prefix>/<escaped key>/[read/ or sem/<n>/]<lease hex>[_<n>]
	rng   string // <prefix>/<escaped key>/
	name  nameKey
	index int // n of the key's name; 0 for the plain lease name

	// Guarded by Driver.mu.
	state     entryState
	rev       int64     // create revision of key, the fencing token; 0 while unknown
	since     time.Time // when the request that granted the lock was sent
	paidUntil time.Time // a held lock not refreshed by then is deleted
	uncertain bool      // a plain delete of key failed: it may yet be applied, so the name is never reused on s
}

type entryState int

const (
	stateActive  entryState = iota // its etcd key exists or may exist; not the holder yet
	stateHeld                      // its etcd key has the lowest create revision
	stateRemoved                   // forgotten by the driver
)

type ownerKey struct{ key, owner string }

// nameKey identifies the names in use for one lease and user key.
type nameKey struct {
	s   *session
	key string
}

// nameSet is the set of key-name indexes in use for one lease and user key:
// the first 64 in a bitmask kept in the map's own slot (almost always only
// index 0 is in use, and a lock then costs no allocation here), any further
// ones in a map made only when 64 requests of one lease wait on one key.
type nameSet struct {
	low  uint64
	more map[int]bool
}

func (n *nameSet) has(i int) bool {
	if i < 64 {
		return n.low&(1<<i) != 0
	}
	return n.more[i]
}

func (n *nameSet) add(i int) {
	if i < 64 {
		n.low |= 1 << i
		return
	}
	if n.more == nil {
		n.more = map[int]bool{}
	}
	n.more[i] = true
}

func (n *nameSet) remove(i int) {
	if i < 64 {
		n.low &^= 1 << i
		return
	}
	delete(n.more, i)
}

func (n *nameSet) empty() bool { return n.low == 0 && len(n.more) == 0 }

// enterLocked registers a new entry for req on s, under the first key name of
// the lease that no other request of this driver uses.
func (d *Driver) enterLocked(s *session, req *driver.Request) *entry {
	nk := nameKey{s, req.Key}
	used := d.names[nk]
	index := 0
	for used.has(index) {
		index++
	}
	used.add(index)
	d.names[nk] = used
	key, rngLen := keyName(d.prefix, req, s.hex, index)
	e := &entry{req: req, owner: req.Owner, value: keyValue(req.Label, req.Owner), s: s, key: key, rng: key[:rngLen], name: nk, index: index}
	d.entries[ownerKey{req.Key, req.Owner}] = e
	s.members[e] = struct{}{}
	return e
}

// removeLocked forgets e and frees its key name.
func (d *Driver) removeLocked(e *entry) {
	if e.state == stateRemoved {
		return
	}
	e.state = stateRemoved
	if k := (ownerKey{e.req.Key, e.owner}); d.entries[k] == e {
		delete(d.entries, k)
	}
	delete(e.s.members, e)
	if len(e.s.members) == 0 {
		e.s.idleSince = time.Now()
	}
	if e.uncertain && e.s.dead == nil {
		// A plain delete of this name may still be in flight: keep the name
		// out of use until the lease ends (endLocked frees it then).
		e.s.reserved = append(e.s.reserved, e.name)
		return
	}
	if used, ok := d.names[e.name]; ok {
		used.remove(e.index)
		if used.empty() {
			delete(d.names, e.name)
		} else {
			d.names[e.name] = used
		}
	}
}

// lookupLocked returns the entry of req, or nil.
func (d *Driver) lookupLocked(req *driver.Request) *entry {
	return d.entries[ownerKey{req.Key, req.Owner}]
}
