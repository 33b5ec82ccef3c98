package telemetrytest

import (
	"context"
	"testing"
	"time"

	"github.com/distlock/lock"
	"github.com/distlock/lock/driver"
	"github.com/distlock/lock/memdriver"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
)

// pollingOnly hides memdriver's Acquirer: the portable layer waits with its
// backoff, retrying TryAcquire.
type pollingOnly struct{ driver.Driver }

// Without a backend that can wake it, a waiter is retried by the portable
// layer's backoff, and each retry counts as a wake-up by timer; with
// WithKeyAttribute the points carry the key.
func TestBackoffRetriesCountAsTimerWakeups(t *testing.T) {
	rd := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(rd))
	defer func() { _ = mp.Shutdown(context.Background()) }()
	ctx := context.Background()
	holder := lock.New(memdriver.New(t.Name()))
	defer holder.Close()
	waiter := lock.New(pollingOnly{memdriver.New(t.Name())}, lock.WithMeterProvider(mp), lock.WithKeyAttribute(true),
		lock.WithBackoff(lock.Backoff{Min: time.Millisecond, Max: 5 * time.Millisecond}))
	defer waiter.Close()
	r := &rig{t: t, rd: rd}
	key := attribute.String("distlock.key", "k")
	timer := func() int64 {
		_, v := total(find(r.collect()["distlock.acquire.wakeups"], key, source("timer")))
		return v
	}

	l, err := holder.Acquire(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan error, 1)
	go func() {
		w, err := waiter.Acquire(ctx, "k")
		if err == nil {
			err = w.Release(ctx)
		}
		got <- err
	}()
	waitFor(t, "a retry of the waiter", func() bool { return timer() >= 2 })
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-got; err != nil {
		t.Fatal(err)
	}
	wakes := r.collect()["distlock.acquire.wakeups"]
	if n := len(find(wakes, source("notification"))); n != 0 {
		t.Errorf("acquire.wakeups has %d notification points, want none without a driver that can be woken: %v", n, wakes)
	}
	if len(find(wakes, key)) != len(wakes) {
		t.Errorf("acquire.wakeups points %v, want each with %v", wakes, key)
	}
}
