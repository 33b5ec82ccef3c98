package lock

import (
	"container/heap"
	"context"
	"fmt"
	"runtime"
	"sync"
	"time"

	"github.com/distlock/lock/driver"
)

// The Locker keeps its held locks in numShards() shards, each a heap ordered by
// the locks' next events (a refresh, or the validity deadline) under its own
// mutex and served by its own timer. A lock belongs to the shard its call's
// sequence number picks, so that holds and releases on distinct keys from
// many goroutines rarely meet on one mutex: nothing on the hold and release
// path is Locker-wide. A held lock costs a heap entry, not a goroutine or a
// timer; a shard's timer runs its callback (collect, then the refresh of what
// is due, in one batch) in a goroutine of its own only when it fires.

// refreshSlack lets one scheduler pass refresh locks that fall due a moment later
// together, so locks taken in a burst are refreshed in one batch.
const refreshSlack = 10 * time.Millisecond

// errDeadline is the cause of a loss by the validity deadline.
var errDeadline = fmt.Errorf("%w: %w: no refresh confirmed before the validity deadline", ErrLost, ErrExpired)

// instant is a moment on the Locker's monotonic clock: the time since its
// epoch. A held lock keeps two (its deadline and next refresh), and an
// instant is a third of the size of a time.Time. Converting follows
// time.Time.Sub: by the monotonic clock where both times carry its reading
// (time.Now's do), as the comparisons of times it replaces did.
type instant int64

func (lk *Locker) at(t time.Time) instant     { return instant(t.Sub(lk.epoch)) }
func (lk *Locker) timeOf(i instant) time.Time { return lk.epoch.Add(time.Duration(i)) }
func (lk *Locker) now() instant               { return lk.at(time.Now()) }

// maxShards bounds the number of schedule shards (a Lock keeps its shard's
// index in a byte).
const maxShards = 64

// numShards is the number of schedule shards of a new Locker: a power of two
// at least twice the number of CPUs that can run goroutines at once, so that
// two running calls rarely pick the same shard, and at most maxShards, so that
// locks due together still make batches of a useful size.
func numShards() int {
	n := 1
	for n < 2*runtime.GOMAXPROCS(0) && n < maxShards {
		n *= 2
	}
	return n
}

// shard is one part of the Locker's held locks and their schedule.
type shard struct {
	mu       sync.Mutex
	lk       *Locker
	closed   bool               // set by Close: no hold, and no scheduler pass, from then on
	schedule lockHeap           // the shard's held locks, by their next refresh or deadline
	lapsed   map[*Lock]struct{} // lost by their deadline, not yet released on the backend; made on first use
	armed    instant            // when the timer will next fire by itself
	timer    *time.Timer        // runs the scheduler pass (run); made on first use
	_        [64]byte           // keeps shards used from different CPUs off one cache line
}

// shard returns the shard of lock l.
func (l *Lock) shard() *shard { return &l.lk.shards[l.shardIdx] }

// when is the time of the lock's next event.
func (l *Lock) when() instant {
	if l.auto() && !l.has(flagRefreshing) && l.nextRefresh < l.deadline {
		return l.nextRefresh
	}
	return l.deadline
}

// scheduleLocked puts l in its shard's schedule, or moves it there after its
// events changed; sh.mu is held.
func (sh *shard) scheduleLocked(l *Lock) {
	if l.index >= 0 {
		heap.Fix(&sh.schedule, int(l.index))
	} else {
		heap.Push(&sh.schedule, l)
	}
	// Re-arm the timer only if it would otherwise fire after this lock's
	// event: taking a lock then costs no timer operation in the common case.
	if w := l.when(); sh.schedule[0] == l && w < sh.armed {
		sh.arm(w, sh.lk.now())
	}
}

// arm sets the shard's timer to fire at instant at; sh.mu is held.
//
// Every fire of the timer that is pending or under way is counted in lk.wg,
// so that Close can wait for the passes it did not stop: a fire becomes
// pending when the timer is made, and when Reset finds none pending (it
// fired, its pass may be under way); Reset of a pending fire replaces it.
// Each pass counts itself out; Close counts out the fire its Stop cancels.
func (sh *shard) arm(at, now instant) {
	if sh.closed {
		return // Close stopped the timer for good
	}
	sh.armed = at
	d := time.Duration(at - now)
	if sh.timer == nil {
		sh.lk.wg.Add(1)
		sh.timer = time.AfterFunc(d, sh.run)
		return
	}
	if !sh.timer.Reset(d) {
		sh.lk.wg.Add(1)
	}
}

// stop stops the shard's timer for Close; sh.mu is held and sh.closed set.
func (sh *shard) stop() {
	if sh.timer != nil && sh.timer.Stop() {
		sh.lk.wg.Done() // the pending fire that will not happen
	}
}

func (sh *shard) unschedule(l *Lock) {
	if l.index >= 0 {
		heap.Remove(&sh.schedule, int(l.index))
	}
}

// confirmed records a successful refresh that started at start.
func (lk *Locker) confirmed(l *Lock, start time.Time) {
	sh := l.shard()
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if l.state != stateHeld {
		return
	}
	if d := lk.at(start) + instant(l.validity()); d > l.deadline {
		l.deadline = d
	}
	l.nextRefresh = lk.at(start) + instant(driver.RefreshInterval(l.req.TTL))
	sh.scheduleLocked(l)
}

