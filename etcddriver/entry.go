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
//
// An entry is small on purpose: a Driver holding many locks keeps one per
// lock. It keeps no copy of what it can derive: the owner and user key are
// the request's, the range is a prefix of key, its times are offsets from the
// Driver's epoch, and the value it wrote is dropped once it holds (only an
// acquisition in progress compares it, and a held entry's delete compares the
// create revision instead).
type entry struct {
	req    *driver.Request
	value  string // what the acquisition writes as the key's value, keyValue(req); "" once held
	s      *session
	key    string // <prefix>/<escaped key>/[read/ or sem/<n>/]<lease hex>[_<n>]
	next   *entry // the next entry of the same user key (Driver.entries)
	snext  *entry // the next entry of the same session (session.first)
	sprev  *entry // the previous one
	rngLen int32  // key[:rngLen] is <prefix>/<escaped key>/
	index  int32  // n of the key's name; 0 for the plain lease name

	// Guarded by Driver.held.
	state     entryState
	uncertain bool          // a plain delete of key failed: it may yet be applied, so the name is never reused on s
	gone      goneState     // what the refresh watch saw of key, while covered
	watched   uint32        // the refresh watch's generation that covers key; 0 for none (refreshwatch.go)
	rev       int64         // create revision of key, the fencing token; 0 while unknown
	since     time.Duration // when the request that granted the lock was sent, after Driver.epoch
	paidUntil time.Duration // a held lock not refreshed by then (after Driver.epoch) is deleted
}

// rng is the lock's range, <prefix>/<escaped key>/.
func (e *entry) rng() string { return e.key[:e.rngLen] }

type entryState uint8

const (
	stateActive  entryState = iota // its etcd key exists or may exist; not the holder yet
	stateHeld                      // its etcd key has the lowest create revision
	stateRemoved                   // forgotten by the driver
)

// enterLocked registers a new entry for req on s, under the first key name of
// the lease that no other request of this driver uses (nor a name reserved
// after a release whose outcome is unknown).
func (d *Driver) enterLocked(s *session, req *driver.Request) *entry {
	index := d.freeIndexLocked(s, req.Key)
	key, rngLen := keyName(d.prefix, req, s.hex, index)
	e := &entry{req: req, value: keyValue(req.Label, req.Owner), s: s, key: key, rngLen: int32(rngLen), index: int32(index)}
	e.next = d.held.GetLocked(req.Key)
	_ = d.held.PutLocked(req.Key, e) // every caller checked OpenLocked under this lock
	e.snext = s.first
	if s.first != nil {
		s.first.sprev = e
	}
	s.first = e
	s.entries++
	return e
}

// freeIndexLocked is the lowest name index that no entry of s on key uses and
// that is not reserved on s. Almost always only index 0 is in use, or none:
// the first 64 indexes are counted in a bitmask, any further ones in a map
// made only when 64 requests of one lease wait on one key.
func (d *Driver) freeIndexLocked(s *session, key string) int {
	var (
		low  uint64
		more map[int]bool
	)
	mark := func(i int) {
		if i < 64 {
			low |= 1 << i
			return
		}
		if more == nil {
			more = map[int]bool{}
		}
		more[i] = true
	}
	for e := d.held.GetLocked(key); e != nil; e = e.next {
		if e.s == s {
			mark(int(e.index))
		}
	}
	for _, i := range s.reserved[key] {
		mark(int(i))
	}
	i := 0
	for (i < 64 && low&(1<<i) != 0) || (i >= 64 && more[i]) {
		i++
	}
	return i
}

// removeLocked forgets e and frees its key name.
func (d *Driver) removeLocked(e *entry) {
	if e.state == stateRemoved {
		return
	}
	e.state = stateRemoved
	key := e.req.Key
	for p, prev := d.held.GetLocked(key), (*entry)(nil); p != nil; prev, p = p, p.next {
		if p != e {
			continue
		}
		switch {
		case prev != nil:
			prev.next = e.next
		case e.next != nil:
			_ = d.held.PutLocked(key, e.next) // open: Close empties the table
		default:
			d.held.TakeLocked(key)
		}
		break
	}
	e.next = nil
	switch {
	case e.sprev != nil:
		e.sprev.snext = e.snext
	case e.s.first == e:
		e.s.first = e.snext
	}
	if e.snext != nil {
		e.snext.sprev = e.sprev
	}
	e.snext, e.sprev = nil, nil
	e.s.entries--
	if e.s.entries == 0 {
		e.s.idleSince = time.Now()
	}
	if e.uncertain && e.s.dead == nil {
		// A plain delete of this name may still be in flight: keep the name
		// out of use until the lease ends (endLocked frees it then).
		if e.s.reserved == nil {
			e.s.reserved = map[string][]int32{}
		}
		e.s.reserved[key] = append(e.s.reserved[key], e.index)
	}
}

// lookupLocked returns the entry of req, or nil.
func (d *Driver) lookupLocked(req *driver.Request) *entry {
	for e := d.held.GetLocked(req.Key); e != nil; e = e.next {
		if e.req.Owner == req.Owner {
			return e
		}
	}
	return nil
}

// eachLocked calls f for every entry of s; f may remove the entry. It walks
// s's own list, not every entry of the Driver: the session goroutine of each
// of many leases does this every keepalive (expiredLocked).
func (d *Driver) eachLocked(s *session, f func(e *entry)) {
	for e := s.first; e != nil; {
		next := e.snext
		f(e)
		e = next
	}
}
