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

// Store is what a client needs of the protected resource (in process or
// over HTTP from a client process).
type Store interface {
	Read(ctx context.Context, key string) (int64, error)
	Write(ctx context.Context, client, hold int, key string, token uint64, read, call int64) (bool, error)
}

// ClientConfig is one client's loop.
type ClientConfig struct {
	ID   int
	Keys int
	TTL  time.Duration
	Seed int64
	// Record receives every acquire, release and loss as it completes.
	Record func(check.Op)
	// GrantStart, if set, returns the Start of the grant just taken of key
	// (zero when the driver left it to the portable layer).
	GrantStart func(key string) time.Time
	// NoExpiry: locks are refreshed automatically and cannot expire; a hold
	// lasts until its release or loss (no ValidUntil is recorded).
	NoExpiry bool
}

func now() int64 { return time.Now().UnixNano() }

// drift is the portable layer's allowance.
func drift(ttl time.Duration) time.Duration { return driver.Drift(ttl) }

// Client loops TryAcquire -> read-modify-write with the token -> release until
// ctx ends. Locks are taken without auto-refresh and held for less than the
// TTL, so a grant's validity ends no earlier than its call + TTL - drift.
func Client(ctx context.Context, lk *lock.Locker, st Store, cfg ClientConfig) error {
	rng := rand.New(rand.NewSource(cfg.Seed))
	hold := 0
	for ctx.Err() == nil {
		key := fmt.Sprintf("soak-%d", rng.Intn(cfg.Keys))
		call := now()
		actx, cancel := context.WithTimeout(ctx, cfg.TTL)
		l, err := lk.TryAcquire(actx, key)
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
		// The holder's validity, as the portable layer computes it: from
		// the grant's Start, or from the call when the driver left it zero
		// (the layer's own start is no earlier than ours).
		from := call
		if cfg.GrantStart != nil {
			if s := cfg.GrantStart(key); !s.IsZero() {
				from = s.UnixNano()
			}
		}
		valid := from + int64(cfg.TTL-drift(cfg.TTL))
		if cfg.NoExpiry {
			valid = 0
		}
		cfg.Record(check.Op{Kind: check.Acquire, Client: cfg.ID, Hold: h, Key: key, Token: l.Token(),
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
		// Hold, refresh (sometimes after the TTL has passed: a correct
		// driver reports the loss), hold, write, release.
		sleep(ctx, time.Duration(rng.Int63n(int64(cfg.TTL)*6/5+1)))
		fcall := now()
		fctx, cancel := context.WithTimeout(ctx, cfg.TTL)
		err = l.Refresh(fctx)
		cancel()
		if err == nil {
			valid := fcall + int64(cfg.TTL-drift(cfg.TTL))
			if cfg.NoExpiry {
				valid = 0
			}
			cfg.Record(check.Op{Kind: check.Refresh, Client: cfg.ID, Hold: h, Key: key, Call: fcall, Return: now(), ValidUntil: valid})
			sleep(ctx, time.Duration(rng.Int63n(int64(cfg.TTL/4)+1)))
			wctx, cancel := context.WithTimeout(ctx, cfg.TTL)
			wcall := now()
			if v, err := st.Read(wctx, key); err == nil {
				_, _ = st.Write(wctx, cfg.ID, h, key, l.Token(), v, wcall)
			}
			cancel()
		}
		rcall := now()
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cfg.TTL)
		err = l.Release(rctx)
		cancel()
		if err == nil || errors.Is(err, lock.ErrLost) {
			cfg.Record(check.Op{Kind: check.Release, Client: cfg.ID, Hold: h, Key: key, Call: rcall, Return: now()})
		}
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
