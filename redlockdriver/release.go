package redlockdriver

import (
	"context"
	"fmt"
	"time"

	"github.com/distlock/lock/driver"
)

// Release deletes the lock on every server where req.Owner holds it, telling
// the waiting drivers, and returns driver.ErrNotHeld when a majority did not
// hold it (it had expired or was taken over). When too few servers answered to
// tell, it returns an error matching ErrNoQuorum (and driver.ErrUnavailable
// unless a server refused the request for good); a retry of that Release
// continues from what this one learned. It never deletes another owner's
// lock. For an owner still waiting in Acquire it also leaves nothing behind.
func (d *Driver) Release(ctx context.Context, req *request) error {
	if err := d.begin(ctx); err != nil {
		return err
	}
	defer d.calls.Done()
	k := d.keys(req.Key)
	inbox := ""
	d.held.Lock()
	excl, shared := d.groups[k.Lock], d.groups[k.Lock+sharedGroup]
	if excl == nil && shared == nil && d.sub.started {
		inbox = d.inbox // nobody here waits for the key any more
	}
	if excl != nil {
		excl.ownRelease = true
		// The servers tell this driver's waiters only if no other driver
		// waits (release.lua); should those others not take the lock (they
		// died), the head here looks again after a grace.
		defer excl.releasedHere()
	}
	if shared != nil && !req.Shared {
		// This driver's readers may go when its writer leaves, whoever else
		// the servers told: readers do not exclude the other drivers'. (A
		// reader leaving frees nothing for other readers.)
		defer shared.releasedHere()
	}
	d.held.Unlock()
	// One round. A round that reaches too few servers leaves the outcome
	// unknown, and package lock retries the Release: the retry asks only the
	// servers that did not answer, and their "not held" is then ambiguous
	// (this round's delete may have landed after its deadline) and counts as
	// released: a lock we held must not be reported lost because our own
	// release reached a server late.
	d.held.Lock()
	t, retry := d.undecided[req]
	delete(d.undecided, req)
	// The servers' checks leave a lock being released alone: its own deletes
	// would look like a loss, and its holder is letting it go anyway.
	d.held.TakeLocked(req)
	d.held.Unlock()
	if !retry {
		t = d.newTally()
	}
	d.runRelease(releaseRound{k: k, req: req, notify: true, inbox: inbox, ended: true, retry: retry,
		timeout: max(d.timeoutFor(req.TTL), releaseWait)}, t)
	if t.decided(d) {
		return t.result(d)
	}
	d.held.Lock()
	d.undecided[req] = t
	d.held.Unlock()
	return t.result(d)
}

// Per-server outcomes of a release.
const (
	relUnknown int8 = iota
	relDeleted
	relNotHeld
)

// A releaseTally is what the rounds of one release learned.
type releaseTally struct {
	state     []int8
	firstErr  error
	permanent bool // a server refused the request for a reason that will not pass
}

func (d *Driver) newTally() *releaseTally {
	return &releaseTally{state: make([]int8, len(d.servers))}
}

func (t *releaseTally) count(s int8) int {
	n := 0
	for _, x := range t.state {
		if x == s {
			n++
		}
	}
	return n
}

func (t *releaseTally) decided(d *Driver) bool {
	return t.count(relDeleted) >= d.quorum || t.count(relNotHeld) > len(d.servers)-d.quorum
}

func (t *releaseTally) result(d *Driver) error {
	deleted, not := t.count(relDeleted), t.count(relNotHeld)
	switch {
	case deleted >= d.quorum:
		return nil
	case not > len(d.servers)-d.quorum:
		return driver.ErrNotHeld
	}
	err := t.firstErr
	if err == nil {
		err = errTimeout
	}
	err = fmt.Errorf("%w: released on %d, not held on %d of %d servers, the others did not answer (%w)",
		ErrNoQuorum, deleted, not, len(d.servers), err)
	if t.permanent {
		return err
	}
	return fmt.Errorf("%w: %w", driver.ErrUnavailable, err)
}

// A releaseRound is one round of release.lua on the servers: what it sends,
// and how runRelease counts the answers.
type releaseRound struct {
	k   keys
	req *request
	// notify tells the waiting drivers that the lock is free: false only for
	// a round that never won a majority, or a waiter leaving.
	notify bool
	// inbox, when set, is the inbox whose registration as a waiter goes.
	inbox string
	// ended says the request is over (not merely giving back a lost round's
	// votes): the owner's registration as a waiting writer goes too, so it
	// no longer holds readers back.
	ended bool
	// retry counts "not held" as released (see Release).
	retry bool
	// all waits for every server (until the deadline) even once the outcome
	// is decided: a cleanup is done when runRelease returns.
	all bool
	// timeout bounds each server's answer; zero: the request's per-server
	// timeout.
	timeout time.Duration
}

