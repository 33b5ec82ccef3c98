package redlockdriver

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/distlock/lock/driver"
	"github.com/distlock/lock/internal/redislayout"
)

// Loss seen when a server comes back. A driver that holds a lock keeps its
// inbox subscription on every server (see the inbox below), and a server that
// crashes or restarts breaks it. Each time a subscription is confirmed again
// the driver checks every lock it holds on every server: a server votes for a
// lock while the key still holds the owner and the server is the process
// (run_id) that granted or last extended the lock there. When more servers
// than a majority can spare no longer vote, the lock is reported lost through
// Request.Lost at once, and what is left of it is given back, rather than at
// its next refresh.

// ErrForgotten is what a lock reports (wrapped, with driver.ErrNotHeld and the
// servers' reasons) when the driver found, as servers came back, that fewer
// than a majority of them still hold it: they restarted without it (no
// persistence), restarted at all (a new run_id; its data may be older than
// the lock's last extension), or were replaced.
var ErrForgotten = errors.New("redlockdriver: a majority of the servers forgot the lock (restarted or replaced)")

// A heldLock is what the driver remembers of a lock it holds, kept by value
// in Driver.held (16 bytes a lock, beside the map's own): ids, by server, the
// run_id of the process that granted or last extended it there ("" when not
// known: the server did not say yes, is not a plain *redis.Client, or did not
// tell its run_id in time), interned (see internLocked: locks granted by the same
// processes share one slice, which is never changed in place); and when its
// grant record ends at the earliest, and the phase that spreads the moments
// records come due (see recordDue).
type heldLock struct {
	ids         *[]string
	recordUntil int32 // whole seconds by Driver.since; 0: unknown
	phase       uint8 // given in turn at the grant: locks granted together differ
}

// maxIDSets bounds Driver.idSets: past it the table starts again (the locks
// keep their slices; only the sharing of new ones restarts). Each restart of
// a server adds a few combinations: this is reached, if ever, over years.
const maxIDSets = 1024

// internLocked returns the shared copy of ids. Under Driver.held.
func (d *Driver) internLocked(ids []string) *[]string {
	if p := d.lastIDs; p != nil && slices.Equal(*p, ids) {
		return p // the common case: the same processes as the last grant
	}
	k := strings.Join(ids, "\x00")
	p, ok := d.idSets[k]
	if !ok {
		if len(d.idSets) >= maxIDSets {
			clear(d.idSets)
		}
		c := slices.Clone(ids)
		p = &c
		d.idSets[k] = p
	}
	d.lastIDs = p
	return p
}

// since is the driver's monotonic clock, for heldLock.recordUntil.
func (d *Driver) since() time.Duration { return time.Since(d.epoch) }

// recordSecs is until (by since) in whole seconds, rounded down so that it is
// never later than the time it stands for; 68 years of a driver's life fit.
func recordSecs(until time.Duration) int32 {
	return int32(max(min(until/time.Second, math.MaxInt32), 1))
}

// A seenID is the run_id last read from a server, with the number of
// connections the driver had dialled to it before the INFO that read it was
// sent.
type seenID struct {
	id    string
	dials uint64
}

// checkState coalesces the checks (under Driver.held): one runs at a time, and
// a server that comes back during a check makes another run after it.
type checkState struct {
	running bool
	again   bool
	through uint64 // Driver.backs when the last completed check started
}

// checkTimeout bounds a check of the held locks; a server that does not
// answer within it leaves its vote unknown (the lock's refresh decides). It
// also bounds how long Close waits for a check under way.
const checkTimeout = time.Second

