package lock_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/distlock/lock"
	"github.com/distlock/lock/driver"
	"github.com/distlock/lock/memdriver"
)

// The label a holder publishes is JSON an operator can read on the backend,
// with the owner name and value escaped, and Inspect reads it back unchanged.
func TestLabelIsReadableJSONAndRoundTrips(t *testing.T) {
	ctx := context.Background()
	rec := &recorder{}
	name := `web "1" \ ü`
	lk := lock.New(rec, lock.WithOwnerName(name))
	defer lk.Close()
	if _, err := lk.TryAcquire(ctx, "k"); err != nil {
		t.Fatal(err)
	}
	var got struct {
		Owner string `json:"owner"`
		Since int64  `json:"since"`
	}
	lb := rec.asked()[0].Label
	if err := json.Unmarshal([]byte(lb), &got); err != nil || got.Owner != name {
		t.Fatalf("label %q: %+v, %v; want owner %q", lb, got, err, name)
	}
	if d := time.Since(time.UnixMilli(got.Since)); d < 0 || d > time.Minute {
		t.Errorf("label since %v, want about now", time.UnixMilli(got.Since))
	}

	mem := lock.New(memdriver.New(t.Name()), lock.WithOwnerName(name))
	defer mem.Close()
	ld, err := mem.Campaign(ctx, "e", `value "with" quotes`)
	if err != nil {
		t.Fatal(err)
	}
	l, err := mem.Leader(ctx, "e")
	if err != nil || l.Owner != name || l.Value != `value "with" quotes` || l.Name != "e" {
		t.Fatalf("Leader = %+v, %v", l, err)
	}
	if ld.Name() != "e" {
		t.Errorf("Leadership.Name = %q, want the election's name e", ld.Name())
	}
	_ = ld.Resign(ctx)
}

// Bad owner names and values are refused with ErrInvalidArgument before the
// driver is asked.
func TestBadOwnerNamesAndValuesAreRefused(t *testing.T) {
	ctx := context.Background()
	for _, bad := range []string{strings.Repeat("x", 257), "a\nb", "\xff"} {
		rec := &recorder{}
		lk := lock.New(rec)
		if _, err := lk.TryAcquire(ctx, "k", lock.WithOwnerName(bad)); !errors.Is(err, lock.ErrInvalidArgument) {
			t.Errorf("owner name %q: %v, want ErrInvalidArgument", bad, err)
		}
		if _, err := lk.Campaign(ctx, "k", bad+strings.Repeat("y", 1024)); !errors.Is(err, lock.ErrInvalidArgument) {
			t.Errorf("value %q...: %v, want ErrInvalidArgument", bad, err)
		}
		if n := len(rec.asked()); n != 0 {
			t.Errorf("the driver was asked %d times", n)
		}
		lk.Close()
	}
	lk := lock.New(&recorder{})
	defer lk.Close()
	for _, opts := range [][]lock.Option{{lock.WithShared(true)}, {lock.WithPermits(2)}, {lock.WithAutoRefresh(false)}} {
		if _, err := lk.Campaign(ctx, "k", "v", opts...); !errors.Is(err, lock.ErrInvalidArgument) {
			t.Errorf("Campaign with a shape or without refresh: %v, want ErrInvalidArgument", err)
		}
	}
}

// A driver without the optional interfaces makes the calls that need them
// ErrUnsupported, and Observe's channel closes at once.
func TestInspectionWithoutDriverSupportIsUnsupported(t *testing.T) {
	ctx := context.Background()
	lk := lock.New(nopDriver{})
	defer lk.Close()
	if _, err := lk.Inspect(ctx, "k"); !errors.Is(err, lock.ErrUnsupported) {
		t.Errorf("Inspect: %v", err)
	}
	if _, err := lk.List(ctx, ""); !errors.Is(err, lock.ErrUnsupported) {
		t.Errorf("List: %v", err)
	}
	if err := lk.ForceRelease(ctx, "k"); !errors.Is(err, lock.ErrUnsupported) {
		t.Errorf("ForceRelease: %v", err)
	}
	if _, err := lk.Leader(ctx, "k"); !errors.Is(err, lock.ErrUnsupported) {
		t.Errorf("Leader: %v", err)
	}
	if _, ok := <-lk.Observe(ctx, "k"); ok {
		t.Error("Observe delivered on a driver that cannot inspect")
	}
	ld, err := lk.Campaign(ctx, "k", "v")
	if err != nil {
		t.Fatal(err)
	}
	if err := ld.Proclaim(ctx, "w"); !errors.Is(err, lock.ErrUnsupported) {
		t.Errorf("Proclaim: %v", err)
	}
}

