// Command lockdash renders the dashboard picture of docs/OBSERVABILITY.md from
// a real run: a contended workload on a private Redis, instrumented with the
// OpenTelemetry SDK's ManualReader collected every second, with real faults
// injected during the run (the server frozen with SIGSTOP past the lock TTL,
// then restarted without its data). It draws what an operator's dashboard
// would: acquire latency p50/p99 (from the histogram's bucket deltas, as
// Prometheus' histogram_quantile does), acquisitions per second by outcome,
// locks held, and losses by cause.
//
//	go run ./cmd/lockdash -o ../docs/dashboard.png     (from bench/)
//
// It needs redis-server (scripts/install-backends). Every request goes to the
// Redis it started on 127.0.0.1, and the run stops by itself.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/distlock/lock"
	"github.com/distlock/lock/internal/testserver"
	_ "github.com/distlock/lock/redisdriver"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
)

// fault is one injected fault, drawn on the chart.
type fault struct {
	name       string
	start, end time.Duration // since the run's start
}

func main() {
	out := flag.String("o", "dashboard.png", "the PNG to write")
	dur := flag.Duration("d", 45*time.Second, "how long the workload runs")
	workers := flag.Int("workers", 12, "concurrent clients")
	keys := flag.Int("keys", 3, "distinct lock keys they contend for")
	flag.Parse()
	if err := run(*out, *dur, *workers, *keys); err != nil {
		fmt.Fprintln(os.Stderr, "lockdash:", err)
		os.Exit(1)
	}
}

const (
	ttl            = time.Second           // short, so a freeze of a few seconds outlives it
	hold           = 40 * time.Millisecond // the work done under the lock
	acquireTimeout = 2 * time.Second       // a caller's patience
	freezeFor      = 3 * time.Second       // past the TTL: held locks are lost by expiry
	callTimeout    = 2 * time.Second       // a release's
	pause          = 10 * time.Millisecond // between two calls of a client whose call failed
)

func run(out string, dur time.Duration, workers, keys int) error {
	srv, err := testserver.Launch("redis")
	if err != nil {
		return fmt.Errorf("start redis: %w (scripts/install-backends installs it)", err)
	}
	defer testserver.Shutdown()
	defer srv.Close()

	rd := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(rd))
	defer func() { _ = mp.Shutdown(context.Background()) }()
	ctx, cancel := context.WithTimeout(context.Background(), dur)
	defer cancel()
	lk, err := lock.Open(ctx, srv.URL(), lock.WithMeterProvider(mp), lock.WithTTL(ttl))
	if err != nil {
		return err
	}
	defer lk.Close()

	begin := time.Now()
	var wg sync.WaitGroup
	for i := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			work(ctx, lk, fmt.Sprintf("job-%d", i%keys))
		}()
	}

	// The faults: a freeze a quarter in, a restart without data at 60%.
	faults := []fault{
		{name: "SIGSTOP", start: dur / 4, end: dur/4 + freezeFor},
		{name: "restart", start: dur * 6 / 10},
	}
	faultErr := make(chan error, 1)
	go func() { faultErr <- inject(ctx, srv, begin, faults) }()

	var samples []sample
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	prev, err := collect(rd)
	if err != nil {
		return err
	}
	for ctx.Err() == nil {
		select {
		case <-ctx.Done():
		case now := <-tick.C:
			cur, err := collect(rd)
			if err != nil {
				return err
			}
			samples = append(samples, cur.since(prev, now.Sub(begin)))
			prev = cur
		}
	}
	wg.Wait()
	if err := <-faultErr; err != nil {
		return err
	}
	return render(out, samples, faults, workers, keys)
}

// work is one client: acquire, work, release, again, until ctx ends.
func work(ctx context.Context, lk *lock.Locker, key string) {
	for ctx.Err() == nil {
		actx, cancel := context.WithTimeout(ctx, acquireTimeout)
		l, err := lk.Acquire(actx, key)
		cancel()
		if err != nil {
			sleep(ctx, pause)
			continue
		}
		t := time.NewTimer(hold)
		select {
		case <-t.C:
		case <-l.Lost():
		case <-ctx.Done():
		}
		t.Stop()
		// Release until it is done: a release that cannot reach the server
		// leaves the lock held (and refreshed), and the loss ends it.
		for {
			rctx, cancel := context.WithTimeout(context.Background(), callTimeout)
			err := l.Release(rctx)
			cancel()
			if err == nil || errors.Is(err, lock.ErrNotHeld) || errors.Is(err, lock.ErrClosed) {
				break
			}
			select {
			case <-l.Lost():
			case <-time.After(pause):
				continue
			}
			break
		}
	}
}

// inject does the faults at their times; the run's context ends it.
func inject(ctx context.Context, srv *testserver.Server, begin time.Time, faults []fault) error {
	for _, f := range faults {
		if !sleep(ctx, time.Until(begin.Add(f.start))) {
			return nil
		}
		switch f.name {
		case "SIGSTOP":
			if err := srv.Pause(); err != nil {
				return err
			}
			sleep(context.Background(), f.end-f.start)
			if err := srv.Resume(); err != nil {
				return err
			}
		case "restart":
			if err := srv.Restart(false); err != nil {
				return err
			}
		}
	}
	return nil
}

// sleep waits d or until ctx ends; it reports whether d passed.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