// record remembers a lock just granted by the servers that voted yes in v,
// with their run_ids, and makes sure the subscriptions run: they are how the
// driver sees a server crash while it holds the lock. If a server came back
// while the round was under way, the held locks are checked again, this one
// included.
func (d *Driver) record(req *request, v vote) {
	// The run_ids, from the cache where it is trusted (the common case: one
	// pass under the lock), else by asking the servers that said yes. A
	// server that had not answered when the round ended (once a majority said
	// yes) may have granted the lock since: it gets the cached run_id when
	// that is trusted (an INFO now would keep the grant waiting for a server
	// that may be frozen), and is checked by key alone otherwise.
	ids := make([]string, len(d.servers))
	ask := false
	d.held.Lock()
	for i, s := range d.servers {
		switch {
		case !s.identify || !(v.yesBy[i] || errors.Is(v.errs[i], errTimeout)):
		case d.trustedLocked(s):
			ids[i] = s.seen.id
		case v.yesBy[i]:
			ask = true
		}
	}
	// Each server that granted it wrote the record to live recordTTL from
	// when it ran the script, after the round's start.
	until := recordSecs(v.start.Sub(d.epoch) + recordTTL(req.TTL))
	if req.Shared {
		until = 0 // no grant record: its record lives in the labels hash
	}
	d.phase++
	phase := d.phase
	if !ask {
		_ = d.held.PutLocked(req, heldLock{ids: d.internLocked(ids), recordUntil: until, phase: phase}) // refused only after Close, when nothing is kept
	}
	subscribed := d.sub.started
	d.held.Unlock()
	if ask {
		asked := d.identities(v.yesBy, time.Now().Add(d.timeoutFor(req.TTL)), d.ctx.Done())
		for i, id := range asked {
			if v.yesBy[i] {
				ids[i] = id
			}
		}
		d.held.Lock()
		_ = d.held.PutLocked(req, heldLock{ids: d.internLocked(ids), recordUntil: until, phase: phase}) // refused only after Close, when nothing is kept
		d.held.Unlock()
	}
	if !subscribed {
		d.subscribe()
	}
	if d.backs.Load() != v.backs {
		d.checkSoon()
	}
}

// forget drops a lock that ended (released, found lost).
func (d *Driver) forget(req *request) {
	d.held.Lock()
	d.held.TakeLocked(req)
	delete(d.undecided, req)
	d.held.Unlock()
}

// extended notes that servers have just extended locks (ok[c][i]: server i
// extended reqs[c]): each is, from now on, the process that holds the lock
// there. A lock extended again on a server that restarted with its key thus
// counts there again.
func (d *Driver) extended(reqs []*request, ok [][]bool, deadline time.Time) {
	asked := make([]bool, len(d.servers))
	ask := false
	ids := make([]string, len(d.servers))
	d.held.Lock()
	for c, req := range reqs {
		h, held := d.held.LookupLocked(req)
		if !held {
			continue
		}
		copy(ids, *h.ids)
		for i, yes := range ok[c] {
			switch s := d.servers[i]; {
			case !yes:
			case !s.identify:
				ids[i] = ""
			case d.trustedLocked(s):
				ids[i] = s.seen.id
			default:
				asked[i], ask = true, true
			}
		}
		if !slices.Equal(ids, *h.ids) {
			h.ids = d.internLocked(ids)
			_ = d.held.PutLocked(req, h) // refused only after Close, when nothing is kept
		}
	}
	d.held.Unlock()
	if !ask {
		return
	}
	got := d.identities(asked, deadline, d.ctx.Done())
	d.held.Lock()
	defer d.held.Unlock()
	for c, req := range reqs {
		if h, held := d.held.LookupLocked(req); held {
			copy(ids, *h.ids)
			for i, yes := range ok[c] {
				if yes && asked[i] {
					ids[i] = got[i]
				}
			}
			h.ids = d.internLocked(ids)
			_ = d.held.PutLocked(req, h) // refused only after Close, when nothing is kept
		}
	}
}

// recordExtended notes that the grant records of reqs were extended by a
// refresh sent at sent (by since), if they are still held.
func (d *Driver) recordExtended(reqs []*request, sent time.Duration) {
	if len(reqs) == 0 {
		return
	}
	d.held.Lock()
	defer d.held.Unlock()
	for _, r := range reqs {
		if h, held := d.held.LookupLocked(r); held {
			h.recordUntil = recordSecs(sent + recordTTL(r.TTL))
			_ = d.held.PutLocked(r, h) // refused only after Close, when nothing is kept
		}
	}
}

// readmitting returns, by server, whether a lock among reqs is held there by
// a process that is no longer the server's (it restarted with the lock's key):
// a refresh waits for such a server's answer, as extending the lock there
// makes it vote again.
func (d *Driver) readmitting(reqs []*request) []bool {
	out := make([]bool, len(d.servers))
	d.held.Lock()
	defer d.held.Unlock()
	for _, req := range reqs {
		h, held := d.held.LookupLocked(req)
		if !held {
			continue
		}
		for i, s := range d.servers {
			if (*h.ids)[i] != "" && s.seen.id != "" && (*h.ids)[i] != s.seen.id {
				out[i] = true
			}
		}
	}
	return out
}

