package etcddriver

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/distlock/lock/driver/kit"
)

// A Driver that holds many locks confirms their refreshes through a watch of
// its prefix instead of reading every key each round (issue 23: at 100,000
// held locks the reads took etcd's whole core and locks were lost).
//
// The proof. The watch delivers every event under the prefix in revision
// order. A held key is covered once its state is known at a revision X (its
// creation, or a refresh's read) while every event the watch has delivered is
// at or before X: every later event on the key is then still to come, and a
// delete or an overwrite by someone else marks the entry gone. A refresh round
// writes a sentinel key under the prefix, after the refresh started, and gets
// its revision R; once the watch delivered the sentinel's own event at R, it
// has delivered every event below R, so a covered key not marked gone existed,
// with our create revision and lease, when the round was sent. That is the
// proof a read of the key gives, for one write per round (shared by the
// refreshes that started before it was sent) instead of a read per key.
// Progress notifications are never taken as proof (etcd issue #15220).
//
// A key that is not covered (held before the watch started, or the watch
// broke and was started again) is read as before, and the read covers it. A
// round whose sentinel event does not arrive in time (the watch stalled, its
// member lost its leader) reads its keys instead, and the watch is started
// again.

// defaultWatchThreshold is how many held locks start the watch: below it,
// reads cost etcd less than every driver's watch of the whole prefix.
const defaultWatchThreshold = 1024

// watchThreshold overrides defaultWatchThreshold when positive (tests set 1,
// to run the conformance suite with every refresh through the watch).
var watchThreshold atomic.Int64

// sentinelDir is the part of the prefix that holds the sentinel keys; "!"
// never occurs in an escaped key, so it is no lock's range, and List skips it.
const sentinelDir = "/!refresh/"

// refreshWatch is the state of a Driver's prefix watch, guarded by Driver.held.
type refreshWatch struct {
	gen    uint32             // the current watch; an entry with watched == gen is covered while live
	live   bool               // the watch of gen is delivering events
	rev    int64              // the watch of gen delivered every event up to rev
	moved  chan struct{}      // closed and replaced when rev, gen or live changes
	cancel context.CancelFunc // ends the current watch

	// rounds shares each sentinel write, and the wait for its event, among
	// the refreshes that started before it was sent; a round's value is the
	// generation of the watch that delivered the event.
	rounds kit.Round[uint32]
}

var errWatchEnded = errors.New("etcddriver: the refresh watch ended")

// signalLocked wakes the rounds waiting for the watch; d.held is locked.
func (rw *refreshWatch) signalLocked() {
	close(rw.moved)
	rw.moved = make(chan struct{})
}

// watchingLocked starts the watch once the Driver holds enough locks and
// reports whether covered entries can be confirmed by a round; d.held is locked.
func (d *Driver) watchingLocked() bool {
	if d.rw == nil {
		threshold := watchThreshold.Load()
		if threshold <= 0 {
			threshold = defaultWatchThreshold
		}
		total := 0
		for _, s := range d.leases {
			total += s.entries
		}
		if d.held.ClosedLocked() || int64(total) < threshold {
			return false
		}
		d.rw = &refreshWatch{moved: make(chan struct{})}
		d.wg.Add(1)
		go d.runWatch()
	}
	return d.rw.live
}

// coverLocked records that e's key was ours at revision x, its create
// revision: if the watch has delivered nothing after x, it will deliver every
// later event on the key, so e is covered; d.held is locked.
func (d *Driver) coverLocked(e *entry, x int64) {
	if rw := d.rw; rw != nil && rw.live && rw.rev <= x && e.state == stateHeld {
		e.watched, e.gone = rw.gen, goneNot
	}
}

// markLocked makes the live watch record the events on e's key from now on,
// before a read of the key is sent: the read sees the key at a revision at
// least as late as every event the watch delivered so far, so once it
// confirms the key (confirm), every later event is still to come and e is
// covered; d.held is locked.
func (d *Driver) markLocked(e *entry) {
	if rw := d.rw; rw != nil && rw.live && e.state == stateHeld {
		e.watched, e.gone = rw.gen, goneUnconfirmed
	}
}

// coveredLocked reports whether e is covered by the live watch; d.held is locked.
func (d *Driver) coveredLocked(e *entry) bool {
	return d.rw != nil && d.rw.live && e.watched == d.rw.gen && e.gone != goneUnconfirmed
}

