package conformance

import (
	"context"
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/distlock/lock"
	"github.com/distlock/lock/internal/durtext"
)

// outOfRangeTTLs are TTLs the portable layer must refuse for a driver with this
// TTL range: overflowing ones, just outside either end, zero and negative.
func outOfRangeTTLs(min, max time.Duration) []time.Duration {
	ttls := []time.Duration{math.MaxInt64, max + 1, max + time.Millisecond, 0, -1, -time.Second, math.MinInt64}
	if min > time.Nanosecond {
		ttls = append(ttls, min-1)
	}
	return ttls
}

// ttlRangeError checks that err rejects ttl as out of range, naming the range
// when the TTL is positive. It returns what is wrong, or "".
func ttlRangeError(err error, ttl, min, max time.Duration) string {
	switch {
	case !errors.Is(err, lock.ErrInvalidArgument):
		return "want an error matching ErrInvalidArgument"
	case ttl > 0 && !strings.Contains(err.Error(), "["+durtext.Format(min)+", "+durtext.Format(max)+"]"):
		return "want the message to name the accepted range [" + durtext.Format(min) + ", " + durtext.Format(max) + "]"
	}
	return ""
}

// Every TTL outside the driver's range, down to overflowing ones such as
// math.MaxInt64, is refused with ErrInvalidArgument naming the range, and
// changes nothing; the longest TTL in range gives a lock that does not expire
// at once.
func testTTLsOutsideRangeAreRejected(e *env) {
	min, max := e.caps.TTLRange()
	a, b := e.client(), e.client()
	for _, ttl := range outOfRangeTTLs(min, max) {
		opt := lock.WithTTL(ttl)
		check := func(call string, err error) {
			e.Helper()
			if what := ttlRangeError(err, ttl, min, max); what != "" {
				e.Errorf("%s with TTL %v (%d ns) = %v; %s", call, ttl, int64(ttl), err, what)
			}
		}
		// A short context each: a TTL taken for a valid one may leave the key
		// held, and the next call would wait for it.
		ctx, cancel := e.boundedCtx(2 * time.Second)
		drop := func(l *lock.Lock, err error) error {
			if err == nil {
				_ = l.Release(ctx)
			}
			return err
		}
		check("Acquire", drop(a.Acquire(ctx, e.key, opt)))
		check("TryAcquire", drop(a.TryAcquire(ctx, e.key, opt)))
		check("Do", a.Do(ctx, e.key, func(context.Context) error { return nil }, opt))
		d, err := e.h.NewDriver(e.ctx)
		if err != nil {
			e.Fatalf("Harness.NewDriver: %v", err)
		}
		lk := lock.New(d, append(append([]lock.Option{}, e.h.Options...), opt)...)
		err = drop(lk.TryAcquire(ctx, e.key))
		_ = lk.Close()
		cancel()
		check("TryAcquire on a Locker made with it", err)
	}
	l, err := b.TryAcquire(e.ctx, e.key)
	if err != nil {
		e.Fatalf("the key is not free after only rejected calls: %v", err)
	}
	e.release(l)

	// The longest TTL in range: held, and still held a moment later (a TTL that
	// overflowed into a tiny one would have expired).
	l = e.acquire(a, e.key, lock.WithTTL(max))
	time.Sleep(20 * time.Millisecond) // time must pass for a tiny TTL to show
	if isClosed(l.Lost()) {
		e.Errorf("a lock with the longest TTL %v was lost at once", max)
	}
	e.requireLocked(b, e.key, "held with the longest TTL in range")
	e.release(l)
}

