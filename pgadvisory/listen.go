package pgadvisory

// Waking permit waiters: a permit request that waits is queued in the server
// on one slot, which grants it that slot when it is given back; a permit given
// back on any other slot and left free (nobody queued on it) is announced by
// the releasing statement itself (pg_notify on permitChannel, the payload the
// slot's id), and a session of the Driver's that LISTENs on the channel tells
// one waiter of another slot, the earliest, which tries the announced slot
// while it stays queued (see permitRound). Frees that announce nothing (a
// holder's session ended, an SQL client unlocked a slot) are found by the
// waiters' rescan, every permitRescanListening.

import (
	"cmp"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// permitChannel is the LISTEN/NOTIFY channel of permits given back, in the
// database the driver locks in.
const permitChannel = "distlock_permits"

// permitRescanListening is how often a waiting permit request tries every
// slot again while the Driver's listening session runs: frees that are not
// announced are found within it.
const permitRescanListening = time.Second

// listenRetry is the pause before a listening session that ended is replaced
// while the Driver holds locks that may be evicted (holders on).
const listenRetry = 500 * time.Millisecond

// permitBell is one waiting permit request's interest in some slots.
type permitBell struct {
	seq   uint64     // the order of the waits: the earliest is told first
	freed chan int64 // a slot announced free (buffered: one at a time)
	once  sync.Once
	ch    chan struct{} // closed when announcements stop (the listener ended)
	ids   []int64
}

func (b *permitBell) ring() { b.once.Do(func() { close(b.ch) }) }

// announce tells b that slot id was given back and left free, unless b has
// an announcement it has not taken yet (it is trying a slot).
func (b *permitBell) announce(id int64) bool {
	select {
	case b.freed <- id:
		return true
	default:
		return false
	}
}

// permitListener is the Driver's listening session, started by the first
// permit request that waits and ended by Close or by a failure (the next
// waiting request starts another).
type permitListener struct {
	ready chan struct{} // closed once LISTEN is in force
	pid   atomic.Uint32 // the listening session's backend pid, once connected
	heard atomic.Int64  // announcements heard (for tests)
	last  atomic.Int64  // the slot id of the last one (for tests)
	bells map[int64]map[*permitBell]struct{}
}

// permitBellFor registers interest in ids and returns the bell, and whether
// announcements reach it (the listening session is in force): if not, the
// caller rescans every permitRescan. Call unring when done. Bells are told of
// announcements in the order they were made.
func (d *Driver) permitBellFor(ids []int64) (b *permitBell, listening bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.bellSeq++
	b = &permitBell{seq: d.bellSeq, freed: make(chan int64, 1), ch: make(chan struct{}), ids: ids}
	if d.closed {
		return b, false
	}
	l := d.startListenerLocked()
	if l == nil {
		return b, false
	}
	for _, id := range ids {
		m := l.bells[id]
		if m == nil {
			m = map[*permitBell]struct{}{}
			l.bells[id] = m
		}
		m[b] = struct{}{}
	}
	select {
	case <-l.ready:
		return b, true
	default:
		return b, false
	}
}

// startListenerLocked returns the listening session, starting it if there is
// none; nil after Close. d.mu is held.
func (d *Driver) startListenerLocked() *permitListener {
	if d.listener == nil {
		l := &permitListener{ready: make(chan struct{}), bells: map[int64]map[*permitBell]struct{}{}}
		if d.closed || !d.calls.Go(func() { d.listen(l) }) {
			return nil
		}
		d.listener = l
	}
	return d.listener
}

// unring drops b's interest. An announcement b was given but did not take
// (its request took a permit, or gave up, first) is passed on to the
// earliest other waiter of the slot, who would otherwise not hear of it.
func (d *Driver) unring(b *permitBell) {
	d.mu.Lock()
	defer d.mu.Unlock()
	l := d.listener
	if l == nil {
		return
	}
	for _, id := range b.ids {
		if m := l.bells[id]; m != nil {
			delete(m, b)
			if len(m) == 0 {
				delete(l.bells, id)
			}
		}
	}
	select {
	case id := <-b.freed:
		l.announceLocked(id)
	default:
	}
}

// announceLocked tells one waiter of this Driver that slot id was left free:
// the earliest that can take the announcement now (waking them all would
// have all but one try in vain). d.mu is held.
func (l *permitListener) announceLocked(id int64) {
	bells := make([]*permitBell, 0, len(l.bells[id]))
	for b := range l.bells[id] {
		bells = append(bells, b)
	}
	slices.SortFunc(bells, func(a, b *permitBell) int { return cmp.Compare(a.seq, b.seq) })
	for _, b := range bells {
		if b.announce(id) {
			return
		}
	}
}

// listen runs the listening session l until Close or a failure, ringing the
// bells of the slots announced.
func (d *Driver) listen(l *permitListener) {
	defer func() {
		d.mu.Lock()
		if d.listener == l {
			d.listener = nil
		}
		// Waiters rescan at their own pace from now on; wake them so they
		// look now, rather than wait for a bell that will not ring.
		for _, m := range l.bells {
			for b := range m {
				b.ring()
			}
		}
		if d.o.holders && len(d.byOwner) > 0 {
			// Holds that may be evicted need a listener: start another after
			// a pause (not in a tight loop against a server that is down).
			d.calls.Go(func() {
				t := time.NewTimer(listenRetry)
				defer t.Stop()
				select {
				case <-t.C:
				case <-d.closing.Done():
					return
				}
				d.mu.Lock()
				if len(d.byOwner) > 0 {
					d.startListenerLocked()
				}
				d.mu.Unlock()
			})
		}
		d.mu.Unlock()
	}()
	conn, err := d.connect(d.closing)
	if err != nil {
		return
	}
	defer closeQuickly(conn)
	l.pid.Store(conn.PgConn().PID())
	// Tagged like the lock sessions, so an operator finds it among them.
	if _, err := conn.Exec(d.closing, "SELECT set_config('application_name', $1, false)", d.tag); err != nil {
		return
	}
	if _, err := conn.Exec(d.closing, "LISTEN "+permitChannel); err != nil {
		return
	}
	if d.o.holders {
		// Evictions (see ForceRelease): those marked before LISTEN was in
		// force are read from the holders table.
		if _, err := conn.Exec(d.closing, "LISTEN "+evictChannel); err != nil {
			return
		}
		d.evictionsMissed(d.closing, conn)
	}
	close(l.ready)
	for {
		n, err := conn.WaitForNotification(d.closing)
		if err != nil {
			return
		}
		if n.Channel == evictChannel {
			d.evicted(n.Payload)
			continue
		}
		id, err := strconv.ParseInt(n.Payload, 10, 64)
		if err != nil {
			continue // not the driver's
		}
		l.last.Store(id)
		l.heard.Add(1)
		d.mu.Lock()
		l.announceLocked(id)
		d.mu.Unlock()
	}
}
