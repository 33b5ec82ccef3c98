package lock

import (
	"context"
	"errors"
	"time"

	"github.com/distlock/lock/driver"
)

// How often Observe looks again by itself: without a backend that tells of
// changes, and as a safety net (for an expiry the backend does not announce)
// with one.
const (
	observePoll       = 250 * time.Millisecond
	observeSafetyPoll = 2 * time.Second
)

// Observe delivers the leader of the election name each time it changes: the
// current one (or a Leader with Elected false) first, then every new leader
// and every vacancy, in order, with strictly increasing terms on drivers with
// fencing. It is woken by the backend where the driver can watch a key
// (driver.Watcher), and looks again every 250ms otherwise. A term shorter than
// one look may be missed; a leader is never reported twice, nor after its
// successor. The channel closes when ctx ends or the Locker is closed, or at
// once on a driver that cannot describe a key's holders (see Leader). A slow
// reader delays the next look, which then reports the state of that moment.
// Passing failures of the backend are retried.
func (lk *Locker) Observe(ctx context.Context, name string) <-chan Leader {
	ch := make(chan Leader)
	ins, ok := lk.d.(driver.Inspector)
	if ctx == nil || !ok || validateKey(name) != nil {
		close(ch)
		return ch
	}
	ctx, c, err := lk.track(ctx, lk.owners.next())
	if err != nil {
		close(ch)
		return ch
	}
	go func() {
		defer lk.untrack(c)
		defer close(ch)
		lk.observe(ctx, ins, name, ch)
	}()
	return ch
}

func (lk *Locker) observe(ctx context.Context, ins driver.Inspector, name string, ch chan<- Leader) {
	var changes <-chan struct{}
	poll := observePoll
	if w, ok := lk.d.(driver.Watcher); ok {
		// Watching starts before the first look, so no change falls between.
		if c, err := w.Watch(ctx, name); err == nil {
			changes, poll = c, observeSafetyPoll
		}
	}
	var (
		last Leader
		sent bool
		bo   = backoffState{b: DefaultBackoff}
	)
	for {
		wait := poll
		in, err := ins.Inspect(ctx, name)
		switch {
		case ctx.Err() != nil:
			return
		case err != nil:
			if errors.Is(err, ErrUnsupported) || errors.Is(err, ErrClosed) {
				return
			}
			wait = bo.next()
		default:
			bo = backoffState{b: DefaultBackoff}
			cur, _ := leaderOf(name, in)
			if !sent || changed(cur, last) && !stale(cur, last) {
				select {
				case ch <- cur:
				case <-ctx.Done():
					return
				}
				last, sent = cur, true
			}
			if cur.Elected && len(in.Holders) == 1 && !in.Holders[0].Expires.IsZero() {
				// The leader's validity ends then unless refreshed: look again
				// just after, in case the backend does not announce expiries.
				if d := time.Until(in.Holders[0].Expires) + 5*time.Millisecond; d > 0 && d < wait {
					wait = d
				}
			}
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case _, ok := <-changes:
			t.Stop()
			if !ok {
				changes = nil
				poll = observePoll
			}
		case <-t.C:
		}
	}
}

// changed reports whether cur is news after last: another leader, a vacancy,
// or the leader's new value (Proclaim). The same leader with a later Since
// is not: Campaign republishes its label with the moment it won, and a look
// between the grant and that would otherwise report one leader twice.
func changed(cur, last Leader) bool {
	if cur.Elected && last.Elected && cur.holder == last.holder && cur.Token == last.Token {
		return cur.Value != last.Value || cur.Owner != last.Owner
	}
	return cur != last
}

// stale reports whether cur is an older term than last (a look answered by a
// lagging replica): it is not reported.
func stale(cur, last Leader) bool {
	return cur.Elected && last.Elected && cur.Token != 0 && cur.Token < last.Token
}