// runWatch keeps the prefix watch going until the Driver closes, starting it
// again after it ends (a compaction, a lost leader, a broken connection, a
// round that timed out).
func (d *Driver) runWatch() {
	defer d.wg.Done()
	backoff := 50 * time.Millisecond
	for d.ctx.Err() == nil {
		if d.watchOnce() {
			backoff = 50 * time.Millisecond
		}
		t := time.NewTimer(backoff)
		select {
		case <-d.ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		backoff = min(2*backoff, time.Second)
	}
}

// watchOnce runs one watch of the prefix, from the revision of a
// linearizable read, and reports whether it delivered any event.
func (d *Driver) watchOnce() (delivered bool) {
	ctx, cancel := context.WithCancel(requireLeader(d.ctx))
	defer cancel()
	resp, err := d.c.Get(ctx, d.prefix+sentinelDir, clientv3.WithKeysOnly(), clientv3.WithLimit(1))
	if err != nil {
		return false
	}
	from := resp.Header.Revision
	ch := d.c.Watch(ctx, d.prefix+"/", clientv3.WithRange(d.prefix+"0"), clientv3.WithRev(from+1))
	d.held.Lock()
	rw := d.rw
	rw.gen++
	if rw.gen == 0 {
		rw.gen = 1 // 0 marks an entry never covered
	}
	rw.live, rw.rev, rw.cancel = true, from, cancel
	rw.signalLocked()
	d.held.Unlock()
	defer func() {
		d.held.Lock()
		rw.live, rw.cancel = false, nil
		rw.signalLocked()
		d.held.Unlock()
	}()
	for wr := range ch {
		if wr.Err() != nil || wr.Canceled {
			return delivered
		}
		if len(wr.Events) == 0 {
			continue // a progress notification proves nothing here
		}
		delivered = true
		d.held.Lock()
		for _, ev := range wr.Events {
			d.watchedLocked(ev)
		}
		rw.rev = max(rw.rev, wr.Events[len(wr.Events)-1].Kv.ModRevision)
		rw.signalLocked()
		d.held.Unlock()
	}
	return delivered
}

// watchedLocked marks the covered entry an event says is gone; d.held is locked.
func (d *Driver) watchedLocked(ev *clientv3.Event) {
	e := d.entryOfKeyLocked(string(ev.Kv.Key))
	if e == nil || e.state != stateHeld || e.watched != d.rw.gen || ev.Kv.ModRevision < e.rev {
		return // not ours, not covered, or of an earlier key of the same name
	}
	switch {
	case ev.Type == mvccpb.DELETE:
		e.gone = goneVanished
	case ev.Kv.CreateRevision != e.rev || ev.Kv.Lease != int64(e.s.id):
		e.gone = goneReplaced
	}
}

// entryOfKeyLocked is the entry whose etcd key is key, or nil; d.held is locked.
func (d *Driver) entryOfKeyLocked(key string) *entry {
	rest, ok := strings.CutPrefix(key, d.prefix+"/")
	if !ok {
		return nil
	}
	i := strings.IndexByte(rest, '/')
	if i < 0 {
		return nil
	}
	user, ok := unescapeKey(rest[:i])
	if !ok {
		return nil
	}
	for e := d.held.GetLocked(user); e != nil; e = e.next {
		if e.key == key {
			return e
		}
	}
	return nil
}

// watchRound proves the covered entries of a refresh that started at start:
// it shares a round sent after start, or sends one, and returns the
// generation of the watch that delivered the round's sentinel event.
func (d *Driver) watchRound(ctx context.Context, s *session, start time.Time) (uint32, error) {
	d.held.Lock()
	rw := d.rw
	live := rw.live
	d.held.Unlock()
	if !live {
		return 0, errWatchEnded
	}
	return rw.rounds.Share(ctx, start, time.Time{}, func(ctx context.Context, sent func()) (uint32, error) {
		d.held.Lock()
		if !rw.live {
			d.held.Unlock()
			return 0, errWatchEnded
		}
		gen := rw.gen
		d.held.Unlock()
		sent()
		err := d.sendRound(ctx, s, gen)
		if err != nil && ctx.Err() != nil {
			d.held.Lock()
			if gen == rw.gen && rw.cancel != nil {
				rw.cancel() // the sentinel event did not come in time: watch afresh
			}
			d.held.Unlock()
		}
		return gen, err
	})
}

// sendRound writes s's sentinel key and waits until the watch of gen
// delivered its event.
func (d *Driver) sendRound(ctx context.Context, s *session, gen uint32) error {
	resp, err := d.c.Put(requireLeader(ctx), d.prefix+sentinelDir+s.hex, "", clientv3.WithLease(s.id))
	if err != nil {
		return err
	}
	at := resp.Header.Revision
	for {
		d.held.Lock()
		rw := d.rw
		if !rw.live || rw.gen != gen {
			d.held.Unlock()
			return errWatchEnded
		}
		if rw.rev >= at {
			d.held.Unlock()
			return nil
		}
		moved := rw.moved
		d.held.Unlock()
		select {
		case <-moved:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// goneState is what the watch saw of a covered entry's key.
type goneState uint8

const (
	goneNot         goneState = iota
	goneVanished              // deleted
	goneReplaced              // another key (another create revision or lease) in its place
	goneUnconfirmed           // marked before a read (markLocked), not yet confirmed by it
)