// The driver's Capabilities state the TTLs Acquire accepts, as they are: a
// TTL of exactly MinTTL passes validation and one of exactly MaxTTL gives a
// lock; a nanosecond outside either is refused with ErrInvalidArgument; and a
// Locker over the driver reports the same range. (A driver whose MinTTL or
// MaxTTL is zero, or beyond what the portable layer enforces, tells its users
// a range that Acquire does not keep.)
func testCapabilitiesStateTheTTLRangeAcquireAccepts(e *env) {
	min, max := e.caps.MinTTL, e.caps.MaxTTL
	if min <= 0 || max <= 0 {
		lo, hi := e.caps.TTLRange()
		e.Fatalf("Capabilities declares MinTTL %v and MaxTTL %v; want the range Acquire accepts, [%v, %v]", min, max, lo, hi)
	}
	a := e.client()
	if got := a.Capabilities(); got.MinTTL != min || got.MaxTTL != max {
		e.Errorf("Locker.Capabilities() reports TTLs [%v, %v], the driver [%v, %v]", got.MinTTL, got.MaxTTL, min, max)
	}
	try := func(what string, ttl time.Duration) error {
		ctx, cancel := e.boundedCtx(5 * time.Second)
		defer cancel()
		l, err := a.TryAcquire(ctx, e.key+"/"+what, lock.WithTTL(ttl))
		if err == nil {
			_ = l.Release(ctx) // a lock of MinTTL may be lost already
		}
		return err
	}
	// MinTTL may be too short for a grant to keep any validity on a slow
	// round trip: any refusal but an invalid or unsupported TTL passes.
	if err := try("min", min); errors.Is(err, lock.ErrInvalidArgument) || errors.Is(err, lock.ErrUnsupported) {
		e.Errorf("TryAcquire with TTL %v, the reported MinTTL, = %v; want it accepted", min, err)
	}
	if err := try("max", max); err != nil {
		e.Errorf("TryAcquire with TTL %v, the reported MaxTTL, = %v; want a lock", max, err)
	}
	for _, c := range []struct {
		what string
		ttl  time.Duration
	}{{"below", min - 1}, {"above", max + 1}} {
		if err := try(c.what, c.ttl); !errors.Is(err, lock.ErrInvalidArgument) {
			e.Errorf("TryAcquire with TTL %v, a nanosecond %s the reported range [%v, %v], = %v; want ErrInvalidArgument", c.ttl, c.what, min, max, err)
		}
	}
}

// FuzzTTL checks any TTL through the portable layer over the harness's driver:
// a TTL outside the driver's range is refused with ErrInvalidArgument naming the
// range and leaves the key free; one inside never gives two holders whose Lost
// is open, and never breaks the Locker. Call it from a fuzz target:
//
//	func FuzzTTL(f *testing.F) { conformance.FuzzTTL(f, harness) }
//
// Its seed corpus (the range's ends, overflowing values) runs with go test.
func FuzzTTL(f *testing.F, h Harness) {
	ctx := context.Background()
	probe, err := h.NewDriver(ctx)
	if err != nil {
		f.Fatalf("Harness.NewDriver: %v", err)
	}
	caps := probe.Capabilities()
	_ = probe.Close()
	min, max := caps.TTLRange()
	for _, ttl := range append(outOfRangeTTLs(min, max), min, max, time.Nanosecond, time.Microsecond, time.Millisecond, 3*time.Millisecond, time.Second) {
		f.Add(int64(ttl))
	}
	otherTTL := time.Second
	if otherTTL < min {
		otherTTL = min
	}
	f.Fuzz(func(t *testing.T, n int64) {
		ttl := time.Duration(n)
		ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		open := func(opts ...lock.Option) *lock.Locker {
			d, err := h.NewDriver(ctx)
			if err != nil {
				t.Fatalf("Harness.NewDriver: %v", err)
			}
			lk := lock.New(d, append(append([]lock.Option{}, h.Options...), opts...)...)
			t.Cleanup(func() { _ = lk.Close() })
			return lk
		}
		a, b := open(lock.WithTTL(ttl)), open(lock.WithTTL(otherTTL))
		key := "conformance:FuzzTTL:" + time.Now().Format(time.RFC3339Nano)
		l, err := a.TryAcquire(ctx, key)
		if ttl < min || ttl > max {
			if what := ttlRangeError(err, ttl, min, max); what != "" {
				t.Fatalf("TryAcquire with TTL %v (%d ns) = %v; %s", ttl, n, err, what)
			}
			l2, err := b.TryAcquire(ctx, key)
			if err != nil {
				t.Fatalf("the key is not free after a rejected TTL %v: %v", ttl, err)
			}
			_ = l2.Release(ctx)
			return
		}
		if err != nil {
			// A TTL too short to leave any validity may be refused, but not as
			// out of range, and it leaves the key free once its TTL passed.
			if errors.Is(err, lock.ErrInvalidArgument) {
				t.Fatalf("TryAcquire with TTL %v, inside the range [%v, %v], = %v", ttl, min, max, err)
			}
			return
		}
		l2, err := b.TryAcquire(ctx, key)
		if err == nil {
			if !isClosed(l.Lost()) {
				t.Fatalf("two holders: another client took the key while the holder with TTL %v has its Lost open", ttl)
			}
			_ = l2.Release(ctx)
		} else if !errors.Is(err, lock.ErrLocked) {
			t.Fatalf("TryAcquire by another client while the key is held with TTL %v: %v", ttl, err)
		}
		if err := l.Release(ctx); err == nil {
			l3, err := b.TryAcquire(ctx, key)
			if err != nil {
				t.Fatalf("the key is not free after its holder (TTL %v) released it: %v", ttl, err)
			}
			_ = l3.Release(ctx)
		}
	})
}
