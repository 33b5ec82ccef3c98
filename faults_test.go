package lock_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/distlock/lock"
	"github.com/distlock/lock/driver"
	"github.com/distlock/lock/filedriver"
	"github.com/distlock/lock/memdriver"
)

// ranged is memdriver declaring a TTL range, as a backend with a minimum lease
// and a unit that overflows would.
type ranged struct{ *memdriver.Driver }

func (r ranged) Capabilities() driver.Capabilities {
	c := r.Driver.Capabilities()
	c.MinTTL, c.MaxTTL = 20*time.Millisecond, time.Hour
	return c
}

func TestTTLOutsideTheDriversRangeIsRejectedAndChangesNothing(t *testing.T) {
	ctx := context.Background()
	lk := lock.New(ranged{memdriver.New(t.Name())})
	defer lk.Close()
	for _, ttl := range []time.Duration{math.MaxInt64, time.Hour + 1, 20*time.Millisecond - 1, 1} {
		_, err := lk.Acquire(ctx, "k", lock.WithTTL(ttl))
		if !errors.Is(err, lock.ErrInvalidArgument) {
			t.Fatalf("Acquire with TTL %v = %v, want ErrInvalidArgument", ttl, err)
		}
		if !strings.Contains(err.Error(), "[20ms, 1h]") {
			t.Errorf("error %q does not name the range [20ms, 1h]", err)
		}
	}
	// Nothing was taken: the bounds themselves are accepted.
	for _, ttl := range []time.Duration{20 * time.Millisecond, time.Hour} {
		l, err := lk.TryAcquire(ctx, "k", lock.WithTTL(ttl))
		if err != nil {
			t.Fatalf("TryAcquire with TTL %v at the range's edge = %v", ttl, err)
		}
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

func TestOpenRejectsATTLBeyondEveryDriversMaximum(t *testing.T) {
	_, err := lock.Open(context.Background(), "mem://"+t.Name()+"?ttl=9000h")
	if !errors.Is(err, lock.ErrInvalidArgument) || !strings.Contains(err.Error(), "TTL 375 days is outside this backend's range [10ms, 366 days]") {
		t.Fatalf("Open with ttl=9000h = %v, want ErrInvalidArgument naming the TTL and the range as people write them, 375 days and [10ms, 366 days]", err)
	}
}

// FuzzTTL: whatever the TTL, Acquire either refuses it as invalid or returns a
// lock that is valid and excludes others; no arithmetic wraps it into a lock
// that expired at once.
func FuzzTTL(f *testing.F) {
	for _, seed := range []int64{math.MaxInt64, math.MinInt64, 0, -1, 1, int64(driver.DefaultMaxTTL), int64(driver.DefaultMaxTTL) + 1, int64(time.Second)} {
		f.Add(seed)
	}
	ctx := context.Background()
	f.Fuzz(func(t *testing.T, ttl int64) {
		d := memdriver.New("fuzz-ttl")
		a, b := lock.New(d), lock.New(d)
		defer a.Close()
		defer b.Close()
		l, err := a.TryAcquire(ctx, "k", lock.WithTTL(time.Duration(ttl)))
		min, max := d.Capabilities().TTLRange()
		if time.Duration(ttl) < min || time.Duration(ttl) > max {
			if !errors.Is(err, lock.ErrInvalidArgument) {
				t.Fatalf("TTL %v outside [%v, %v]: TryAcquire = %v, want ErrInvalidArgument", time.Duration(ttl), min, max, err)
			}
			return
		}
		if err != nil {
			t.Fatalf("TTL %v: %v", time.Duration(ttl), err)
		}
		defer l.Release(ctx)
		if time.Duration(ttl) < time.Second {
			return // short enough to expire while we look
		}
		select {
		case <-l.Lost():
			t.Fatalf("TTL %v: Lost closed at once", time.Duration(ttl))
		default:
		}
		if _, err := b.TryAcquire(ctx, "k"); !errors.Is(err, lock.ErrLocked) {
			t.Fatalf("TTL %v: a second holder's TryAcquire = %v, want ErrLocked", time.Duration(ttl), err)
		}
	})
}

// staleFirst is memdriver whose first grant arrives after its validity has
// gone, as a grant does whose request was sent before the backend stalled past
// the TTL.
type staleFirst struct {
	*memdriver.Driver
	grants, releases atomic.Int64
}

func (s *staleFirst) TryAcquire(ctx context.Context, req *driver.Request) (driver.Grant, error) {
	g, err := s.Driver.TryAcquire(ctx, req)
	if err == nil && s.grants.Add(1) == 1 {
		g.Start = time.Now().Add(-req.TTL)
	}
	return g, err
}

func (s *staleFirst) Acquire(ctx context.Context, req *driver.Request) (driver.Grant, error) {
	return s.TryAcquire(ctx, req)
}

func (s *staleFirst) Release(ctx context.Context, req *driver.Request) error {
	s.releases.Add(1)
	return s.Driver.Release(ctx, req)
}

func TestAcquireNeverReturnsAGrantWhoseValidityIsGone(t *testing.T) {
	ctx := context.Background()
	d := &staleFirst{Driver: memdriver.New(t.Name())}
	lk := lock.New(d, lock.WithTTL(time.Second))
	defer lk.Close()
	start := time.Now()
	l, err := lk.Acquire(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(ctx)
	if n := d.grants.Load(); n != 2 {
		t.Fatalf("Acquire returned after %d grants, want the stale one given back and a second", n)
	}
	if d.releases.Load() != 1 {
		t.Errorf("the stale grant was released %d times, want once", d.releases.Load())
	}
	if isClosed(l.Lost()) {
		t.Fatalf("Acquire returned a lock whose Lost had closed (after %v)", time.Since(start))
	}
}

func TestTryAcquireRefusesAStaleGrantAndLeavesNothing(t *testing.T) {
	ctx := context.Background()
	d := &staleFirst{Driver: memdriver.New(t.Name())}
	lk := lock.New(d, lock.WithTTL(time.Second))
	defer lk.Close()
	_, err := lk.TryAcquire(ctx, "k")
	if !errors.Is(err, lock.ErrUnavailable) {
		t.Fatalf("TryAcquire with a stale grant = %v, want ErrUnavailable", err)
	}
	l, err := lk.TryAcquire(ctx, "k")
	if err != nil {
		t.Fatalf("the stale grant was left behind: TryAcquire = %v", err)
	}
	_ = l.Release(ctx)
}

// failing is memdriver whose TryAcquire fails with err for its first n calls.
type failing struct {
	*memdriver.Driver
	err   error
	n     int64
	calls atomic.Int64
}

func (f *failing) TryAcquire(ctx context.Context, req *driver.Request) (driver.Grant, error) {
	if f.calls.Add(1) <= f.n {
		return driver.Grant{}, f.err
	}
	return f.Driver.TryAcquire(ctx, req)
}

func (f *failing) Acquire(ctx context.Context, req *driver.Request) (driver.Grant, error) {
	if f.calls.Add(1) <= f.n {
		return driver.Grant{}, f.err
	}
	return f.Driver.Acquire(ctx, req)
}

func TestAcquireRetriesTransientErrorsAsLongAsItsContextAllows(t *testing.T) {
	for _, transient := range []error{
		fmt.Errorf("%w: LOADING Redis is loading the dataset in memory", driver.ErrUnavailable),
		fmt.Errorf("dial tcp 127.0.0.1:1: %w", syscall.ECONNREFUSED),
		fmt.Errorf("read: %w", syscall.ECONNRESET),
	} {
		d := &failing{Driver: memdriver.New(t.Name()), err: transient, n: 20}
		lk := lock.New(d, lock.WithBackoff(lock.Backoff{Min: time.Millisecond, Max: 2 * time.Millisecond}))
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		l, err := lk.Acquire(ctx, "k")
		cancel()
		if err != nil {
			t.Fatalf("Acquire through 20 failures of %q = %v, want the lock", transient, err)
		}
		_ = l.Release(context.Background())
		lk.Close()
	}
}

func TestAcquireFailsAtOnceOnAPermanentBackendError(t *testing.T) {
	refused := errors.New("WRONGPASS invalid username-password pair")
	d := &failing{Driver: memdriver.New(t.Name()), err: refused, n: math.MaxInt64}
	lk := lock.New(d)
	defer lk.Close()
	_, err := lk.Acquire(context.Background(), "k")
	if !errors.Is(err, lock.ErrBackend) || !errors.Is(err, refused) {
		t.Fatalf("Acquire = %v, want ErrBackend wrapping the backend's error", err)
	}
	if n := d.calls.Load(); n != 1 {
		t.Errorf("%d attempts, want 1: a permanent error is not retried", n)
	}
}

func TestAcquireEndingWithItsContextReportsTheLastBackendError(t *testing.T) {
	down := fmt.Errorf("dial: %w", syscall.ECONNREFUSED)
	d := &failing{Driver: memdriver.New(t.Name()), err: down, n: math.MaxInt64}
	lk := lock.New(d, lock.WithBackoff(lock.Backoff{Min: time.Millisecond, Max: 10 * time.Millisecond}))
	defer lk.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	_, err := lk.Acquire(ctx, "k")
	if !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, lock.ErrUnavailable) || !errors.Is(err, syscall.ECONNREFUSED) {
		t.Fatalf("Acquire = %v, want the context's error and the last failure (ErrUnavailable, ECONNREFUSED)", err)
	}
	if n := d.calls.Load(); n < 4 {
		t.Errorf("only %d attempts in 200ms", n)
	}
	// TryAcquire makes one attempt and says why it failed.
	_, err = lk.TryAcquire(context.Background(), "k")
	if !errors.Is(err, lock.ErrUnavailable) {
		t.Errorf("TryAcquire = %v, want ErrUnavailable", err)
	}
}

// unconfirmed is a file driver whose refreshes never get through, as when its
// checks of the session time out while the session itself lives on.
type unconfirmed struct{ *filedriver.Driver }

func (u unconfirmed) Refresh(context.Context, *driver.Request) error {
	return fmt.Errorf("%w: check timed out", driver.ErrUnavailable)
}

func newFileDriver(t *testing.T, dir string) *filedriver.Driver {
	t.Helper()
	d, err := filedriver.New(dir)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// A session lock lost by its deadline stays held on the backend, so no one else
// runs while its holder may still be working, until the holder releases it.
func TestLockLostByDeadlineStaysHeldOnTheBackendUntilReleased(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	holder := lock.New(unconfirmed{newFileDriver(t, dir)}, lock.WithTTL(200*time.Millisecond))
	defer holder.Close()
	other := lock.New(newFileDriver(t, dir))
	defer other.Close()

	l, err := holder.Acquire(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-l.Lost():
	case <-time.After(5 * time.Second):
		t.Fatal("Lost did not close although no refresh was confirmed")
	}
	if _, err := other.TryAcquire(ctx, "k"); !errors.Is(err, lock.ErrLocked) {
		t.Fatalf("after the holder's deadline, before its Release: TryAcquire = %v, want ErrLocked", err)
	}
	if err := l.Release(ctx); !errors.Is(err, lock.ErrLost) {
		t.Fatalf("Release of a lapsed lock = %v, want ErrLost", err)
	}
	l2, err := other.TryAcquire(ctx, "k")
	if err != nil {
		t.Fatalf("after the holder's Release: TryAcquire = %v, want the lock", err)
	}
	_ = l2.Release(ctx)
	if err := l.Release(ctx); !errors.Is(err, lock.ErrLost) {
		t.Errorf("second Release = %v, want ErrLost again", err)
	}
}

func TestCloseReleasesLocksLostByTheirDeadline(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	holder := lock.New(unconfirmed{newFileDriver(t, dir)}, lock.WithTTL(200*time.Millisecond))
	other := lock.New(newFileDriver(t, dir))
	defer other.Close()
	l, err := holder.Acquire(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	<-l.Lost()
	if err := holder.Close(); err != nil {
		t.Fatal(err)
	}
	l2, err := other.TryAcquire(ctx, "k")
	if err != nil {
		t.Fatalf("after the holder's Close: TryAcquire = %v, want the lock", err)
	}
	_ = l2.Release(ctx)
}

// blockedRelease is memdriver whose Release waits for its context to end, as on
// a frozen server.
type blockedRelease struct {
	*memdriver.Driver
	deadline atomic.Pointer[time.Time]
	seen     chan struct{} // closed by the first Release, once its deadline is stored
	giveUp   chan struct{} // closed by the test to end a waiting Release early
}

func (b *blockedRelease) Release(ctx context.Context, _ *driver.Request) error {
	if dl, ok := ctx.Deadline(); ok {
		b.deadline.Store(&dl)
	}
	close(b.seen)
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-b.giveUp:
		return fmt.Errorf("%w: given up", driver.ErrUnavailable)
	}
}

func TestCloseIsBoundedByTheCloseTimeoutOnAnUnresponsiveBackend(t *testing.T) {
	ctx := context.Background()
	for _, c := range []struct {
		opts []lock.Option
		want time.Duration
	}{
		{[]lock.Option{lock.WithCloseTimeout(150 * time.Millisecond)}, 150 * time.Millisecond},
		{nil, lock.DefaultCloseTimeout},
	} {
		d := &blockedRelease{Driver: memdriver.New(t.Name() + c.want.String()), seen: make(chan struct{}), giveUp: make(chan struct{})}
		lk := lock.New(d, c.opts...)
		if _, err := lk.Acquire(ctx, "k"); err != nil {
			t.Fatal(err)
		}
		if c.want == lock.DefaultCloseTimeout {
			// Not waited for: the bound is read off the release's context.
			closed := make(chan error, 1)
			go func() { closed <- lk.Close() }()
			<-d.seen
			close(d.giveUp)
			<-closed
			dl := d.deadline.Load()
			if dl == nil {
				t.Fatal("Close's release got no deadline")
			}
			if left := time.Until(*dl); left > c.want || left < c.want-time.Second {
				t.Errorf("Close's release deadline is %v away, want about %v", left, c.want)
			}
			continue
		}
		start := time.Now()
		err := lk.Close()
		if took := time.Since(start); took > c.want+time.Second {
			t.Errorf("Close took %v, want about %v", took, c.want)
		}
		if !errors.Is(err, lock.ErrUnavailable) && !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("Close = %v, want the release's timeout reported", err)
		}
	}
}

func init() {
	driver.Register("hang", func(ctx context.Context, _ driver.Config) (driver.Driver, error) {
		dl, ok := ctx.Deadline()
		if !ok {
			return nil, errors.New("opener got no deadline")
		}
		openDeadlines <- time.Until(dl)
		<-ctx.Done()
		return nil, fmt.Errorf("dial: %w", ctx.Err())
	})
}

var openDeadlines = make(chan time.Duration, 10)

func TestOpenIsBoundedWithoutADeadlineOfItsOwn(t *testing.T) {
	start := time.Now()
	_, err := lock.Open(context.Background(), "hang://x?open_timeout=150ms")
	if took := time.Since(start); took > time.Second {
		t.Errorf("Open with open_timeout=150ms took %v", took)
	}
	if !errors.Is(err, lock.ErrUnavailable) || !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Open = %v, want ErrUnavailable and DeadlineExceeded", err)
	}
	<-openDeadlines

	// Without open_timeout and without a deadline, the default bounds it.
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := lock.Open(ctx, "hang://x")
		done <- err
	}()
	left := <-openDeadlines
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Errorf("Open after cancel = %v, want context.Canceled", err)
	}
	if left > lock.DefaultOpenTimeout || left < lock.DefaultOpenTimeout-time.Second {
		t.Errorf("the opener's deadline was %v away, want about DefaultOpenTimeout %v", left, lock.DefaultOpenTimeout)
	}
}

