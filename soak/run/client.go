package run

import (
	"context"
	"errors"
	"fmt"
	"math/rand"
	"time"

	"github.com/distlock/lock"
	"github.com/distlock/lock/driver"
	"github.com/distlock/lock/soak/check"
)

// Store is what a client needs of the protected resource (in process, or
// over HTTP from a client process).
type Store interface {
	Read(ctx context.Context, client, hold int, key string, token uint64, call, deadline int64) (value int64, ok bool, err error)
	Write(ctx context.Context, client, hold int, key string, token uint64, read, call, deadline int64) (ok bool, err error)
}

// ClientConfig is one client's loop.
type ClientConfig struct {
	ID   int
	Keys int
	TTL  time.Duration
	Seed int64
	// Record receives every acquire, release and loss as it completes.
	Record func(check.Op)
	// Gate is the client's driver wrapper: it records refreshes for the
	// current hold and knows each grant's Start.
	Gate *Gate
	// Unfenced: the backend gives no fencing tokens; the client sends token 0
	// and, as the deadline of each read and write, the end of its validity.
	Unfenced bool
}

func now() int64 { return time.Now().UnixNano() }

// Client loops Acquire or TryAcquire -> refresh -> fenced read-modify-write -> release
// until ctx ends. Holds are shorter than the TTL, except that the refresh
// sometimes comes after it (a correct driver then reports the loss). Every
// hold's validity is recorded: from the grant's Start (or the call, the
// grant starting no earlier) plus the TTL less the drift, and from each
// refresh the gate records.
func Client(ctx context.Context, lk *lock.Locker, st Store, cfg ClientConfig) error {
	rng := rand.New(rand.NewSource(cfg.Seed))
	hold := 0
	for ctx.Err() == nil {
		key := fmt.Sprintf("soak-%d", rng.Intn(cfg.Keys))
		cfg.Gate.SetHold(hold + 1)
		call := now()
		// Half the attempts wait (Acquire: the backend's wake-ups and the
		// handoff path), half do not (TryAcquire).
		wait := rng.Intn(2) == 0
		actx, cancel := context.WithTimeout(ctx, cfg.TTL)
		var l *lock.Lock
		var err error
		if wait {
			l, err = lk.Acquire(actx, key)
		} else {
			l, err = lk.TryAcquire(actx, key)
		}
		cancel()
		if err != nil {
			if ctx.Err() == nil {
				sleep(ctx, time.Duration(rng.Intn(5)+1)*time.Millisecond)
			}
			continue
		}
		ret := now()
		hold++
		h := hold
		from := call
		if s := cfg.Gate.GrantStart(key); !s.IsZero() {
			from = s.UnixNano()
		}
		var token uint64
		if !cfg.Unfenced {
			token = l.Token()
		}
		valid := from + int64(cfg.TTL-driver.Drift(cfg.TTL))
		cfg.Record(check.Op{Kind: check.Acquire, Client: cfg.ID, Hold: h, Key: key, Token: token,
			Call: call, Return: ret, ValidUntil: valid})
		lostDone, released := make(chan struct{}), make(chan struct{})
		go func() {
			defer close(lostDone)
			select {
			case <-l.Lost():
				t := now()
				cfg.Record(check.Op{Kind: check.Lost, Client: cfg.ID, Hold: h, Key: key, Call: t, Return: t})
			case <-released:
			}
		}()
		sleep(ctx, time.Duration(rng.Int63n(int64(cfg.TTL)*6/5+1)))
		fctx, cancel := context.WithTimeout(ctx, cfg.TTL)
		err = l.Refresh(fctx)
		cancel()
		if err == nil {
			sleep(ctx, time.Duration(rng.Int63n(int64(cfg.TTL/4)+1)))
			wctx, cancel := context.WithTimeout(ctx, cfg.TTL)
			var deadline int64
			if cfg.Unfenced {
				deadline = max(valid, cfg.Gate.ValidUntil())
			}
			if v, ok, err := st.Read(wctx, cfg.ID, h, key, token, now(), deadline); err == nil && ok {
				_, _ = st.Write(wctx, cfg.ID, h, key, token, v, now(), deadline)
			}
			cancel()
		}
		// The hold ends when the client decides to release: it does not touch
		// the resource after that. A Release that failed leaves the lock held
		// (and refreshed, where the layer refreshes it): try again until it
		// is released or known lost, so that no lock outlives its hold. The
		// decision is recorded before the first attempt: that attempt may
		// free the lock on the servers it reaches and let another client in
		// while the outcome stays unknown (Redlock with a server frozen), and
		// a client killed before the Release returns would otherwise seem to
		// hold the lock until the kill.
		rcall := now()
		cfg.Record(check.Op{Kind: check.Releasing, Client: cfg.ID, Hold: h, Key: key, Call: rcall, Return: rcall})
		for attempt := 0; ; attempt++ {
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cfg.TTL)
			err = l.Release(rctx)
			cancel()
			if err == nil || errors.Is(err, lock.ErrLost) || errors.Is(err, lock.ErrClosed) {
				break
			}
			if attempt > 0 && ctx.Err() != nil {
				break // the soak is over: Close releases what is left
			}
			sleep(context.WithoutCancel(ctx), cfg.TTL/10)
		}
		cfg.Record(check.Op{Kind: check.Release, Client: cfg.ID, Hold: h, Key: key, Call: rcall, Return: now()})
		close(released)
		<-lostDone
	}
	return nil
}

func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}
