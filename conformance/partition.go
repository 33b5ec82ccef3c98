package conformance

import (
	"context"
	"errors"
	"time"

	"github.com/distlock/lock"
)

// A holder cut off by a silent partition (its traffic dropped, nothing reset)
// cannot refresh. Whoever gets the lock next, the old holder's Lost must have
// closed by the time that client's Acquire returns: no clock skew is assumed
// (both run on this machine), so nothing but the driver and the portable layer
// stands between the two. After the partition heals, the old holder's Release
// must not free the new owner's lock. The margin between the two events is
// logged as a figure: on expiring backends it is what the drift allowance and
// the backend's expiry leave; on session backends the lock passes only once the
// backend gave up the old session.
func testPartitionedHolderLearnsOfLossFirst(e *env) {
	e.needProxy()
	a := e.clientThroughProxies()
	b, c := e.client(), e.client()
	l := e.acquire(a.lk, e.key)
	lost := e.watchLost(l)

	type grant struct {
		l          *lock.Lock
		err        error
		at         time.Time
		holderLost bool // the partitioned holder's Lost had closed when Acquire returned
	}
	got := make(chan grant, 1)
	if err := a.Blackhole(); err != nil {
		e.Fatalf("%v", err)
	}
	cut := time.Now()
	go func() {
		l2, err := b.Acquire(e.ctx, e.key)
		got <- grant{l: l2, err: err, at: time.Now(), holderLost: isClosed(l.Lost())}
	}()

	if !lost.within(e.ctx, e.ttl+lossSlack) {
		e.Errorf("the partitioned holder's Lost did not close within TTL %v + %v of the cut", e.ttl, lossSlack)
	} else {
		e.figure("partition-lost-after-cut", lost.at.Sub(cut))
		// Checked now, while the partition lasts: the cause is what the
		// holder made of the silence, not of what the heal shows it later.
		e.checkCause(l, e.h.PartitionCause, "a lock whose holder was cut off by a partition")
	}

	// The partition lasts until the other client holds the lock, or until the
	// backend had all the time it may take to give up the cut-off client.
	span := e.ttl + e.h.SessionTimeout + lossSlack
	var g grant
	have := false
	wait := func(d time.Duration) {
		if have {
			return
		}
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case g = <-got:
			have = true
		case <-t.C:
		case <-e.ctx.Done():
		}
	}
	wait(time.Until(cut.Add(span)))
	duringPartition := have
	if err := a.Heal(); err != nil {
		e.Fatalf("%v", err)
	}
	if !duringPartition && e.caps.Expiring {
		e.Errorf("no other client acquired within %v of cutting off the holder of an expiring lock (TTL %v)", span, e.ttl)
	}
	wait(e.ttl + e.h.SessionTimeout + lossSlack)

	// Once healed, the old holder releases. While the lock passed on, its
	// release must not free the new owner's lock; where the backend still keeps
	// the old holder's session lock, this release is what frees it.
	releaseErr := make(chan error, 1)
	release := func() {
		ctx, cancel := context.WithTimeout(e.ctx, 10*time.Second)
		defer cancel()
		// A release that could not reach the backend (the connection the
		// partition broke is being replaced) is tried again, as a holder would:
		// the property is about what the release does when it arrives.
		for {
			err := l.Release(ctx)
			if !errors.Is(err, lock.ErrUnavailable) || ctx.Err() != nil {
				releaseErr <- err
				return
			}
			t := time.NewTimer(10 * time.Millisecond)
			select {
			case <-t.C:
			case <-ctx.Done():
				t.Stop()
			}
		}
	}
	if have {
		release()
	} else {
		release()
		wait(e.ttl + lossSlack)
	}
	if err := <-releaseErr; !errors.Is(err, lock.ErrLost) {
		e.Errorf("Release by the holder that was cut off = %v, want an error matching ErrLost", err)
	}
	if !have {
		e.Fatalf("no other client acquired the lock after the partition healed and the old holder released")
	}
	if g.err != nil {
		e.Fatalf("Acquire by another client during the partition: %v", g.err)
	}
	if !g.holderLost {
		e.Errorf("another client acquired %v after the cut while the partitioned holder's Lost was still open", g.at.Sub(cut))
	} else if lost.closed() {
		e.figure("partition-margin", g.at.Sub(lost.at))
	}
	e.requireLocked(c, e.key, "the new owner holds it; the cut-off holder's Release must not have freed it")
	e.release(g.l)
}
