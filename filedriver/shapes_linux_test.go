//go:build linux

package filedriver

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/distlock/lock/driver"
)

// The writer-preference rule, step by step: a reader holds the key; a writer
// waits; a reader arriving now is refused by TryAcquire and waits in Acquire,
// while the reader that arrived first keeps its hold. When it leaves, the
// writer takes the key, and the waiting reader follows the writer with a
// larger token.
func TestWaitingWriterHoldsBackLaterReadersNotEarlierOnes(t *testing.T) {
	dir := t.TempDir()
	dr, dw, dl := newDriver(t, dir), newDriver(t, dir), newDriver(t, dir)
	wBlocked, lBlocked := blockedHook(dw), blockedHook(dl)
	ctx := testCtx(t)
	early := sharedReq("k", "early")
	mustAcquire(t, dr, early)
	writer := newReq("k", "writer")
	wGot := goAcquire(ctx, dw, writer)
	waitFor(t, wBlocked, "the writer to wait")

	if _, err := dl.TryAcquire(ctx, sharedReq("k", "try")); !errors.Is(err, driver.ErrLocked) {
		t.Fatalf("shared TryAcquire while a writer waits = %v, want ErrLocked", err)
	}
	late := sharedReq("k", "late")
	lGot := goAcquire(ctx, dl, late)
	waitFor(t, lBlocked, "the late reader to wait")
	if err := dr.Refresh(ctx, early); err != nil {
		t.Fatalf("the early reader lost its hold: %v", err)
	}
	// Another early reader's retry (same owner) is its own hold, not a newcomer.
	if _, err := dr.TryAcquire(ctx, early); err != nil {
		t.Fatalf("retry by the early reader: %v", err)
	}

	if err := dr.Release(ctx, early); err != nil {
		t.Fatal(err)
	}
	w := waitFor(t, wGot, "the writer to take the key")
	if w.err != nil {
		t.Fatal(w.err)
	}
	select {
	case r := <-lGot:
		t.Fatalf("the late reader took the key beside the writer: %+v", r)
	default:
	}
	if err := dw.Release(ctx, writer); err != nil {
		t.Fatal(err)
	}
	l := waitFor(t, lGot, "the late reader to take the key after the writer")
	if l.err != nil {
		t.Fatal(l.err)
	}
	if l.g.Token <= w.g.Token {
		t.Fatalf("the late reader's token %d is not above the writer's %d", l.g.Token, w.g.Token)
	}
}

// A writer that gives up waiting stops holding readers back: the reader
// waiting behind it joins the reader that holds the key.
func TestCancelledWriterLetsTheReadersBehindItIn(t *testing.T) {
	dir := t.TempDir()
	dr, dw, dl := newDriver(t, dir), newDriver(t, dir), newDriver(t, dir)
	wBlocked, lBlocked := blockedHook(dw), blockedHook(dl)
	mustAcquire(t, dr, sharedReq("k", "early"))
	wctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	wGot := goAcquire(wctx, dw, newReq("k", "writer"))
	waitFor(t, wBlocked, "the writer to wait")
	lGot := goAcquire(testCtx(t), dl, sharedReq("k", "late"))
	waitFor(t, lBlocked, "the late reader to wait")
	cancel()
	if w := waitFor(t, wGot, "the writer to give up"); !errors.Is(w.err, context.Canceled) {
		t.Fatalf("cancelled writer = %v, want context.Canceled", w.err)
	}
	if l := waitFor(t, lGot, "the late reader to join"); l.err != nil {
		t.Fatal(l.err)
	}
}

