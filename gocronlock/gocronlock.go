// Package gocronlock runs gocron v2 (github.com/go-co-op/gocron/v2) jobs on
// several instances with distlock as the coordinator: Locker implements
// gocron.Locker (one instance runs each due job) and Elector implements
// gocron.Elector (one instance, the leader, runs all jobs), on any backend a
// *lock.Locker opens.
//
//	locker, err := lock.Open(ctx, os.Getenv("LOCK_URL"))
//	...
//	s, err := gocron.NewScheduler(gocron.WithDistributedLocker(
//		gocronlock.NewLocker(locker, gocronlock.WithMinHold(30*time.Second))))
//
// # How gocron uses a Locker, and what WithMinHold is for
//
// Every instance's scheduler calls Lock(ctx, jobName) when the job is due on
// that instance, runs the job if Lock returned a lock, skips this run if Lock
// returned an error, and calls Unlock when the job function returns. Lock
// never waits here: it makes one attempt (Locker.TryAcquire), and a job held
// by another instance is an error matching lock.ErrLocked, so that instance
// skips the run instead of running it again after the holder finishes.
//
// gocron's instances do not tick at the same instant: their clocks differ, a
// DurationJob counts from each process's start unless WithStartAt aligns it,
// and timers fire late on a busy host. A lock held only while the job runs
// therefore excludes only runs that overlap: a job shorter than the offset
// between two instances is finished and unlocked before the later instance
// asks, and runs twice for one due time. This is what every gocron locker
// that releases at Unlock does (gocron issue #841). The Locker by default
// does the same, as gocron's contract says; WithMinHold(d) keeps the lock
// after Unlock until d has passed since it was taken, which gives:
//
//   - Successive runs of a job, on all instances together, begin at least d
//     apart (d on the clock of the instance that ran the earlier one), and
//     never overlap, for as long as the lock is not lost: these are the
//     lock's own guarantees, and a holder whose process is paused past its
//     TTL, or a backend that loses the lock, can break them (see package
//     lock).
//   - A due time on an instance whose Lock comes more than d after the run
//     that holds the lock began is not excluded: it runs.
//
// So with d larger than the largest offset between the instances' ticks of
// one due time, and smaller than the interval minus that offset, every due
// time runs exactly once. For jobs aligned to the interval (cron expressions,
// or DurationJob with WithStartAt on a round time) half the interval is the
// widest margin on both sides. For unaligned instances (DurationJob started
// at each process's start) d close to the interval, say 90% of it, makes
// successive runs 0.9 to 1 interval apart (the instance that ran last ticks
// again one interval later), each on whichever instance ticks first once the
// previous run's hold is over. Nothing here can know a job's next due time
// (gocron's Locker interface passes only the job's name), so d is the
// caller's choice.
//
// The hold after Unlock is a timer, not a goroutine; the lock stays refreshed
// by the *lock.Locker meanwhile. Close releases every lock still in its hold.
//
// # Elector
//
// Elector campaigns for leadership of one election in the background for as
// long as it lives (Locker.Campaign), campaigns again after losing it, and
// answers IsLeader with nil only while it leads and its leadership's Lost
// channel is open. A leader that dies stops leading when its lock is freed:
// at once on session backends that notice the death (file, PostgreSQL,
// ZooKeeper once the session expires), after the TTL on expiring ones
// (Redis, etcd); the next leader's scheduler runs at its next due time after
// that.
//
// # What neither can do
//
// gocron gives a running job no way to learn that its lock or leadership was
// lost (its context is the job's, not the lock's): a job that runs longer
// than the backend can keep its lock alive, or on a leader that was deposed
// while it ran, runs on. Keep jobs short against the TTL, and pass
// (*Elector).Leadership's token to resources that must reject a deposed
// leader's writes (see package lock on fencing).
package gocronlock

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/distlock/lock"
	"github.com/go-co-op/gocron/v2"
)

// DefaultKeyPrefix is put before gocron's job name to make the lock key, so
// that a job named like one of the program's own locks is a different lock.
const DefaultKeyPrefix = "gocron/"

// ReleaseTimeout bounds each release of a lock: at Unlock, when a hold ends,
// and at Close.
const ReleaseTimeout = 5 * time.Second

// Locker is a gocron.Locker on a distlock *lock.Locker. It is safe for
// concurrent use. It does not own the *lock.Locker: close it after Close.
type Locker struct {
	l    *lock.Locker
	o    lockerOptions
	wg   sync.WaitGroup // holds whose release has not finished
	mu   sync.Mutex
	hold map[*Lock]*time.Timer // locks unlocked by gocron, kept until their hold ends
	done bool
}

var (
	_ gocron.Locker = (*Locker)(nil)
	_ gocron.Lock   = (*Lock)(nil)
)

type lockerOptions struct {
	minHold time.Duration
	prefix  string
	acquire []lock.AcquireOption
}

// LockerOption configures a Locker.
type LockerOption func(*lockerOptions)

// WithMinHold keeps each job's lock until d has passed since Lock took it,
// even when the job ended sooner, so that successive runs of a job on all
// instances begin at least d apart (see the package documentation for how
// to choose d). The default is 0: the lock is held while the job runs only.
// A negative d counts as 0.
func WithMinHold(d time.Duration) LockerOption {
	return func(o *lockerOptions) { o.minHold = max(d, 0) }
}

