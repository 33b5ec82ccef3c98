package lock_test

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/distlock/lock"
	"github.com/distlock/lock/driver"
	"github.com/distlock/lock/memdriver"
)

// lockers returns two Lockers over one in-memory store, closed at the end.
func lockers(t *testing.T) (*lock.Locker, *lock.Locker) {
	t.Helper()
	a := lock.New(memdriver.New(t.Name()), lock.WithTTL(5*time.Second))
	b := lock.New(memdriver.New(t.Name()), lock.WithTTL(5*time.Second))
	t.Cleanup(func() {
		for _, lk := range []*lock.Locker{a, b} {
			if err := lk.Close(); err != nil {
				t.Errorf("Close: %v", err)
			}
		}
	})
	return a, b
}

func testContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// free asserts that lk can take each key now (and gives it back).
func free(t *testing.T, ctx context.Context, lk *lock.Locker, keys ...string) {
	t.Helper()
	for _, k := range keys {
		l, err := lk.TryAcquire(ctx, k)
		if err != nil {
			t.Errorf("TryAcquire(%q) = %v, want the key free", k, err)
			continue
		}
		if err := l.Release(ctx); err != nil {
			t.Error(err)
		}
	}
}

// held asserts that lk cannot take any of keys now.
func held(t *testing.T, ctx context.Context, lk *lock.Locker, keys ...string) {
	t.Helper()
	for _, k := range keys {
		if l, err := lk.TryAcquire(ctx, k); !errors.Is(err, lock.ErrLocked) {
			if err == nil {
				_ = l.Release(ctx)
			}
			t.Errorf("TryAcquire(%q) = %v, want ErrLocked", k, err)
		}
	}
}

func TestAcquireAllTakesEachKeyOnceInByteOrder(t *testing.T) {
	a, b := lockers(t)
	ctx := testContext(t)
	s, err := a.AcquireAll(ctx, []string{"b", "a", "b", "C", "c"})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := s.Keys(), []string{"C", "a", "b", "c"}; !slices.Equal(got, want) {
		t.Errorf("Keys = %q, want %q", got, want)
	}
	for _, k := range s.Keys() {
		if l := s.Lock(k); l == nil || l.Key() != k {
			t.Errorf("Lock(%q) = %v", k, l)
		}
	}
	if l := s.Lock("z"); l != nil {
		t.Errorf("Lock of a key outside the set = %v, want nil", l)
	}
	held(t, ctx, b, "a", "b", "c", "C")
	if err := s.Err(); err != nil {
		t.Errorf("Err while held = %v", err)
	}
	if err := s.Release(ctx); err != nil {
		t.Fatal(err)
	}
	free(t, ctx, b, "a", "b", "c", "C")
	if err := s.Release(ctx); err != nil {
		t.Errorf("second Release = %v, want nil", err)
	}
	if err := s.Err(); !errors.Is(err, lock.ErrNotHeld) {
		t.Errorf("Err after Release = %v, want ErrNotHeld", err)
	}
	select {
	case <-s.Lost():
		t.Error("Release closed Lost")
	default:
	}
}