// releaseEverywhere gives back what req may hold on every server, including
// those that did not answer a round (they may have taken it late), and waits
// for every answer.
func (d *Driver) releaseEverywhere(r releaseRound) {
	r.all = true
	d.runRelease(r, d.newTally())
}

// releaseWait is how long Release waits for a majority of answers when the
// per-server timeout is shorter. Unlike an acquire or a refresh, a release
// spends no lock's validity while it waits, and the round ends as soon as a
// majority answered; on a loaded machine (a client descheduled, servers
// sharing a few cores) a release's answers can take longer than the
// per-server timeout, and a Release left undecided keeps the lock held until
// its caller retries. Only Release waits this long: the cleanups of failed
// rounds (which wait for every server) keep the per-server timeout.
const releaseWait = 500 * time.Millisecond

// runRelease runs the round r on the servers whose outcome t does not know
// yet, until the outcome is decided (or, with r.all, until every server
// answered or timed out).
func (d *Driver) runRelease(r releaseRound, t *releaseTally) {
	keys, args := d.releaseCall(r)
	timeout := r.timeout
	if timeout == 0 {
		timeout = d.timeoutFor(r.req.TTL)
	}
	// A release is sent even when the caller's context has ended: what it
	// deletes is ours.
	dl := time.Now().Add(timeout)
	replies := d.sendTo(opRelease, dl, func(s int) bool { return t.state[s] == relUnknown }, keys, args)
	for r.all || !t.decided(d) {
		rep, ok := replies.next()
		if !ok {
			break
		}
		switch n, _ := rep.val.(int64); {
		case rep.err != nil:
			if t.firstErr == nil || (!t.permanent && !isTransient(rep.err)) {
				t.firstErr = d.serverError(rep.server, rep.err)
			}
			t.permanent = t.permanent || !isTransient(rep.err)
		case n == 1 || r.retry:
			t.state[rep.server] = relDeleted
		default:
			t.state[rep.server] = relNotHeld
		}
	}
	replies.stop()
}

// releaseCall is release.lua's keys and arguments for the round r.
func (d *Driver) releaseCall(r releaseRound) ([]string, []any) {
	n, e := "0", "0"
	if r.notify {
		n = "1"
	}
	if r.ended {
		e = "1"
	}
	k := r.k
	return []string{k.Lock, k.Waiters, k.Holders, k.Writers, k.Grant, k.Labels}, []any{r.req.Owner, n, r.inbox, d.inbox, e}
}

// releaseAll gives back what locks may still hold on some servers (a
// refresh found them lost, or a set was not granted), telling waiters, in
// one round (a release.lua call per lock and server) that waits for every
// answer (see pipelined). One round for all: a batch that found thousands
// lost must not hold its other locks' answers back for a round each.
func (d *Driver) releaseAll(reqs []*request) {
	if len(reqs) == 0 {
		return
	}
	timeout := time.Duration(0)
	for _, r := range reqs {
		timeout = max(timeout, d.timeoutFor(r.TTL))
	}
	lost := func(req *request) releaseRound {
		return releaseRound{k: d.keys(req.Key), req: req, notify: true, ended: true}
	}
	keys, _ := d.releaseCall(lost(reqs[0])) // every call has as many
	r := d.sendOps(pipelined(len(reqs), len(keys), timeout), timeout, len(reqs), func(c int) (op, []string, []any) {
		keys, args := d.releaseCall(lost(reqs[c]))
		return opRelease, keys, args
	})
	for {
		if _, ok := r.next(); !ok {
			break
		}
	}
	r.stop()
}

// pipelined is the deadline of a round of calls jobs a server, of keys keys
// each, which the server answers within timeout from when it is sent: a
// timeout for each pipeline the server's worker sends them in (maxBatch jobs,
// or fewer where they would carry more than maxPipelineKeys keys).
func pipelined(calls, keys int, timeout time.Duration) time.Time {
	perPipeline := max(min(maxBatch, maxPipelineKeys/max(keys, 1)), 1)
	return time.Now().Add(timeout * time.Duration(1+calls/perPipeline))
}

// giveBack releases what a failed round may have taken, on every server,
// including those that did not answer (they may have taken it late), and waits
// for the answers. notify tells waiters the lock is free: true only when the
// round had won a majority.
func (d *Driver) giveBack(k keys, req *request, v vote, notify bool) {
	unanswered := false
	for _, err := range v.errs {
		if err != nil {
			unanswered = true
		}
	}
	if v.yes == 0 && !unanswered {
		return
	}
	d.releaseEverywhere(releaseRound{k: k, req: req, notify: notify})
}