// identities returns the run_id of each server in which that has just
// answered a request, "" where it cannot tell.
//
// Every request travels on a connection, and a connection talks to the one
// server process that accepted it. When no connection to a server was dialled
// since its cached run_id was read (its dial count is where it was before
// that INFO was sent), the request travelled on a connection that was open
// before that INFO, to the process that answered it: the cached run_id is the
// right one, at no cost. Otherwise (a restart made the client dial again, or
// its pool grew) the servers are asked now, in one round. Each server's
// worker serves its jobs in order, so that INFO is answered after the
// request ran, even one that had not been answered yet: it names the process
// that ran the request or a later one, and a later one only makes the server
// look restarted (no vote), never the reverse. Limit: a request answered just
// before a restart, with a cached run_id read just after it on a connection
// dialled before the restart (a concurrent check), can be attributed to the
// new process; that process then still has the key (a restart that loses it
// is seen by the key check), so only the "restarted" vote is missed.
func (d *Driver) identities(in []bool, deadline time.Time, done <-chan struct{}) []string {
	ids := make([]string, len(d.servers))
	ask := make([]bool, len(d.servers))
	n := 0
	d.held.Lock()
	for i, s := range d.servers {
		switch {
		case !in[i] || !s.identify:
		case d.trustedLocked(s):
			ids[i] = s.seen.id
		default:
			ask[i] = true
			n++
		}
	}
	d.held.Unlock()
	if n == 0 {
		return ids
	}
	dials := d.dialCounts()
	r := d.sendTo(opInfo, deadline, func(i int) bool { return ask[i] }, nil, nil)
	for {
		rep, ok := r.nextUntil(done)
		if !ok {
			break
		}
		if id := d.sawInfo(rep, dials); id != "" {
			ids[rep.server] = id
		}
	}
	r.stop()
	return ids
}

// trustedLocked reports whether s's cached run_id is that of the process behind
// every connection to it (none was dialled since it was read); d.held is locked.
func (d *Driver) trustedLocked(s *server) bool {
	return s.seen.id != "" && s.seen.dials == s.dials.Dials()
}

// dialCounts reads every server's dial count, before INFO requests are queued.
func (d *Driver) dialCounts() []uint64 {
	out := make([]uint64, len(d.servers))
	for i, s := range d.servers {
		out[i] = s.dials.Dials()
	}
	return out
}

// sawInfo caches the run_id in an INFO reply, sent when the server's dial
// count was dials[server], and returns it ("" if the reply has none).
func (d *Driver) sawInfo(rep reply, dials []uint64) string {
	if rep.err != nil && !isTransient(rep.err) {
		// Refused for good (an ACL without INFO): the server's locks are
		// checked by key alone, and INFO is not asked again.
		d.held.Lock()
		d.servers[rep.server].identify = false
		d.held.Unlock()
		return ""
	}
	info, _ := rep.val.(string)
	if rep.err != nil || info == "" {
		return ""
	}
	id, ok := redislayout.ParseRunID(info)
	if ok {
		d.held.Lock()
		d.servers[rep.server].seen = seenID{id: id, dials: dials[rep.server]}
		d.held.Unlock()
	}
	return id
}

// checkSoon starts a check of the held locks, or asks the one under way to
// run again when it ends.
func (d *Driver) checkSoon() {
	d.held.Lock()
	defer d.held.Unlock()
	switch {
	case d.held.ClosedLocked():
	case d.checking.running:
		d.checking.again = true
	case d.held.LenLocked() == 0:
		d.checking.through = d.backs.Load()
	default:
		d.checking.running = true
		d.calls.Add(1) // Close waits for it, and ends its wait
		go d.checks()
	}
}

// checks runs checkHeld until no server came back during the last one.
func (d *Driver) checks() {
	defer d.calls.Done()
	for {
		d.checkHeld()
		d.held.Lock()
		if !d.checking.again || d.held.ClosedLocked() {
			d.checking.running, d.checking.again = false, false
			d.held.Unlock()
			return
		}
		d.checking.again = false
		d.held.Unlock()
	}
}