func TestTryAcquireAllWithOneKeyHeldElsewhereTakesNone(t *testing.T) {
	a, b := lockers(t)
	ctx := testContext(t)
	other, err := b.Acquire(ctx, "b")
	if err != nil {
		t.Fatal(err)
	}
	_, err = a.TryAcquireAll(ctx, []string{"c", "b", "a"})
	var le *lock.Error
	if !errors.Is(err, lock.ErrLocked) || !errors.As(err, &le) || le.Key != "b" {
		t.Fatalf("TryAcquireAll = %v, want ErrLocked naming key b", err)
	}
	free(t, ctx, b, "a", "c")
	if err := other.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// askSpy closes asked when its driver is first asked for key.
type askSpy struct {
	*memdriver.Driver
	key   string
	asked chan struct{}
	once  sync.Once
}

func (s *askSpy) saw(req *driver.Request) {
	if req.Key == s.key {
		s.once.Do(func() { close(s.asked) })
	}
}

func (s *askSpy) TryAcquire(ctx context.Context, req *driver.Request) (driver.Grant, error) {
	s.saw(req)
	return s.Driver.TryAcquire(ctx, req)
}

func (s *askSpy) Acquire(ctx context.Context, req *driver.Request) (driver.Grant, error) {
	s.saw(req)
	return s.Driver.Acquire(ctx, req)
}

func TestAcquireAllEndedByItsContextGivesBackWhatItTook(t *testing.T) {
	_, b := lockers(t)
	spy := &askSpy{Driver: memdriver.New(t.Name()), key: "c", asked: make(chan struct{})}
	a := lock.New(spy, lock.WithTTL(5*time.Second))
	defer a.Close()
	ctx := testContext(t)
	blocker, err := b.Acquire(ctx, "c")
	if err != nil {
		t.Fatal(err)
	}
	actx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		_, err := a.AcquireAll(actx, []string{"a", "b", "c"})
		done <- err
	}()
	// Keys are taken in order: asked for c, the set holds a and b.
	select {
	case <-spy.asked:
	case <-ctx.Done():
		t.Fatal("AcquireAll never asked for c")
	}
	cancel()
	err = <-done
	var le *lock.Error
	if !errors.Is(err, context.Canceled) || !errors.As(err, &le) || le.Key != "c" {
		t.Fatalf("AcquireAll = %v, want context.Canceled naming key c", err)
	}
	free(t, ctx, b, "a", "b")
	if err := blocker.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

func TestBadKeySetsAreInvalidAndTakeNothing(t *testing.T) {
	a, b := lockers(t)
	ctx := testContext(t)
	many := make([]string, lock.MaxSetSize+1)
	for i := range many {
		many[i] = "k" + strconv.Itoa(i)
	}
	for _, c := range []struct {
		name string
		keys []string
		want error
	}{
		{"empty", nil, lock.ErrInvalidArgument},
		{"too many", many, lock.ErrInvalidArgument},
		{"a bad key", []string{"a", ""}, lock.ErrInvalidKey},
		{"a long key", []string{"a", strings.Repeat("x", lock.MaxKeyLen+1)}, lock.ErrInvalidKey},
	} {
		if _, err := a.AcquireAll(ctx, c.keys); !errors.Is(err, c.want) {
			t.Errorf("%s: AcquireAll = %v, want %v", c.name, err, c.want)
		}
		if _, err := a.TryAcquireAll(ctx, c.keys); !errors.Is(err, c.want) {
			t.Errorf("%s: TryAcquireAll = %v, want %v", c.name, err, c.want)
		}
	}
	free(t, ctx, b, "a", "k0")
	//lint:ignore SA1012 a nil context is what is tested
	if _, err := a.AcquireAll(nil, []string{"a"}); !errors.Is(err, lock.ErrInvalidArgument) {
		t.Errorf("AcquireAll(nil ctx) = %v, want ErrInvalidArgument", err)
	}
	if err := a.DoAll(ctx, []string{"a"}, nil); !errors.Is(err, lock.ErrInvalidArgument) {
		t.Errorf("DoAll(nil fn) = %v, want ErrInvalidArgument", err)
	}
	many = many[:lock.MaxSetSize]
	s, err := a.TryAcquireAll(ctx, append(many, many...))
	if err != nil {
		t.Fatalf("a set of MaxSetSize keys, each named twice: %v", err)
	}
	if err := s.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

func TestLostMemberClosesTheSetsLostAndNamesItsKey(t *testing.T) {
	a, b := lockers(t)
	ctx := testContext(t)
	s, err := a.AcquireAll(ctx, []string{"a", "b", "c"})
	if err != nil {
		t.Fatal(err)
	}
	if err := b.ForceRelease(ctx, "b"); err != nil {
		t.Fatal(err)
	}
	select {
	case <-s.Lost():
	case <-ctx.Done():
		t.Fatal("the set's Lost did not close after a member was force-released")
	}
	var le *lock.Error
	if err := s.Err(); !errors.Is(err, lock.ErrLost) || !errors.Is(err, lock.ErrForceReleased) || !errors.As(err, &le) || le.Key != "b" {
		t.Errorf("Err = %v, want ErrLost and ErrForceReleased naming key b", err)
	}
	err = s.Release(ctx)
	if !errors.Is(err, lock.ErrLost) {
		t.Errorf("Release of a set with a lost member = %v, want the member's loss", err)
	}
	free(t, ctx, b, "a", "b", "c")
}

func TestDoAllCancelsFnWhenAMemberIsLostAndReportsIt(t *testing.T) {
	a, b := lockers(t)
	ctx := testContext(t)
	err := a.DoAll(ctx, []string{"x", "y"}, func(fctx context.Context) error {
		s, ok := lock.SetFromContext(fctx)
		if !ok || !slices.Equal(s.Keys(), []string{"x", "y"}) {
			t.Errorf("SetFromContext = %v, %v", s, ok)
		}
		if err := b.ForceRelease(ctx, "y"); err != nil {
			return err
		}
		<-fctx.Done()
		if cause := context.Cause(fctx); !errors.Is(cause, lock.ErrLost) {
			t.Errorf("fn's context ended with %v, want ErrLost", cause)
		}
		return nil
	})
	var le *lock.Error
	if !errors.Is(err, lock.ErrLost) || !errors.As(err, &le) || le.Key != "y" {
		t.Errorf("DoAll = %v, want ErrLost naming key y", err)
	}
	free(t, ctx, b, "x", "y")
	if err := a.DoAll(ctx, []string{"x", "y"}, func(context.Context) error { return nil }); err != nil {
		t.Errorf("DoAll = %v", err)
	}
	free(t, ctx, b, "x", "y")
	if _, ok := lock.SetFromContext(ctx); ok {
		t.Error("SetFromContext of a context DoAll did not make = true")
	}
	// Inside a DoAll FromContext finds no Lock; a Do nested in it finds both.
	err = a.DoAll(ctx, []string{"x"}, func(sctx context.Context) error {
		if l, ok := lock.FromContext(sctx); ok {
			t.Errorf("FromContext inside DoAll = %v, true; want false", l)
		}
		return a.Do(sctx, "z", func(dctx context.Context) error {
			l, lok := lock.FromContext(dctx)
			s, sok := lock.SetFromContext(dctx)
			if !lok || l.Key() != "z" || !sok || s.Lock("x") == nil {
				t.Errorf("inside Do inside DoAll: FromContext %v %v, SetFromContext %v %v", l, lok, s, sok)
			}
			return nil
		})
	})
	if err != nil {
		t.Errorf("Do nested in DoAll: %v", err)
	}
}

// countingDriver counts the requests of each kind a memdriver gets.
type countingDriver struct {
	*memdriver.Driver
	mu            sync.Mutex
	single, multi int
}

func (c *countingDriver) TryAcquire(ctx context.Context, req *driver.Request) (driver.Grant, error) {
	c.mu.Lock()
	c.single++
	c.mu.Unlock()
	return c.Driver.TryAcquire(ctx, req)
}

func (c *countingDriver) Acquire(ctx context.Context, req *driver.Request) (driver.Grant, error) {
	c.mu.Lock()
	c.single++
	c.mu.Unlock()
	return c.Driver.Acquire(ctx, req)
}

func (c *countingDriver) TryAcquireSet(ctx context.Context, reqs []*driver.Request) ([]driver.Grant, error) {
	c.mu.Lock()
	c.multi++
	c.mu.Unlock()
	return c.Driver.TryAcquireSet(ctx, reqs)
}

func (c *countingDriver) counts() (single, multi int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	single, multi = c.single, c.multi
	c.single, c.multi = 0, 0
	return single, multi
}

// Free keys are taken in one request where the driver can take a set at
// once; a set with a key held elsewhere falls back to one key at a time,
// with the same all-or-nothing result.
func TestAcquireAllOfFreeKeysIsOneRequestWhereTheDriverCan(t *testing.T) {
	_, b := lockers(t)
	d := &countingDriver{Driver: memdriver.New(t.Name())}
	a := lock.New(d, lock.WithTTL(5*time.Second))
	defer a.Close()
	ctx := testContext(t)

	s, err := a.AcquireAll(ctx, []string{"d", "c", "b", "a"})
	if err != nil {
		t.Fatal(err)
	}
	if single, multi := d.counts(); single != 0 || multi != 1 {
		t.Errorf("AcquireAll of 4 free keys made %d single and %d set requests, want 0 and 1", single, multi)
	}
	held(t, ctx, b, "a", "b", "c", "d")
	if err := s.Release(ctx); err != nil {
		t.Fatal(err)
	}
	free(t, ctx, b, "a", "b", "c", "d")

	blocker, err := b.Acquire(ctx, "c")
	if err != nil {
		t.Fatal(err)
	}
	_, err = a.TryAcquireAll(ctx, []string{"a", "b", "c", "d"})
	var le *lock.Error
	if !errors.Is(err, lock.ErrLocked) || !errors.As(err, &le) || le.Key != "c" {
		t.Errorf("TryAcquireAll with c held = %v, want ErrLocked naming c", err)
	}
	if single, multi := d.counts(); multi != 1 || single != 3 {
		t.Errorf("TryAcquireAll with c held made %d single and %d set requests, want the set's, then a, b, c", single, multi)
	}
	free(t, ctx, b, "a", "b", "d")
	done := make(chan error, 1)
	go func() {
		s, err := a.AcquireAll(ctx, []string{"a", "c"})
		if err == nil {
			err = s.Release(ctx)
		}
		done <- err
	}()
	if err := blocker.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Errorf("AcquireAll waiting for c: %v", err)
	}
}
