package memdriver

import (
	"fmt"
	"math"
	"sync"
	"time"

	"github.com/distlock/lock/driver"
)

// store is the shared state of all clients of one name, playing the server.
type store struct {
	mu       sync.Mutex
	keys     map[string]*keyState                  // only keys with a holder or a waiter
	counters map[string]uint64                     // fencing counters, kept for the life of the store
	watchers map[string]map[chan struct{}]struct{} // Watch channels by key
	// free holds states of keys that were forgotten, for reuse by keys
	// taken later with their maps' memory: a key taken and released over and
	// over costs no new state. Only the store ever sees them.
	free []*keyState
}

// maxFree bounds the states kept for reuse.
const maxFree = 64

func newStore() *store {
	return &store{keys: map[string]*keyState{}, counters: map[string]uint64{}, watchers: map[string]map[chan struct{}]struct{}{}}
}

// keyState is one key's holders and its queue of waiting Acquire calls.
type keyState struct {
	// permits is the shape every holder and waiter of the key asked for:
	// 0 for the read-write lock (exclusive and shared holds), n ≥ 2 for a
	// semaphore of n permits. It is forgotten when the key has no one left.
	permits int
	holders holderSet // by owner
	queue   []*waiter // in arrival order
	// wake is closed whenever a holder or waiter leaves or is granted: every
	// waiter then looks again at its turn. It is made by the first waiter
	// that needs it (nil until then, and after each close), so that a key
	// nobody waits for costs no channel per change.
	wake chan struct{}
}

// moment is a time as the nanoseconds since epoch, by the monotonic clock:
// a holder keeps two, and a moment is a third of the size of a time.Time.
type moment int64

// epoch is the origin of moments.
var epoch = time.Now()

func at(t time.Time) moment { return moment(t.Sub(epoch)) }

func (m moment) time() time.Time { return epoch.Add(time.Duration(m)) }

// after is m plus d, saturating rather than overflowing.
func (m moment) after(d time.Duration) moment {
	if r := m + moment(d); r >= m {
		return r
	}
	return math.MaxInt64
}

type holder struct {
	token   uint64
	shared  bool
	since   moment
	expires moment
	label   string
	client  *Driver
	lost    driver.LossReporter // the request's Lost
}

type waiter struct {
	owner  string
	shared bool
}

// state returns key k's state with its expired holders dropped, creating it
// for req when there is none. A request of another shape than the key's users
// (another number of permits, a semaphore against a lock) is ErrInvalidArgument.
func (s *store) state(k string, req *driver.Request, now time.Time) (*keyState, error) {
	ks := s.keys[k]
	if ks == nil {
		if n := len(s.free); n > 0 {
			ks, s.free = s.free[n-1], s.free[:n-1]
			ks.permits = req.Permits
		} else {
			ks = &keyState{permits: req.Permits}
		}
		s.keys[k] = ks
		return ks, nil
	}
	s.expire(k, ks, now)
	if s.keys[k] == nil { // everyone had expired: the key starts afresh
		return s.state(k, req, now)
	}
	if ks.permits != req.Permits {
		return nil, fmt.Errorf("%w: memdriver: key %q is in use %s, asked %s", driver.ErrInvalidArgument, req.Key, shape(ks.permits), shape(req.Permits))
	}
	return ks, nil
}

func shape(permits int) string {
	if permits == 0 {
		return "as a lock"
	}
	return fmt.Sprintf("as a semaphore of %d permits", permits)
}

// expire drops the holders of k whose lease has ended.
func (s *store) expire(k string, ks *keyState, now time.Time) {
	n := at(now)
	if ks.holders.deleteFunc(func(_ string, h *holder) bool { return n >= h.expires }) > 0 {
		s.changed(k, ks)
	}
}

// changed wakes k's waiters and watchers, and forgets k once no one holds or
// waits.
func (s *store) changed(k string, ks *keyState) {
	if ks.wake != nil {
		close(ks.wake)
		ks.wake = nil
	}
	if ks.holders.len() == 0 && len(ks.queue) == 0 {
		// Nobody holds or waits, so nobody keeps ks (a waiter keeps it only
		// while in the queue): it can serve another key.
		delete(s.keys, k)
		if len(s.free) < maxFree {
			ks.queue = ks.queue[:0]
			s.free = append(s.free, ks)
		}
	}
	s.notify(k)
}

// notify signals k's watchers without blocking: one pending signal each.
func (s *store) notify(k string) {
	if len(s.watchers) == 0 {
		return // nobody watches any key: no lookup
	}
	for c := range s.watchers[k] {
		select {
		case c <- struct{}{}:
		default:
		}
	}
}

// mayTake reports whether a request of the key's shape, standing at place pos
// of the queue (len(queue) for a newcomer), may take the key now. This is the
// queueing rule stated in the package doc:
//
//   - exclusive: no holder, and no waiter ahead of it;
//   - shared: no exclusive holder, and no exclusive waiter ahead of it;
//   - a permit: fewer holders than permits, and no waiter ahead of it.
func (ks *keyState) mayTake(shared bool, pos int) bool {
	switch {
	case ks.permits > 0:
		return ks.holders.len() < ks.permits && pos == 0
	case shared:
		exclusive := false
		ks.holders.each(func(_ string, h *holder) { exclusive = exclusive || !h.shared })
		if exclusive {
			return false
		}
		for _, w := range ks.queue[:pos] {
			if !w.shared {
				return false
			}
		}
		return true
	default:
		return ks.holders.len() == 0 && pos == 0
	}
}

// grant makes req a holder of k, with the next token.
func (s *store) grant(k string, ks *keyState, req *driver.Request, d *Driver, now time.Time) driver.Grant {
	s.counters[k]++
	token := s.counters[k]
	ks.holders.put(req.Owner, holder{token: token, shared: req.Shared, since: at(now), expires: at(now).after(req.TTL), label: req.Label, client: d, lost: req.Lost})
	s.notify(k)
	return driver.Grant{Token: token, Start: now}
}

// place returns owner's place in the queue, or -1.
func (ks *keyState) place(owner string) int {
	for i, w := range ks.queue {
		if w.owner == owner {
			return i
		}
	}
	return -1
}

// leave takes the waiter at place i out of the queue.
func (s *store) leave(k string, ks *keyState, i int) {
	ks.queue = append(ks.queue[:i], ks.queue[i+1:]...)
	s.changed(k, ks)
}

// nextExpiry is when the first of k's holders' leases ends; zero without holders.
func (ks *keyState) nextExpiry() time.Time {
	var first moment
	some := false
	ks.holders.each(func(_ string, h *holder) {
		if !some || h.expires < first {
			first, some = h.expires, true
		}
	})
	if !some {
		return time.Time{}
	}
	return first.time()
}