// checkHeld asks every server, for every held lock, whether the key still holds
// the owner, and (after those, on the same worker) for its run_id; reports
// through Request.Lost each lock that fewer than a majority still vote for;
// and gives back what is left of those.
func (d *Driver) checkHeld() {
	d.held.Lock()
	backs := d.backs.Load()
	reqs := make([]*request, 0, d.held.LenLocked())
	ids := make([][]string, 0, d.held.LenLocked())
	d.held.EachLocked(func(r *request, h heldLock) {
		reqs = append(reqs, r)
		ids = append(ids, *h.ids) // never changed in place
	})
	d.held.Unlock()
	defer func() {
		d.held.Lock()
		d.checking.through = backs
		d.held.Unlock()
	}()
	if len(reqs) == 0 {
		return
	}

	// One job per lock and server, then one INFO per server.
	n := len(reqs) * len(d.servers)
	identify := make([]bool, len(d.servers))
	d.held.Lock()
	for i, s := range d.servers {
		if identify[i] = s.identify; identify[i] {
			n++
		}
	}
	d.held.Unlock()
	info := len(reqs) // the call index of the INFO jobs
	r := &round{replies: make(chan reply, n), pending: n}
	dials := d.dialCounts()
	deadline := time.Now().Add(checkTimeout)
	for _, s := range d.servers {
		for c, req := range reqs {
			d.enqueue(s, job{op: opCheck, keys: checkKeys(d.keys(req.Key), req), args: []any{req.Owner},
				deadline: deadline, call: c, reply: r.replies})
		}
		if identify[s.idx] {
			d.enqueue(s, job{op: opInfo, deadline: deadline, call: info, reply: r.replies})
		}
	}
	r.timer = time.NewTimer(time.Until(deadline))
	const (
		unknown int8 = iota
		holds
		gone
		forced // gone: an operator evicted it there
	)
	state := make([][]int8, len(reqs))
	for c := range state {
		state[c] = make([]int8, len(d.servers))
	}
	now := make([]string, len(d.servers)) // run_ids read now
	for {
		rep, ok := r.nextUntil(d.ctx.Done())
		if !ok {
			break
		}
		switch {
		case rep.call == info:
			now[rep.server] = d.sawInfo(rep, dials)
		case rep.err != nil:
		case rep.val == int64(1):
			state[rep.call][rep.server] = holds
		case rep.val == int64(2):
			state[rep.call][rep.server] = forced
		default:
			state[rep.call][rep.server] = gone
		}
	}
	r.stop()
	if d.ctx.Err() != nil {
		return // Close ends the locks
	}

	for c, req := range reqs {
		var why []string
		evicted, restarted := false, false
		for i := range d.servers {
			if ids[c][i] != "" && now[i] != "" && ids[c][i] != now[i] {
				restarted = true
			}
			switch {
			case state[c][i] == forced:
				evicted = true
				why = append(why, fmt.Sprintf("server %d (%s): force-released", i+1, d.servers[i].name))
			case state[c][i] == gone:
				why = append(why, fmt.Sprintf("server %d (%s): not held", i+1, d.servers[i].name))
			case state[c][i] == holds && ids[c][i] != "" && now[i] != "" && ids[c][i] != now[i]:
				why = append(why, fmt.Sprintf("server %d (%s): restarted (run_id changed)", i+1, d.servers[i].name))
			}
		}
		if len(why) <= len(d.servers)-d.quorum {
			continue
		}
		d.held.Lock()
		_, held := d.held.LookupLocked(req)
		d.held.TakeLocked(req)
		delete(d.undecided, req)
		d.held.Unlock()
		if !held {
			continue // released meanwhile
		}
		if req.Lost != nil {
			// Forgotten by servers seen to restart: the server changed; by
			// servers that did not: deleted or expired, as far as the driver
			// can tell.
			cause := fmt.Errorf("%w (%w)", ErrForgotten, driver.ErrExpired)
			switch {
			case evicted:
				cause = driver.ErrForceReleased
			case restarted:
				cause = fmt.Errorf("%w (%w)", ErrForgotten, driver.ErrServerChanged)
			}
			req.Lost.Lost(fmt.Errorf("%w: %w: %s", driver.ErrNotHeld, cause, strings.Join(why, "; ")))
		}
		// What is left of it on a minority would weigh on the next holder's
		// majority: give it back, and tell the waiters.
		d.releaseEverywhere(releaseRound{k: d.keys(req.Key), req: req, notify: true, ended: true})
	}
}

// identifiable reports whether INFO on c reaches the one server that holds
// the locks (a Cluster's INFO goes to any node, and a Ring is refused).
func identifiable(c redis.UniversalClient) bool {
	_, ok := c.(*redis.Client)
	return ok
}

// checkKeys are the keys check.lua reads for req: the lock, the tombstones,
// and the holders set for a shared hold.
func checkKeys(k keys, req *request) []string {
	if req.Shared {
		return []string{k.Lock, k.Forced, k.Holders}
	}
	return []string{k.Lock, k.Forced}
}

// The inbox is the driver's pub/sub channel, subscribed once on each server
// (one connection per server), on which release.lua announces the release of a
// lock the driver registered as waiting for. The subscriptions start with the
// first Acquire that has to wait, or when the driver first holds a lock (they
// are also how it sees a server crash), and each is read by one goroutine
// until Close. Each time a subscription is confirmed (first, or after a
// reconnect) every waiting head looks again, since an announcement may have
// been missed, and the held locks are checked, since the server may have
// restarted without them (see checkHeld).
type subscription struct {
	started bool
	conns   []*redis.PubSub // by server; nil while dialling
	up      []bool          // confirmed, by server
	nup     int
}

