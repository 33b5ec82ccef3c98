package redlockdriver

import (
	"context"
	"math/rand/v2"
	"time"

	"github.com/distlock/lock/driver"
)

// A group is the Acquire calls of one Driver waiting for one key in one mode
// (exclusive or shared). Only its first call (the head) contends on the
// servers; the others wait in process for their turn, so a release wakes one
// contender per Driver, not every goroutine, and fewer contenders mean fewer
// split votes. Shared requests do not exclude each other: when a shared head
// wins, the next one tries at once.
type group struct {
	shared     bool          // shared requests: a head that won lets the next one try at once
	wake       chan struct{} // a release of the key was announced; buffered, kept across heads
	released   chan struct{} // this driver released the key; buffered, kept across heads
	queue      []*waiter     // queue[0] is the head
	registered time.Time     // when a head last registered the driver on a majority (under Driver.mu)

	// Since the head last looked (under Driver.mu):
	heard      []bool // by server, whether it announced a release
	ownRelease bool   // this driver began to release the key
	force      bool   // a subscription came back: look whatever was heard
}

// ownAnnouncementOnly reports whether the announcements since the head last
// looked may all come from this driver's own release, announced to it by a
// minority of the servers: those where no other driver was registered yet
// (a waiter's registration reaches its last servers after its round was
// decided). The head then leaves the lock to the other drivers, which the
// majority told, and looks again after the grace (or when a majority told
// it: no other driver waits). d.mu is held.
func (g *group) ownAnnouncementOnly(quorum int) bool {
	if !g.ownRelease || g.force {
		return false
	}
	n := 0
	for _, h := range g.heard {
		if h {
			n++
		}
	}
	return n < quorum
}

// wakeSource is what a wake-up of the head is: a notification when a server
// announced a release since the head last looked, and the fallback (timer)
// when the only cause is a subscription that came back (wakeAll). d.mu is held.
func (g *group) wakeSource() driver.WakeSource {
	for _, h := range g.heard {
		if h {
			return driver.WakeNotified
		}
	}
	if g.force {
		return driver.WakeTimer
	}
	return driver.WakeNotified
}

// looked starts a new round of hearing, as the head looks; d.mu is held.
func (g *group) looked() {
	clear(g.heard)
	g.ownRelease, g.force = false, false
}

// releasedHere tells the head that this driver released the key.
func (g *group) releasedHere() {
	select {
	case g.released <- struct{}{}:
	default:
	}
}

type waiter struct {
	turn chan bool // receives "try at once" when the waiter becomes head
}

const (
	// minLease is the shortest time a driver stays registered as a waiter on a
	// server without renewing the registration.
	minLease = time.Second
	// pollWithoutInbox is how often a waiter looks again while its driver is
	// not subscribed on a majority of the servers; only the wake-up is slower.
	pollWithoutInbox = 50 * time.Millisecond
	// backoffMin and backoffMax bound the random pause after a split vote; it
	// doubles with each split in a row.
	backoffMin = 2 * time.Millisecond
	backoffMax = 64 * time.Millisecond
	// otherDriverGrace is how long a head waits, after its own driver released
	// the key, for another waiting driver to take it (release.lua announces the
	// release to the other drivers only) before it looks again itself: it bounds
	// the stall a waiter registered by a driver that died can cause.
	otherDriverGrace = 5 * time.Millisecond
)

