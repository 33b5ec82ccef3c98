package redlockdriver

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"time"

	"github.com/distlock/lock/driver"
	"github.com/distlock/lock/internal/redisproto"
)

// A vote is what one acquire round learned from the servers.
type vote struct {
	yes      int       // servers where the lock is ours
	yesBy    []bool    // by server, whether it is one of them
	backs    uint64    // Driver.backs when the round was sent
	start    time.Time // the latest moment from which every yes server keeps the lock for the TTL
	answered int       // servers that answered at all
	holders  []holder  // other owners seen, with how many servers each holds
	longest  time.Duration
	wrong    bool    // a server holds a value that is not a lock under the key
	errs     []error // per server, nil where it answered
}

type holder struct {
	owner string
	count int
}

// The outcome of a round.
type outcome int

const (
	won      outcome = iota // a majority, with validity left
	held                    // another owner holds a majority: wait for its release
	split                   // nobody has a majority: back off randomly and try again
	noQuorum                // fewer than a majority answered
	late                    // a majority, but the validity was spent getting it
)

// attempt runs one acquire round: acquire.lua on every server at once, until
// a majority said yes or every server answered or timed out. With register,
// servers that find the lock held record this driver's inbox as waiting for it.
func (d *Driver) attempt(ctx context.Context, k keys, req *request, register bool, lease time.Duration) vote {
	start := time.Now()
	// The holder's record: no token, the round's start, the label.
	rec := "0 " + strconv.FormatInt(start.UnixMicro(), 10) + " " + req.Label
	args := []any{req.Owner, millis(req.TTL), rec}
	if !req.Shared {
		args = append(args, millis(recordTTL(req.TTL)))
	}
	if register {
		args = append(args, d.inbox, millis(lease))
	}
	o, keys := opAcquire, []string{k.Lock, k.Waiters, k.Writers, k.Grant}
	if req.Shared {
		o, keys = opAcquireShared, []string{k.Lock, k.Waiters, k.Holders, k.Writers, k.Labels}
	}
	return d.poll(ctx, o, keys, args, req, start)
}

// poll sends one call of o (keys, args) to every server, for req's round
// that began at start, and counts the answers until a majority said yes or
// every server answered or timed out. The answers are acquire.lua's.
func (d *Driver) poll(ctx context.Context, o op, keys []string, args []any, req *request, start time.Time) vote {
	backs := d.backs.Load()
	r := d.send(o, d.deadline(ctx, start, req.TTL), 1, func(int) ([]string, []any) { return keys, args })
	v := vote{start: start, errs: make([]error, len(d.servers)), yesBy: make([]bool, len(d.servers)), backs: backs}
	for i := range v.errs {
		v.errs[i] = errTimeout
	}
	for pending := len(d.servers); pending > 0 && !v.decided(d.quorum, pending); pending-- {
		rep, ok := r.next()
		if !ok {
			break
		}
		v.count(rep, req, start)
	}
	r.stop()
	return v
}

// decided reports whether the servers still to answer (pending) can no longer
// change the outcome: we have a majority, another owner has one, or nobody
// can reach one. Stragglers then cost no waiting; giveBack still covers them.
func (v *vote) decided(quorum, pending int) bool {
	if v.yes >= quorum {
		return true
	}
	most := v.yes
	for _, h := range v.holders {
		if h.count >= quorum {
			return true
		}
		most = max(most, h.count)
	}
	return most+pending < quorum
}

// request is the driver's request type, named here for brevity.
type request = driver.Request

// count adds one server's reply to the vote.
func (v *vote) count(rep reply, req *request, start time.Time) {
	if rep.err != nil {
		v.errs[rep.server] = rep.err
		return
	}
	v.errs[rep.server] = nil
	v.answered++
	if n, ok := rep.val.(int64); ok && n == acqTaken {
		v.yes++
		v.yesBy[rep.server] = true
		return
	}
	vals, _ := rep.val.([]any)
	status := int64(-99)
	if len(vals) > 0 {
		status, _ = vals[0].(int64)
	}
	switch {
	case status == acqHeld && len(vals) == 2:
		// Ours already (a retry): it lives pttl from when the server read it,
		// which was after start.
		v.yes++
		v.yesBy[rep.server] = true
		if pttl, ok := vals[1].(int64); ok && pttl >= 0 {
			if s := start.Add(redisproto.FromMillis(pttl) - req.TTL); s.Before(v.start) {
				v.start = s
			}
		}
	case status == acqBusy && len(vals) == 3:
		owner, _ := vals[1].(string)
		pttl, _ := vals[2].(int64)
		v.longest = max(v.longest, redisproto.FromMillis(pttl))
		for i := range v.holders {
			if v.holders[i].owner == owner {
				v.holders[i].count++
				return
			}
		}
		v.holders = append(v.holders, holder{owner: owner, count: 1})
	case status == acqWrongType:
		v.wrong = true
	case status == acqForeign:
		v.errs[rep.server] = fmt.Errorf("a key of the lock (waiters, holders or writers) holds data of another type")
		v.answered--
	default:
		v.errs[rep.server] = fmt.Errorf("acquire script answered %v", rep.val)
		v.answered--
	}
}

// roundOutcome decides a round's outcome from its votes.
func (d *Driver) roundOutcome(v vote, req *request) outcome {
	if v.yes >= d.quorum {
		if time.Since(v.start) >= req.TTL-driver.Drift(req.TTL) {
			return late
		}
		return won
	}
	for _, h := range v.holders {
		if h.count >= d.quorum {
			return held
		}
	}
	if v.answered < d.quorum {
		return noQuorum
	}
	return split
}