const (
	// inboxDialRounds bounds subscribing and its confirmation, in per-server
	// timeouts: it takes a few round trips (connect, HELLO, SUBSCRIBE). A
	// server that does not answer within it is tried again later. go-redis
	// honours deadlines, not cancellation, while it connects, so this also
	// bounds how long Close waits for a subscription under way.
	inboxDialRounds = 10
)

// subscribe starts the subscriptions the first time, and reports whether a
// majority of them is confirmed.
func (d *Driver) subscribe() bool {
	d.held.Lock()
	defer d.held.Unlock()
	if !d.sub.started && !d.held.ClosedLocked() {
		d.sub.started = true
		d.wg.Add(len(d.servers))
		for _, s := range d.servers {
			go d.readInbox(s)
		}
	}
	return d.sub.nup >= d.quorum
}

// readInbox keeps s's subscription and delivers its announcements until Close.
func (d *Driver) readInbox(s *server) {
	defer d.wg.Done()
	backoff := 10 * time.Millisecond
	for d.ctx.Err() == nil {
		ps := d.dial(s)
		if ps == nil {
			if !redislayout.Pause(d.ctx, backoff) {
				return
			}
			backoff = min(2*backoff, redislayout.InboxBackoffMax)
			continue
		}
		backoff = 10 * time.Millisecond
		d.read(s, ps)
		d.setUp(s.idx, false)
		_ = ps.Close()
	}
}

// dial subscribes on s and waits for the confirmation; nil if it failed. The
// connection is recorded before it is confirmed, so Close can interrupt it.
func (d *Driver) dial(s *server) *redis.PubSub {
	timeout := inboxDialRounds * d.timeout
	ctx, cancel := context.WithTimeout(d.ctx, timeout)
	defer cancel()
	ps := s.client.Subscribe(ctx, d.inbox)
	d.held.Lock()
	if d.held.ClosedLocked() {
		d.held.Unlock()
		_ = ps.Close()
		return nil
	}
	d.sub.conns[s.idx] = ps
	d.held.Unlock()
	for {
		msg, err := ps.ReceiveTimeout(ctx, timeout)
		if err != nil {
			_ = ps.Close()
			return nil
		}
		if m, ok := msg.(*redis.Subscription); ok && m.Kind == "subscribe" && m.Channel == d.inbox {
			d.setUp(s.idx, true)
			return ps
		}
	}
}

// read delivers messages until the connection fails (it returns) or Close.
// go-redis reconnects a broken subscription by itself and subscribes again;
// its confirmation makes every waiter look again. A connection that fails
// silently (no answer to a ping) is given up.
func (d *Driver) read(s *server, ps *redis.PubSub) {
	pinged := false
	backoff := time.Duration(0)
	for {
		msg, err := ps.ReceiveTimeout(d.ctx, redislayout.InboxIdle)
		if d.ctx.Err() != nil {
			return
		}
		if err != nil {
			if !redislayout.IsNetTimeout(err) {
				d.setUp(s.idx, false)
				backoff = min(max(2*backoff, 10*time.Millisecond), redislayout.InboxBackoffMax)
				if !redislayout.Pause(d.ctx, backoff) {
					return
				}
				continue
			}
			if pinged {
				return
			}
			pinged = true
			_ = ps.Ping(d.ctx)
			continue
		}
		backoff, pinged = 0, false
		switch m := msg.(type) {
		case *redis.Message:
			d.deliver(s.idx, m.Payload)
		case *redis.Subscription:
			if m.Kind == "subscribe" {
				d.setUp(s.idx, true)
			}
		}
	}
}

// setUp records whether server i's subscription is confirmed; a confirmation
// wakes every waiter to look again and checks the held locks.
func (d *Driver) setUp(i int, up bool) {
	d.held.Lock()
	if d.sub.up[i] != up {
		d.sub.up[i] = up
		if up {
			d.sub.nup++
		} else {
			d.sub.nup--
		}
	}
	if up {
		d.backs.Add(1) // with up[i], so a check is known to be owed
	}
	d.held.Unlock()
	if up {
		d.wakeAll()
		d.checkSoon()
	}
}

// closeInbox closes the subscriptions, interrupting their readers.
func (d *Driver) closeInbox() {
	d.held.Lock()
	conns := append([]*redis.PubSub(nil), d.sub.conns...)
	d.held.Unlock()
	for _, ps := range conns {
		if ps != nil {
			_ = ps.Close()
		}
	}
}