// run is a scheduler pass of the shard, run by its timer in a goroutine of
// the timer's own: it ends the locks whose deadline passed, re-arms the timer
// for the next event, and refreshes the locks due (in one batch where the
// driver can). Close waits for a pass that began before it closed the shard;
// a pass that begins after finds the shard closed and does nothing; either
// way Close waits for it (see arm), so none outlives Close.
func (sh *shard) run() {
	lk := sh.lk
	defer lk.wg.Done()
	sh.mu.Lock()
	if sh.closed {
		sh.mu.Unlock()
		return
	}
	due, hooks := sh.collectLocked(lk.now())
	sh.mu.Unlock()
	for _, h := range hooks {
		runHooks(h, errDeadline)
	}
	if len(due) > 0 {
		lk.refresh(due)
	}
}

// collectLocked ends the locks whose deadline passed, marks those due for
// refresh, and arms the timer for the next event; sh.mu is held. It returns
// the hooks of the ended locks, to run after unlocking.
//
// A lock whose deadline passed is not released here: on a session-bound backend
// the session may still hold it, and while the holder has not stopped (it may
// not have looked at Lost yet) nobody else should get it. The holder's Release,
// Do, or Close frees it.
func (sh *shard) collectLocked(now instant) (due []*Lock, hooks []func(error)) {
	for len(sh.schedule) > 0 {
		l := sh.schedule[0]
		if now >= l.deadline {
			hooks = append(hooks, l.endLocked(sh, stateLost, errDeadline))
			sh.addLapsedLocked(l)
			continue
		}
		if l.has(flagRefreshing) || l.when() > now+instant(refreshSlack) {
			// The next event is a refresh in the future, or the deadline of a
			// lock whose refresh is under way.
			break
		}
		l.set(flagRefreshing, true)
		heap.Fix(&sh.schedule, 0)
		due = append(due, l)
	}
	next := now + instant(time.Hour)
	if len(sh.schedule) > 0 {
		next = sh.schedule[0].when()
	}
	sh.arm(next, sh.lk.now())
	return due, hooks
}

// refresh confirms a batch of due locks, in one round trip where the driver can.
//
// Every lock of due is of one shard.
func (lk *Locker) refresh(due []*Lock) {
	// Under the shard's mu: a manual Refresh (confirmed) moves deadlines meanwhile.
	sh := due[0].shard()
	sh.mu.Lock()
	deadline := due[0].deadline
	for _, l := range due[1:] {
		if l.deadline < deadline {
			deadline = l.deadline
		}
	}
	sh.mu.Unlock()
	ctx, cancel := context.WithDeadline(lk.ctx, lk.timeOf(deadline))
	defer cancel()
	start := time.Now()
	errs := make([]error, len(due))
	if lk.batch != nil && len(due) > 1 {
		reqs := make([]*driver.Request, len(due))
		for i, l := range due {
			reqs[i] = &l.req
		}
		copy(errs, lk.batch.RefreshBatch(ctx, reqs))
	} else {
		for i, l := range due {
			errs[i] = lk.d.Refresh(ctx, &l.req)
		}
	}
	for i, l := range due {
		lk.refreshed(l, start, errs[i])
	}
}

// refreshed records the outcome of an automatic refresh.
func (lk *Locker) refreshed(l *Lock, start time.Time, err error) {
	lk.tel.refreshed(l, classify(err))
	sh := l.shard()
	sh.mu.Lock()
	l.set(flagRefreshing, false)
	if l.state != stateHeld {
		sh.mu.Unlock()
		return
	}
	var hooks func(error)
	switch {
	case err == nil:
		if d := lk.at(start) + instant(l.validity()); d > l.deadline {
			l.deadline = d
		}
		l.nextRefresh = lk.at(start) + instant(driver.RefreshInterval(l.req.TTL))
		sh.scheduleLocked(l)
	case isNotHeld(err) && l.has(flagReleasing):
		// The refresh raced our own Release and saw its delete; Release decides.
		sh.scheduleLocked(l)
	case isNotHeld(err):
		hooks = l.endLocked(sh, stateLost, err)
	default:
		// Unknown outcome: try again soon; the deadline ends the lock if no
		// attempt gets through.
		l.nextRefresh = lk.now() + instant(driver.RetryInterval(l.req.TTL))
		sh.scheduleLocked(l)
	}
	sh.mu.Unlock()
	runHooks(hooks, err)
}

// lockHeap orders held locks by their next event.
type lockHeap []*Lock

func (h lockHeap) Len() int           { return len(h) }
func (h lockHeap) Less(i, j int) bool { return h[i].when() < h[j].when() }
func (h lockHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].index = int32(i)
	h[j].index = int32(j)
}
func (h *lockHeap) Push(x any) {
	l := x.(*Lock)
	l.index = int32(len(*h))
	*h = append(*h, l)
}
func (h *lockHeap) Pop() any {
	old := *h
	l := old[len(old)-1]
	old[len(old)-1] = nil
	l.index = -1
	*h = old[:len(old)-1]
	return l
}