// failed reports why a round found no majority, for TryAcquire and for an
// Acquire that cannot reach enough servers.
func (d *Driver) failed(v vote, o outcome) error {
	if v.wrong {
		return ErrWrongType
	}
	switch o {
	case held, split:
		return driver.ErrLocked
	case late:
		return errLate
	}
	return d.quorumError(v.errs, v.answered)
}

// quorumError is the error of a round that fewer than a majority of the
// servers answered: errs holds each server's failure (nil where it
// answered).
func (d *Driver) quorumError(errs0 []error, answered int) error {
	var why []string
	var errs []error
	transient := 0
	for i, err := range errs0 {
		if err != nil {
			e := d.serverError(i, err)
			why = append(why, e.Error())
			errs = append(errs, e)
			if isTransient(err) {
				transient++
			}
		}
	}
	err := fmt.Errorf("%w: %d of %d answered, %d needed: %s%w", ErrNoQuorum, answered, len(d.servers), d.quorum,
		strings.Join(why, "; "), wrapOnly(errs))
	// Unavailable when the servers that failed for a reason that may pass
	// (unreachable, too slow, loading, failing over) could still make a
	// majority; permanent when servers that refused us (an ACL, a wrong
	// password) stand in the way of any majority.
	if answered+transient >= d.quorum {
		return fmt.Errorf("%w: %w", driver.ErrUnavailable, err)
	}
	return err
}

// errLate is a round that won a majority only after the lock's validity had
// run out: the servers were slow, and a later round may be faster.
var errLate = fmt.Errorf("%w: redlockdriver: a majority was reached only after the lock's validity (TTL − elapsed − drift) had run out; given back", driver.ErrUnavailable)

// isTransient reports whether a server's failure may pass: no answer in
// time, a queue full of requests, or what redisproto.IsTransient says.
func isTransient(err error) bool {
	return errors.Is(err, errTimeout) || errors.Is(err, errQueueFull) || redisproto.IsTransient(err)
}

// wrapOnly keeps errs reachable for errors.Is and errors.As without adding to
// the message.
func wrapOnly(errs []error) error {
	if len(errs) == 0 {
		return nil
	}
	return silent{errors.Join(errs...)}
}

type silent struct{ err error }

func (s silent) Error() string { return "" }
func (s silent) Unwrap() error { return s.err }

// TryAcquire makes one round. It returns driver.ErrLocked when another owner
// holds a majority or the vote was split, an error matching ErrNoQuorum when
// fewer than a majority of the servers answered (and driver.ErrUnavailable too
// when the servers that failed were unreachable or busy rather than refusing
// us), an error matching driver.ErrUnavailable when the majority came too late
// for the lock's validity, and the same grant again when
// req.Owner already holds the lock. It never registers as a waiter, and gives
// back whatever a failed round took before it returns.
func (d *Driver) TryAcquire(ctx context.Context, req *request) (driver.Grant, error) {
	if err := d.begin(ctx); err != nil {
		return driver.Grant{}, err
	}
	defer d.calls.Done()
	k := d.keys(req.Key)
	v := d.attempt(ctx, k, req, false, 0)
	o := d.roundOutcome(v, req)
	if o == won {
		d.record(req, v)
		return driver.Grant{Start: v.start}, nil
	}
	d.giveBack(k, req, v, o == late)
	return driver.Grant{}, d.failed(v, o)
}

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
	registered time.Time     // when a head last registered the driver on a majority (under Driver.held)

	// Since the head last looked (under Driver.held):
	heard      []bool // by server, whether it announced a release
	ownRelease bool   // this driver began to release the key
	force      bool   // a subscription came back: look whatever was heard
}

// ownAnnouncementOnlyLocked reports whether the announcements since the head last
// lookedLocked may all come from this driver's own release, announced to it by a
// minority of the servers: those where no other driver was registered yet
// (a waiter's registration reaches its last servers after its round was
// decided). The head then leaves the lock to the other drivers, which the
// majority told, and looks again after the grace (or when a majority told
// it: no other driver waits). d.held is locked.
func (g *group) ownAnnouncementOnlyLocked(quorum int) bool {
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

// wakeSourceLocked is what a wake-up of the head is: a notification when a server
// announced a release since the head last looked, and the fallback (timer)
// when the only cause is a subscription that came back (wakeAll). d.held is locked.
func (g *group) wakeSourceLocked() driver.WakeSource {
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

// lookedLocked starts a new round of hearing, as the head looks; d.held is locked.
func (g *group) lookedLocked() {
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
		d.held.Lock()
		wait = time.Until(g.registered.Add(lease / 3))
		d.held.Unlock()
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
					d.held.Lock()
					ignore := g.ownAnnouncementOnlyLocked(d.quorum)
					ws := g.wakeSourceLocked()
					d.held.Unlock()
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
		d.held.Lock()
		g.lookedLocked()
		d.held.Unlock()
		v := d.attempt(ctx, k, req, true, lease)
		o := d.roundOutcome(v, req)
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
			d.held.Lock()
			g.registered = v.start
			d.held.Unlock()
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
	d.held.Lock()
	other := d.groups[k.Lock]
	if other == g {
		other = d.groups[k.Lock+sharedGroup]
	}
	if len(g.queue) <= 1 && other == nil {
		inbox = d.inbox
	}
	d.held.Unlock()
	d.releaseEverywhere(releaseRound{k: k, req: req, inbox: inbox, ended: true})
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
	d.held.Lock()
	defer d.held.Unlock()
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
	d.held.Lock()
	defer d.held.Unlock()
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
	d.held.Lock()
	defer d.held.Unlock()
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
	d.held.Lock()
	defer d.held.Unlock()
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