// Err is nil while held, ErrNotHeld after Release, ErrLost with ErrClosed
// after Close.
func TestErrTellsWhyALockEnded(t *testing.T) {
	ctx := context.Background()
	lk := lock.New(memdriver.New(t.Name()))
	l, err := lk.Acquire(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Err(); err != nil {
		t.Errorf("Err while held: %v", err)
	}
	_ = l.Release(ctx)
	if err := l.Err(); !errors.Is(err, lock.ErrNotHeld) || errors.Is(err, lock.ErrLost) {
		t.Errorf("Err after Release: %v, want ErrNotHeld only", err)
	}
	l, _ = lk.Acquire(ctx, "b")
	lk.Close()
	if err := l.Err(); !errors.Is(err, lock.ErrLost) || !errors.Is(err, lock.ErrClosed) {
		t.Errorf("Err after Close: %v, want ErrLost and ErrClosed", err)
	}
}

// Observe ends when the Locker closes, leaving no goroutine behind.
func TestObserveEndsWhenTheLockerCloses(t *testing.T) {
	lk := lock.New(memdriver.New(t.Name()))
	ch := lk.Observe(context.Background(), "e")
	if l := <-ch; l.Elected {
		t.Fatalf("first report %+v, want no leader", l)
	}
	done := make(chan struct{})
	go func() {
		for range ch {
		}
		close(done)
	}()
	lk.Close()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Observe's channel stayed open after Close")
	}
}

// slowRelabel is a memdriver without a clock of its own (as the file driver
// is), whose Relabel waits until an Inspect has seen the holder: so Observe
// looks between a campaign's grant and the republishing of its label with
// the moment it won, as it can on a backend where the two are separate
// writes.
type slowRelabel struct {
	*memdriver.Driver
	once, again     sync.Once
	relabelled      atomic.Bool
	looked, looked2 chan struct{} // an Inspect saw the holder; and again after its relabelling
}

func (s *slowRelabel) Inspect(ctx context.Context, key string) (driver.Info, error) {
	relabelled := s.relabelled.Load()
	in, err := s.Driver.Inspect(ctx, key)
	for i := range in.Holders {
		in.Holders[i].Since = time.Time{} // no backend clock: the label's time counts
	}
	if err == nil && len(in.Holders) == 1 {
		s.once.Do(func() { close(s.looked) })
		if relabelled {
			s.again.Do(func() { close(s.looked2) })
		}
	}
	return in, err
}

// Acquire lets the clock pass the millisecond of the campaign's label, so
// that the republished start differs from it.
func (s *slowRelabel) Acquire(ctx context.Context, req *driver.Request) (driver.Grant, error) {
	g, err := s.Driver.Acquire(ctx, req)
	nextMilli()
	return g, err
}

func (s *slowRelabel) TryAcquire(ctx context.Context, req *driver.Request) (driver.Grant, error) {
	g, err := s.Driver.TryAcquire(ctx, req)
	nextMilli()
	return g, err
}

func nextMilli() {
	for start := time.Now().UnixMilli(); time.Now().UnixMilli() == start; {
		time.Sleep(100 * time.Microsecond)
	}
}

func (s *slowRelabel) Relabel(ctx context.Context, req *driver.Request, label string) error {
	select {
	case <-s.looked:
	case <-ctx.Done():
		return ctx.Err()
	}
	err := s.Driver.Relabel(ctx, req, label)
	s.relabelled.Store(true)
	return err
}

// A leader whose start is republished after Observe saw it is not reported
// again: the next report is the vacancy after it resigns.
func TestObserveReportsALeaderOnceThoughItsStartIsRepublished(t *testing.T) {
	d := &slowRelabel{Driver: memdriver.New(t.Name()), looked: make(chan struct{}), looked2: make(chan struct{})}
	lk := lock.New(d)
	defer lk.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ch := lk.Observe(ctx, "e")
	next := func() lock.Leader {
		t.Helper()
		select {
		case l := <-ch:
			return l
		case <-ctx.Done():
			t.Fatal("Observe delivered nothing")
			return lock.Leader{}
		}
	}
	if l := next(); l.Elected {
		t.Fatalf("first report %+v, want no leader", l)
	}
	ld, err := lk.Campaign(ctx, "e", "v")
	if err != nil {
		t.Fatal(err)
	}
	if l := next(); !l.Elected || l.Value != "v" {
		t.Fatalf("report %+v, want leader v", l)
	}
	select { // Observe has seen the republished label
	case <-d.looked2:
	case <-ctx.Done():
		t.Fatal("Observe did not look after the relabelling")
	}
	if err := ld.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	if l := next(); l.Elected {
		t.Fatalf("report %+v after the resignation, want no leader", l)
	}
}
