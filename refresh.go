package lock

import (
	"container/heap"
	"context"
	"fmt"
	"time"

	"github.com/distlock/lock/driver"
)

// The Locker keeps every held lock in one heap ordered by its next event (a
// refresh, or the validity deadline), served by one scheduler goroutine. A held
// lock costs a heap entry, not a goroutine or a timer.

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

// when is the time of the lock's next event.
func (l *Lock) when() instant {
	if l.auto && !l.refreshing && l.nextRefresh < l.deadline {
		return l.nextRefresh
	}
	return l.deadline
}

func (lk *Locker) scheduleLocked(l *Lock) {
	if l.index >= 0 {
		heap.Fix(&lk.schedule, int(l.index))
	} else {
		heap.Push(&lk.schedule, l)
	}
	// Wake the scheduler only if it would otherwise sleep past this lock's event:
	// taking a lock then costs no scheduler wake-up in the common case.
	if lk.schedule[0] == l && l.when() < lk.armed {
		lk.nudge()
	}
}

func (lk *Locker) unschedule(l *Lock) {
	if l.index >= 0 {
		heap.Remove(&lk.schedule, int(l.index))
	}
}

func (lk *Locker) nudge() {
	select {
	case lk.wake <- struct{}{}:
	default:
	}
}

// confirmed records a successful refresh that started at start.
func (lk *Locker) confirmed(l *Lock, start time.Time) {
	lk.mu.Lock()
	defer lk.mu.Unlock()
	if l.state != stateHeld {
		return
	}
	if d := lk.at(start) + instant(l.req.TTL-l.drift); d > l.deadline {
		l.deadline = d
	}
	l.nextRefresh = lk.at(start) + instant(driver.RefreshInterval(l.req.TTL))
	lk.scheduleLocked(l)
}

func (lk *Locker) runSchedule() {
	defer lk.wg.Done()
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		due, wait := lk.collect(lk.now())
		if len(due) > 0 {
			lk.wg.Add(1)
			go lk.refresh(due)
		}
		if !timer.Stop() {
			select {
			case <-timer.C:
			default:
			}
		}
		timer.Reset(wait)
		select {
		case <-lk.done:
			return
		case <-lk.wake:
		case <-timer.C:
		}
	}
}

// collect ends the locks whose deadline passed, marks those due for refresh, and
// says how long to sleep until the next event.
//
// A lock whose deadline passed is not released here: on a session-bound backend
// the session may still hold it, and while the holder has not stopped (it may
// not have looked at Lost yet) nobody else should get it. The holder's Release,
// Do, or Close frees it.
func (lk *Locker) collect(now instant) (due []*Lock, wait time.Duration) {
	var hooks []func(error)
	lk.mu.Lock()
	for len(lk.schedule) > 0 {
		l := lk.schedule[0]
		if now >= l.deadline {
			hooks = append(hooks, l.endLocked(stateLost, errDeadline))
			l.lapsed = true
			lk.lapsed[l] = struct{}{}
			continue
		}
		if l.refreshing || l.when() > now+instant(refreshSlack) {
			// The next event is a refresh in the future, or the deadline of a
			// lock whose refresh is under way.
			break
		}
		l.refreshing = true
		heap.Fix(&lk.schedule, 0)
		due = append(due, l)
	}
	wait = time.Hour
	if len(lk.schedule) > 0 {
		wait = time.Duration(lk.schedule[0].when() - lk.now())
	}
	lk.armed = now + instant(wait)
	lk.mu.Unlock()
	for _, h := range hooks {
		runHooks(h, errDeadline)
	}
	return due, wait
}

// refresh confirms a batch of due locks, in one round trip where the driver can.
func (lk *Locker) refresh(due []*Lock) {
	defer lk.wg.Done()
	// Under lk.mu: a manual Refresh (confirmed) moves deadlines meanwhile.
	lk.mu.Lock()
	deadline := due[0].deadline
	for _, l := range due[1:] {
		if l.deadline < deadline {
			deadline = l.deadline
		}
	}
	lk.mu.Unlock()
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
	lk.mu.Lock()
	l.refreshing = false
	if l.state != stateHeld {
		lk.mu.Unlock()
		return
	}
	var hooks func(error)
	switch {
	case err == nil:
		if d := lk.at(start) + instant(l.req.TTL-l.drift); d > l.deadline {
			l.deadline = d
		}
		l.nextRefresh = lk.at(start) + instant(driver.RefreshInterval(l.req.TTL))
		lk.scheduleLocked(l)
	case isNotHeld(err) && l.releasing:
		// The refresh raced our own Release and saw its delete; Release decides.
		lk.scheduleLocked(l)
	case isNotHeld(err):
		hooks = l.endLocked(stateLost, err)
	default:
		// Unknown outcome: try again soon; the deadline ends the lock if no
		// attempt gets through.
		l.nextRefresh = lk.now() + instant(driver.RetryInterval(l.req.TTL))
		lk.scheduleLocked(l)
	}
	lk.mu.Unlock()
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