// Acquire blocks until req.Owner holds req.Key on a majority, ctx is done or
// the driver is closed. It is woken by the servers when the lock is released
// (see Waiting in the package documentation), backs off randomly only after a
// split vote, and succeeds at once if req.Owner already holds the lock. When
// it returns an error it has given back whatever it took and left no
// registration behind. A round that reaches fewer than a majority of the
// servers, or wins one too late, ends the call with the error TryAcquire
// would return (matching driver.ErrUnavailable when it may pass): package lock
// retries it with its backoff, so the driver makes no retry rounds of its own.
func (d *Driver) Acquire(ctx context.Context, req *request) (driver.Grant, error) {
	if err := d.begin(ctx); err != nil {
		return driver.Grant{}, err
	}
	defer d.calls.Done()
	// Close ends the wait.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer context.AfterFunc(d.ctx, cancel)()

	k := d.keys(req.Key)
	gk := groupKey(k, req)
	g, w, now := d.join(gk, req.Shared)
	acquired := false
	defer func() { d.leave(gk, g, w, acquired) }()
	if !now {
		select {
		case now = <-w.turn:
		case <-ctx.Done():
			return driver.Grant{}, d.ended(ctx)
		}
		if now {
			// The head before it left without the lock (or won a shared
			// one): an in-process notification that the lock may be free.
			driver.Woke(ctx, driver.WakeNotified)
		}
	}

	lease := max(req.TTL, minLease)
	step := backoffMin
	var wait time.Duration
	if !now {
		// The lock passed to a waiter of this driver: if the servers have the
		// driver registered as waiting, wait for the release, until the
		// registration is due for renewal.
		d.mu.Lock()
		wait = time.Until(g.registered.Add(lease / 3))
		d.mu.Unlock()
		if wait > 0 && !d.subscribe() {
			wait = min(wait, pollWithoutInbox)
		}
	}
	for {
		if wait > 0 {
			t := time.NewTimer(wait)
			deadline := time.Now().Add(wait)
			// What ends the sleep: the timer, unless this driver's own release
			// shortened it to the grace.
			src := driver.WakeTimer
		sleep:
			for {
				select {
				case <-g.wake:
					d.mu.Lock()
					ignore := g.ownAnnouncementOnly(d.quorum)
					ws := g.wakeSource()
					d.mu.Unlock()
					if ignore {
						continue
					}
					src = ws
					break sleep
				case <-t.C:
					break sleep
				case <-g.released:
					if time.Until(deadline) > d.grace {
						deadline = time.Now().Add(d.grace)
						t.Reset(d.grace)
						src = driver.WakeNotified
					}
				case <-ctx.Done():
					t.Stop()
					d.abandon(k, req, g)
					return driver.Grant{}, d.ended(ctx)
				}
			}
			t.Stop()
			driver.Woke(ctx, src)
		}
		select { // a wake-up from before this round is answered by it
		case <-g.wake:
		default:
		}
		d.mu.Lock()
		g.looked()
		d.mu.Unlock()
		v := d.attempt(ctx, k, req, true, lease)
		o := d.judge(v, req)
		if o == won {
			acquired = true
			d.record(req, v)
			return driver.Grant{Start: v.start}, nil
		}
		if o != held || v.yes > 0 {
			// (A round lost to a majority holder without a vote of ours
			// gives nothing back: a server that answered late may have given
			// us the lock, but our next round finds it ours, and abandon
			// covers a wait that ends.)
			d.giveBack(k, req, v, o == late)
		}
		if v.wrong || o == noQuorum || o == late {
			// One attempt: too few servers answering, or answering too late,
			// is reported for package lock to retry with its backoff.
			d.abandon(k, req, g)
			return driver.Grant{}, d.failed(v, o)
		}
		subscribed := d.subscribe()
		switch o {
		case held:
			d.mu.Lock()
			g.registered = v.start
			d.mu.Unlock()
			// Look again when the holder's TTL runs out (it may have died), and
			// renew the registration within its lease.
			wait = min(v.longest+time.Millisecond, lease/3)
			step = backoffMin
		default: // split
			wait = backoffMin/2 + rand.N(step)
			step = min(2*step, backoffMax)
		}
		if !subscribed {
			wait = min(wait, pollWithoutInbox)
		}
	}
}

// ended is the error of a wait ended by its context or by Close.
func (d *Driver) ended(ctx context.Context) error {
	if d.ctx.Err() != nil {
		return driver.ErrClosed
	}
	return context.Cause(ctx)
}

// abandon gives back what a waiter may hold and, when no other call of this
// driver waits for the key, removes the driver's registration.
func (d *Driver) abandon(k keys, req *request, g *group) {
	inbox := ""
	d.mu.Lock()
	other := d.groups[k.Lock]
	if other == g {
		other = d.groups[k.Lock+sharedGroup]
	}
	if len(g.queue) <= 1 && other == nil {
		inbox = d.inbox
	}
	d.mu.Unlock()
	d.release(k, req, false, inbox, d.newTally(), false, true, true)
}

// sharedGroup ends the group key of a lock's shared requests; the exclusive
// ones' is the lock key itself.
const sharedGroup = "\x00shared"

// groupKey is the key of req's group in Driver.groups.
func groupKey(k keys, req *request) string {
	if req.Shared {
		return k.Lock + sharedGroup
	}
	return k.Lock
}

// join adds a waiter to the group (of shared requests if shared); now is
// true when it is the head.
func (d *Driver) join(groupKey string, shared bool) (*group, *waiter, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	g := d.groups[groupKey]
	if g == nil {
		g = &group{shared: shared, wake: make(chan struct{}, 1), released: make(chan struct{}, 1), heard: make([]bool, len(d.servers))}
		d.groups[groupKey] = g
	}
	w := &waiter{turn: make(chan bool, 1)}
	g.queue = append(g.queue, w)
	return g, w, len(g.queue) == 1
}

// leave removes a waiter. When it was the head, the next waiter takes its
// turn: at once if the lock may be free, or after a wake-up if won says the
// lock passed to the head.
func (d *Driver) leave(groupKey string, g *group, w *waiter, won bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	head := g.queue[0] == w
	for i, x := range g.queue {
		if x == w {
			g.queue = append(g.queue[:i], g.queue[i+1:]...)
			break
		}
	}
	if len(g.queue) == 0 {
		delete(d.groups, groupKey)
		return
	}
	if head {
		if won {
			// Announcements not yet taken are of releases before this win.
			select {
			case <-g.wake:
			default:
			}
		}
		g.queue[0].turn <- !won || g.shared
	}
}

// wakeAll makes every head look again: a server's subscription came back, and
// releases may have been announced meanwhile.
func (d *Driver) wakeAll() {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, g := range d.groups {
		g.force = true
		select {
		case g.wake <- struct{}{}:
		default:
		}
	}
}

// deliver passes a release announcement (the lock key) from server i to its
// groups.
func (d *Driver) deliver(i int, lockKey string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, gk := range [2]string{lockKey, lockKey + sharedGroup} {
		g := d.groups[gk]
		if g == nil {
			continue
		}
		g.heard[i] = true
		select {
		case g.wake <- struct{}{}:
		default:
		}
	}
}
