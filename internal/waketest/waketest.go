// Package waketest records the wake-ups a driver reports through driver.Woke,
// for the drivers' own tests and the conformance suite, which check the
// source of each wake-up a waiter reports (what the portable layer counts in
// its distlock.acquire.wakeups metric).
//
// It is imported by test code only; it depends on the driver package and the
// standard library, so a driver module that uses it needs no module beyond the
// root module it already requires.
package waketest

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/distlock/lock/driver"
)

// A Log keeps, in order, the wake-ups reported on the contexts it made. The
// zero Log is ready to use; it is safe for concurrent use.
type Log struct {
	mu    sync.Mutex
	wakes []driver.WakeSource
}

// Context returns a copy of ctx whose wake-ups (driver.Woke, called by the
// driver's Acquire made with it) l records.
func (l *Log) Context(ctx context.Context) context.Context {
	return driver.WithWakeReporter(ctx, l.Record)
}

// Record adds one wake-up of source s.
func (l *Log) Record(s driver.WakeSource) {
	l.mu.Lock()
	l.wakes = append(l.wakes, s)
	l.mu.Unlock()
}

// Wakes returns the wake-ups recorded so far, oldest first (a copy).
func (l *Log) Wakes() []driver.WakeSource {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]driver.WakeSource(nil), l.wakes...)
}

// Take returns the wake-ups recorded since the last Take, oldest first, and
// forgets them.
func (l *Log) Take() []driver.WakeSource {
	l.mu.Lock()
	defer l.mu.Unlock()
	w := l.wakes
	l.wakes = nil
	return w
}

// Only fails t unless at least one wake-up was recorded and every one of them
// is of source want; why says what makes another source wrong.
func (l *Log) Only(t testing.TB, want driver.WakeSource, why string) {
	t.Helper()
	w := l.Wakes()
	if len(w) == 0 {
		t.Errorf("no wake-up reported, want %v: %s", want, why)
		return
	}
	for _, s := range w {
		if s != want {
			t.Errorf("wake-ups %v, want only %v: %s", w, want, why)
			return
		}
	}
}

// CheckHolderTTLEndWakesByTimer checks, on an expiring backend whose lock
// ends by its TTL without any message to waiters, that the waiter is woken by
// its own timer: holderD takes key for holderTTL and never refreshes it,
// waiterD's Acquire (of a driver.Acquirer, with a TTL five times as long, at
// least a second) must get the lock, and every wake-up it reports must be the
// timer's. The waiter's lock is released before it returns.
func CheckHolderTTLEndWakesByTimer(t testing.TB, ctx context.Context, holderD, waiterD driver.Driver, key string, holderTTL time.Duration) {
	t.Helper()
	acq, ok := waiterD.(driver.Acquirer)
	if !ok {
		t.Fatalf("%T does not implement driver.Acquirer", waiterD)
	}
	holder := &driver.Request{Key: key, Owner: "holder", TTL: holderTTL, Lost: driver.LostFunc(func(error) {})}
	if _, err := holderD.TryAcquire(ctx, holder); err != nil {
		t.Fatalf("the holder's TryAcquire: %v", err)
	}
	var wakes Log
	waiter := &driver.Request{Key: key, Owner: "waiter", TTL: max(5*holderTTL, time.Second), Lost: driver.LostFunc(func(error) {})}
	if _, err := acq.Acquire(wakes.Context(ctx), waiter); err != nil {
		t.Fatalf("the waiter's Acquire: %v", err)
	}
	defer func() { _ = waiterD.Release(ctx, waiter) }()
	wakes.Only(t, driver.WakeTimer, "nothing notified the waiter")
}
