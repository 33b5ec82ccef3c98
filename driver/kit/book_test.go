package kit

import (
	"context"
	"errors"
	"slices"
	"testing"

	"github.com/distlock/lock/driver"
)

type hold struct{ name string }

// Close hands every hold back once, shuts the gate (nothing is recorded,
// every call is refused) and closes Done; a second Close hands back nothing.
func TestBookCloseHandsBackEveryHoldOnceAndShutsTheGate(t *testing.T) {
	b := NewBook[string, *hold]()
	a, c := &hold{"a"}, &hold{"c"}
	b.Lock()
	if err := b.PutLocked("a", a); err != nil {
		t.Fatal(err)
	}
	if err := b.PutLocked("c", c); err != nil {
		t.Fatal(err)
	}
	held, first := b.CloseLocked()
	b.Unlock()
	names := []string{}
	for _, h := range held {
		names = append(names, h.name)
	}
	slices.Sort(names)
	if !first || !slices.Equal(names, []string{"a", "c"}) {
		t.Fatalf("first Close: held %v, first %v; want [a c], true", names, first)
	}
	select {
	case <-b.Done():
	default:
		t.Fatal("Done is open after Close")
	}
	b.Lock()
	defer b.Unlock()
	if held, first := b.CloseLocked(); first || held != nil {
		t.Fatalf("second Close: held %v, first %v; want nothing", held, first)
	}
	if err := b.PutLocked("d", &hold{"d"}); !errors.Is(err, driver.ErrClosed) {
		t.Fatalf("Put after Close: %v, want ErrClosed", err)
	}
	if h := b.GetLocked("a"); h != nil {
		t.Fatalf("a hold handed back by Close is still in the table: %v", h)
	}
	if !b.ClosedLocked() {
		t.Fatal("ClosedLocked is false after Close")
	}
	if err := b.OpenLocked(); !errors.Is(err, driver.ErrClosed) {
		t.Fatalf("OpenLocked after Close: %v, want ErrClosed", err)
	}
}

// A hold replaced under its key (the same owner took it anew) is not removed
// by the end of the hold it replaced.
func TestBookForgetKeepsAHoldTakenAnew(t *testing.T) {
	b := NewBook[string, *hold]()
	old, renewed := &hold{"old"}, &hold{"new"}
	b.Lock()
	defer b.Unlock()
	_ = b.PutLocked("k", old)
	_ = b.PutLocked("k", renewed)
	if h, ok := b.LookupLocked("k"); !ok || h != renewed || b.LenLocked() != 1 {
		t.Fatalf("LookupLocked = %v, %v with %d holds; want the renewed hold, alone", h, ok, b.LenLocked())
	}
	if b.ForgetLocked("k", old) {
		t.Fatal("ForgetLocked removed the hold that replaced the one it named")
	}
	if b.GetLocked("k") != renewed {
		t.Fatal("the renewed hold is gone")
	}
	if !b.ForgetLocked("k", renewed) || b.GetLocked("k") != nil {
		t.Fatal("ForgetLocked of the current hold did not remove it")
	}
	if h, ok := b.TakeLocked("k"); ok || h != nil {
		t.Fatalf("TakeLocked of a forgotten key: %v, %v", h, ok)
	}
	if _, ok := b.LookupLocked("k"); ok || b.LenLocked() != 0 {
		t.Fatal("a forgotten hold is still found")
	}
}

// Check answers the context's error first, then the gate's.
func TestBookCheckRefusesAnEndedContextAndAClosedBook(t *testing.T) {
	b := NewBook[string, *hold]()
	if err := b.Check(context.Background()); err != nil {
		t.Fatalf("Check of an open book: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := b.Check(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("Check with an ended context: %v", err)
	}
	b.Lock()
	b.CloseLocked()
	b.Unlock()
	if err := b.Check(context.Background()); !errors.Is(err, driver.ErrClosed) {
		t.Fatalf("Check after Close: %v, want ErrClosed", err)
	}
}
