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

// ErrNotLeader is what IsLeader returns while this instance does not lead.
var ErrNotLeader = errors.New("gocronlock: not the leader")

// Elector is a gocron.Elector on a distlock election: it campaigns in the
// background and IsLeader says whether it leads now. It is safe for
// concurrent use. It does not own the *lock.Locker: close it after Close.
type Elector struct {
	l    *lock.Locker
	name string
	o    electorOptions

	stop context.CancelFunc
	done chan struct{} // closed when the campaign loop has returned

	mu     sync.Mutex
	leader *lock.Leadership // nil while not leading
	err    error            // why the campaign ended for good, if it did
}

var _ gocron.Elector = (*Elector)(nil)

type electorOptions struct {
	value    string
	campaign []lock.AcquireOption
	retry    lock.Backoff
}

// ElectorOption configures an Elector.
type ElectorOption func(*electorOptions)

// WithValue sets the value published with the leadership (an address, a host
// name), which lock.Locker.Leader and Observe report. The default is empty.
func WithValue(v string) ElectorOption {
	return func(o *electorOptions) { o.value = v }
}

// WithCampaignOptions passes options to each Campaign (lock.WithTTL,
// lock.WithOwnerName, ...). The TTL bounds how long a dead leader's
// leadership outlives it on expiring backends.
func WithCampaignOptions(opts ...lock.AcquireOption) ElectorOption {
	return func(o *electorOptions) { o.campaign = append(o.campaign, opts...) }
}

// DefaultRetry is how long the Elector waits before campaigning again after
// Campaign failed (it retries transient backend failures itself, so these are
// permanent ones, an authentication error for example) or after a leadership
// lost within Max of being won: from Min, doubling up to Max.
var DefaultRetry = lock.Backoff{Min: 100 * time.Millisecond, Max: 10 * time.Second}

// NewElector starts campaigning for the election name on l, and goes on,
// campaigning again after each loss, until ctx ends or Close is called.
// value and options as for lock.Locker.Campaign, given by WithValue and
// WithCampaignOptions. A name or option that Campaign can never accept
// (lock.ErrInvalidKey, lock.ErrInvalidArgument, lock.ErrUnsupported) ends
// the campaign, and IsLeader returns that error.
func NewElector(ctx context.Context, l *lock.Locker, name string, opts ...ElectorOption) (*Elector, error) {
	if l == nil {
		return nil, fmt.Errorf("gocronlock: NewElector: %w: nil *lock.Locker", lock.ErrInvalidArgument)
	}
	if ctx == nil {
		return nil, fmt.Errorf("gocronlock: NewElector: %w: nil context", lock.ErrInvalidArgument)
	}
	o := electorOptions{retry: DefaultRetry}
	for _, opt := range opts {
		opt(&o)
	}
	e := &Elector{l: l, name: name, o: o, done: make(chan struct{})}
	ctx, e.stop = context.WithCancel(ctx)
	go e.run(ctx)
	return e, nil
}

// IsLeader returns nil while this instance leads, and an error matching
// ErrNotLeader otherwise (and also the error that ended the campaign, if it
// ended for good), or ctx's error. gocron runs a due job only when it
// returns nil.
func (e *Elector) IsLeader(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	ld := e.Leadership()
	if ld == nil {
		e.mu.Lock()
		defer e.mu.Unlock()
		if e.err != nil {
			return fmt.Errorf("%w: %w", ErrNotLeader, e.err)
		}
		return ErrNotLeader
	}
	return nil
}

// Leadership returns this instance's leadership while it leads (for its
// Token, a fencing term, and its Lost channel), or nil.
func (e *Elector) Leadership() *lock.Leadership {
	e.mu.Lock()
	ld := e.leader
	e.mu.Unlock()
	if ld == nil {
		return nil
	}
	select {
	case <-ld.Lost():
		return nil
	default:
		return ld
	}
}

// Close stops campaigning and resigns a leadership held, so that another
// instance leads at once. Calling it again does nothing.
func (e *Elector) Close() error {
	e.stop()
	<-e.done
	return nil
}

// run campaigns until ctx ends.
func (e *Elector) run(ctx context.Context) {
	defer close(e.done)
	wait := time.Duration(0)
	for {
		ld, err := e.l.Campaign(ctx, e.name, e.o.value, e.o.campaign...)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			if errors.Is(err, lock.ErrClosed) || errors.Is(err, lock.ErrInvalidKey) ||
				errors.Is(err, lock.ErrInvalidArgument) || errors.Is(err, lock.ErrUnsupported) {
				e.mu.Lock()
				e.err = err
				e.mu.Unlock()
				return
			}
			wait = min(max(2*wait, e.o.retry.Min), e.o.retry.Max)
			if !sleep(ctx, wait) {
				return
			}
			continue
		}
		won := time.Now()
		e.mu.Lock()
		e.leader = ld
		e.mu.Unlock()
		select {
		case <-ld.Lost():
		case <-ctx.Done():
		}
		e.mu.Lock()
		e.leader = nil
		e.mu.Unlock()
		// After a loss too: a leadership lost by its deadline stays held on a
		// session backend until it is given back (see lock.Lock.Release).
		rctx, cancel := context.WithTimeout(context.Background(), ReleaseTimeout)
		_ = ld.Resign(rctx)
		cancel()
		if ctx.Err() != nil {
			return
		}
		// A leadership lost soon after it was won (a backend that keeps
		// failing its refreshes) backs off like a failed campaign, so that
		// the loop does not spin; one that lasted starts afresh.
		if time.Since(won) < e.o.retry.Max {
			wait = min(max(2*wait, e.o.retry.Min), e.o.retry.Max)
			if !sleep(ctx, wait) {
				return
			}
		} else {
			wait = 0
		}
	}
}

// sleep waits d, and reports false if ctx ended first.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
