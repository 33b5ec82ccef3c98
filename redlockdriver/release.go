package redlockdriver

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/distlock/lock/driver"
)

// Release deletes the lock on every server where req.Owner holds it, telling
// the waiting drivers, and returns driver.ErrNotHeld when a majority did not
// hold it (it had expired or was taken over). It never deletes another owner's
// lock. For an owner still waiting in Acquire it also leaves nothing behind.
func (d *Driver) Release(ctx context.Context, req *Request) error {
	if err := d.begin(ctx); err != nil {
		return err
	}
	defer d.calls.Done()
	k := d.keys(req.Key)
	inbox := ""
	d.mu.Lock()
	if d.groups[k.lock] == nil && d.sub.started {
		inbox = d.inbox // nobody here waits for the key any more
	}
	d.mu.Unlock()
	// A round that reaches too few servers leaves the outcome unknown; try
	// again (owner-checked, so harmless) before saying so.
	var err error
	for range releaseRounds {
		if err = d.release(ctx, k, req, true, inbox); !errors.Is(err, ErrNoQuorum) || ctx.Err() != nil {
			break
		}
	}
	return err
}

// releaseRounds is how many rounds Release makes before it reports that too
// few servers answered.
const releaseRounds = 3

// release runs release.lua on every server and waits until a majority
// confirmed the delete, or every server answered or timed out. With inbox set
// it also removes that inbox's registration as a waiter.
func (d *Driver) release(ctx context.Context, k keys, req *Request, notify bool, inbox string) error {
	n := "0"
	if notify {
		n = "1"
	}
	keys := []string{k.lock, k.waiters}
	args := []any{req.Owner, n, inbox}
	// A release is sent even when ctx has ended: what it deletes is ours.
	start := time.Now()
	dl := start.Add(d.timeoutFor(req.TTL))
	r := d.send(opRelease, dl, 1, func(int) ([]string, []any) { return keys, args })
	var deleted, not int
	var firstErr error
	for deleted < d.quorum && not <= len(d.servers)-d.quorum {
		rep, ok := r.next()
		if !ok {
			break
		}
		switch n, _ := rep.val.(int64); {
		case rep.err != nil:
			if firstErr == nil {
				firstErr = d.serverError(rep.server, rep.err)
			}
		case n == 1:
			deleted++
		default:
			not++
		}
	}
	r.stop()
	switch {
	case deleted >= d.quorum:
		return nil
	case not > len(d.servers)-d.quorum:
		return driver.ErrNotHeld
	case firstErr == nil:
		firstErr = errTimeout
	}
	return fmt.Errorf("%w: released on %d, not held on %d of %d servers, the others did not answer (%w)",
		ErrNoQuorum, deleted, not, len(d.servers), firstErr)
}