func isClosed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

func TestGraceMakesLostCloseThatMuchEarlier(t *testing.T) {
	ctx := context.Background()
	const ttl, grace = time.Second, 300 * time.Millisecond
	lk := lock.New(hangingRefresh{memdriver.New(t.Name())}, lock.WithTTL(ttl))
	defer lk.Close()
	if _, err := lk.TryAcquire(ctx, "k", lock.WithGrace(ttl/2)); !errors.Is(err, lock.ErrInvalidArgument) {
		t.Fatalf("a grace of half the TTL: TryAcquire = %v, want ErrInvalidArgument", err)
	}
	start := time.Now()
	l, err := lk.Acquire(ctx, "k", lock.WithGrace(grace))
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-l.Lost():
	case <-time.After(2 * ttl):
		t.Fatal("Lost did not close although no refresh was ever confirmed")
	}
	took := time.Since(start)
	if took < (ttl-grace)*9/10 || took > ttl-grace/2 {
		t.Errorf("Lost closed after %v, want at TTL - drift - grace = about %v", took, ttl-grace)
	}
	_ = l.Release(ctx)
}

// What a Locker reports is what it accepts, even over a driver that leaves its
// TTL range zero: Capabilities' MinTTL and MaxTTL are the range's ends.
func TestLockerCapabilitiesStateTheTTLRangeItEnforces(t *testing.T) {
	ctx := context.Background()
	lk := lock.New(nopDriver{})
	defer lk.Close()
	c := lk.Capabilities()
	if c.MinTTL != driver.FloorTTL || c.MaxTTL != driver.DefaultMaxTTL {
		t.Fatalf("Capabilities() = [%v, %v], want [%v, %v]", c.MinTTL, c.MaxTTL, driver.FloorTTL, driver.DefaultMaxTTL)
	}
	for _, ttl := range []time.Duration{c.MinTTL, c.MaxTTL} {
		if _, err := lk.TryAcquire(ctx, "k", lock.WithTTL(ttl)); errors.Is(err, lock.ErrInvalidArgument) {
			t.Errorf("TryAcquire with TTL %v, a reported end = %v", ttl, err)
		}
	}
	for _, ttl := range []time.Duration{c.MinTTL - 1, c.MaxTTL + 1} {
		if _, err := lk.TryAcquire(ctx, "k", lock.WithTTL(ttl)); !errors.Is(err, lock.ErrInvalidArgument) {
			t.Errorf("TryAcquire with TTL %v, just outside the reported range = %v, want ErrInvalidArgument", ttl, err)
		}
	}
}