// A waiter for a permit is woken by the permit given back, not by its
// fallback timer.
func TestPermitWaiterWakesPromptlyWhenAPermitIsGivenBack(t *testing.T) {
	dir := t.TempDir()
	d1, d2 := newDriver(t, dir), newDriver(t, dir)
	blocked := blockedHook(d2)
	ctx := testCtx(t)
	held := []*driver.Request{permitReq("sem", "a", 2), permitReq("sem", "b", 2)}
	for _, r := range held {
		mustAcquire(t, d1, r)
	}
	got := goAcquire(ctx, d2, permitReq("sem", "waiter", 2))
	waitFor(t, blocked, "the waiter to block")
	released := time.Now()
	if err := d1.Release(ctx, held[1]); err != nil {
		t.Fatal(err)
	}
	res := waitFor(t, got, "the waiter to take the permit")
	if res.err != nil {
		t.Fatal(res.err)
	}
	if lat := res.at.Sub(released); lat > promptWake {
		t.Fatalf("waiter took %v after the permit was given back, want under %v", lat, promptWake)
	} else {
		t.Logf("wake-up latency %v", lat)
	}
	if err := d1.Refresh(ctx, held[0]); err != nil {
		t.Fatalf("the other holder lost its permit: %v", err)
	}
}

// Cancelled waits for a shared lock (at the intent file, and at the lock file)
// and for a permit leave no descriptor or watch behind.
func TestCancelledSharedAndPermitAcquiresLeaveNoDescriptorOrWatch(t *testing.T) {
	dir := t.TempDir()
	d1, d2 := newDriver(t, dir), newDriver(t, dir)
	blocked := blockedHook(d2)
	if d2.watcher() == nil {
		t.Fatal("no inotify watcher")
	}
	ctx := testCtx(t)
	mustAcquire(t, d1, newReq("x", "writer")) // a reader waits at the lock file
	mustAcquire(t, d1, sharedReq("w", "reader"))
	for _, p := range []*driver.Request{permitReq("p", "a", 2), permitReq("p", "b", 2)} {
		mustAcquire(t, d1, p)
	}
	// A writer waits at "w", holding its intent file: a reader waits at it.
	wctx, wcancel := context.WithCancel(ctx)
	defer wcancel()
	dw := newDriver(t, dir)
	wBlocked := blockedHook(dw)
	wGot := goAcquire(wctx, dw, newReq("w", "writer"))
	waitFor(t, wBlocked, "the writer to wait")

	before := openFDs(t)
	for _, r := range []*driver.Request{sharedReq("x", "at-lock-file"), sharedReq("w", "at-intent-file"), permitReq("p", "permit", 2)} {
		cctx, cancel := context.WithCancel(ctx)
		got := goAcquire(cctx, d2, r)
		waitFor(t, blocked, r.Owner+" to wait")
		if n := d2.notify.w.watches(); n != 1 {
			t.Fatalf("%s: %d watches while waiting, want 1", r.Owner, n)
		}
		cancel()
		if res := waitFor(t, got, r.Owner+" to give up"); !errors.Is(res.err, context.Canceled) {
			t.Fatalf("%s: got %v, want context.Canceled", r.Owner, res.err)
		}
		if after := openFDs(t); after != before {
			t.Fatalf("%s: %d descriptors open after the cancelled Acquire, %d before", r.Owner, after, before)
		}
		if n := d2.notify.w.watches(); n != 0 {
			t.Fatalf("%s: %d watches left behind", r.Owner, n)
		}
	}
	wcancel()
	waitFor(t, wGot, "the writer to give up")
}

// A permit holder whose process is killed gives its permit back at once: the
// kernel closes its slot file.
func TestKilledPermitHolderProcessFreesItsPermitAtOnce(t *testing.T) {
	dir := t.TempDir()
	child, childToken := startHolder(t, dir, "sem", childPermitsEnv+"="+strconv.Itoa(2))
	d := newDriver(t, dir)
	blocked := blockedHook(d)
	ctx := testCtx(t)
	mine := permitReq("sem", "mine", 2)
	if tok := mustAcquire(t, d, mine); tok <= childToken {
		t.Fatalf("token %d after the child's %d", tok, childToken)
	}
	got := goAcquire(ctx, d, permitReq("sem", "waiter", 2))
	waitFor(t, blocked, "the waiter to block")
	killed := time.Now()
	child.kill(t)
	res := waitFor(t, got, "the waiter to take the killed holder's permit")
	if res.err != nil {
		t.Fatal(res.err)
	}
	if lat := res.at.Sub(killed); lat > promptWake {
		t.Fatalf("waiter took %v after the holder was killed, want under %v", lat, promptWake)
	} else {
		t.Logf("acquired %v after SIGKILL of the permit holder", lat)
	}
}