// WithKeyPrefix sets what is put before the job's name to make its lock key
// (default DefaultKeyPrefix). Every instance must use the same prefix.
func WithKeyPrefix(p string) LockerOption {
	return func(o *lockerOptions) { o.prefix = p }
}

// WithLockOptions passes options to each TryAcquire (lock.WithTTL,
// lock.WithOwnerName, ...).
func WithLockOptions(opts ...lock.AcquireOption) LockerOption {
	return func(o *lockerOptions) { o.acquire = append(o.acquire, opts...) }
}

// NewLocker returns a gocron.Locker that locks each job on l.
func NewLocker(l *lock.Locker, opts ...LockerOption) *Locker {
	o := lockerOptions{prefix: DefaultKeyPrefix}
	for _, opt := range opts {
		opt(&o)
	}
	return &Locker{l: l, o: o, hold: map[*Lock]*time.Timer{}}
}

// Lock takes the lock of the job named key without waiting. It returns an
// error matching lock.ErrLocked when another instance (or this one's
// previous run, still in its hold) has it, so that gocron skips this run,
// and the error of lock.Locker.TryAcquire otherwise (lock.ErrUnavailable
// when the backend could not be asked, lock.ErrClosed after Close).
func (lk *Locker) Lock(ctx context.Context, key string) (gocron.Lock, error) {
	lk.mu.Lock()
	closed := lk.done
	lk.mu.Unlock()
	if closed {
		return nil, &lock.Error{Op: "gocron-lock", Key: lk.o.prefix + key, Err: lock.ErrClosed}
	}
	if lk.l == nil {
		return nil, &lock.Error{Op: "gocron-lock", Key: lk.o.prefix + key, Err: fmt.Errorf("%w: NewLocker was given a nil *lock.Locker", lock.ErrInvalidArgument)}
	}
	l, err := lk.l.TryAcquire(ctx, lk.o.prefix+key, lk.o.acquire...)
	if err != nil {
		return nil, err
	}
	return &Lock{lk: lk, l: l, taken: time.Now()}, nil
}

// Close releases the locks still in their hold and waits for the releases
// under way. Lock returns lock.ErrClosed after it; locks that jobs still hold
// are released by their Unlock. Calling Close again does nothing.
func (lk *Locker) Close() error {
	lk.mu.Lock()
	lk.done = true
	var held []*Lock
	for h, t := range lk.hold {
		// Whoever deletes a hold releases it: a timer that already fired
		// finds it gone and does nothing.
		t.Stop()
		delete(lk.hold, h)
		held = append(held, h)
	}
	lk.mu.Unlock()
	var errs []error
	for _, h := range held {
		// A lock lost in its hold, or released already by a *lock.Locker
		// closed first, is not an error here.
		if err := h.release(context.Background()); err != nil && !errors.Is(err, lock.ErrNotHeld) && !errors.Is(err, lock.ErrClosed) {
			errs = append(errs, err)
		}
		lk.wg.Done()
	}
	lk.wg.Wait()
	return errors.Join(errs...)
}

// Lock is one run's lock, as gocron holds it.
type Lock struct {
	lk    *Locker
	l     *lock.Lock
	taken time.Time // monotonic: when the lock was taken

	mu       sync.Mutex
	unlocked bool
}

// Token returns the lock's fencing token (see lock.Lock.Token).
func (h *Lock) Token() uint64 { return h.l.Token() }

// Lost returns a channel that closes when the lock may no longer be held.
func (h *Lock) Lost() <-chan struct{} { return h.l.Lost() }

// Unlock ends the run: it releases the lock at once, or, with WithMinHold,
// when the hold ends. It releases even when ctx is already done (gocron
// passes the job's context, which ends when the scheduler shuts down),
// within ReleaseTimeout. It returns an error matching lock.ErrLost if the
// lock was lost while the job ran. Calling it again does nothing.
func (h *Lock) Unlock(ctx context.Context) error {
	h.mu.Lock()
	again := h.unlocked
	h.unlocked = true
	h.mu.Unlock()
	if again {
		return nil
	}
	if rest := h.lk.o.minHold - time.Since(h.taken); rest > 0 && h.l.Err() == nil {
		lk := h.lk
		lk.mu.Lock()
		if !lk.done {
			lk.wg.Add(1)
			lk.hold[h] = time.AfterFunc(rest, func() { lk.endHold(h) })
			lk.mu.Unlock()
			return nil
		}
		lk.mu.Unlock()
	}
	return h.release(ctx)
}

// endHold releases h when its hold ends, unless Close took it first.
func (lk *Locker) endHold(h *Lock) {
	lk.mu.Lock()
	_, ok := lk.hold[h]
	delete(lk.hold, h)
	lk.mu.Unlock()
	if !ok {
		return
	}
	defer lk.wg.Done()
	// Nobody waits for this result: a lock lost during its hold has already
	// done its work, and a failed release expires with the lock's TTL.
	_ = h.release(context.Background())
}

func (h *Lock) release(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), ReleaseTimeout)
	defer cancel()
	if err := h.l.Release(ctx); err != nil {
		return fmt.Errorf("gocronlock: unlock %s: %w", h.l.Key(), err)
	}
	return nil
}
