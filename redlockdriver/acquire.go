package redlockdriver

import (
	"context"
	"errors"
	"fmt"
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

// judge decides a round's outcome.
func (d *Driver) judge(v vote, req *request) outcome {
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
	o := d.judge(v, req)
	if o == won {
		d.record(req, v)
		return driver.Grant{Start: v.start}, nil
	}
	d.giveBack(k, req, v, o == late)
	return driver.Grant{}, d.failed(v, o)
}
