package redisdriver

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/distlock/lock"
	"github.com/distlock/lock/driver"
	"github.com/distlock/lock/internal/testserver"
)

// subscribedLocker opens a Locker whose driver has its pub/sub inbox running,
// as any driver that has waited once does.
func subscribedLocker(t *testing.T, ctx context.Context, url string, opts ...lock.Option) (*lock.Locker, *Driver) {
	t.Helper()
	d, err := openURL(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	if err := d.subscribe(ctx); err != nil {
		t.Fatal(err)
	}
	lk := lock.New(d, opts...)
	t.Cleanup(func() { _ = lk.Close() })
	return lk, d
}

// A server restarted empty forgets the locks; the holder learns it as soon as
// its pub/sub connection is back, long before its next refresh, and the next
// holder's token is still higher.
func TestRestartWithoutPersistenceLosesLocksAndKeepsTokensIncreasing(t *testing.T) {
	srv := testserver.StartRedis(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	lk, _ := subscribedLocker(t, ctx, srv.URL(), lock.WithTTL(30*time.Second)) // refresh every 10s
	l, err := lk.Acquire(ctx, "nightly")
	if err != nil {
		t.Fatal(err)
	}
	before := l.Token()
	if err := srv.Restart(false); err != nil {
		t.Fatal(err)
	}
	select {
	case <-l.Lost():
	case <-time.After(5 * time.Second):
		t.Fatal("Lost() still open 5s after the server restarted empty")
	}
	if err := l.Release(ctx); !errors.Is(err, lock.ErrLost) {
		t.Errorf("Release after the restart = %v, want ErrLost", err)
	}
	l2, err := lk.Acquire(ctx, "nightly")
	if err != nil {
		t.Fatal(err)
	}
	if after := l2.Token(); after <= before {
		t.Errorf("token %d after the restart, not above %d before it", after, before)
	}
	_ = l2.Release(ctx)
}

// A server restarted with its data still holds the lock key, but it is not the
// server that granted the lock (its run_id changed): the lock counts as lost,
// Do's function is cancelled with ErrServerChanged as the cause, and the key is
// released on the new server so nobody waits for it.
func TestRestartKeepingDataCountsAsLost(t *testing.T) {
	srv := testserver.StartRedis(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	lk, _ := subscribedLocker(t, ctx, srv.URL(), lock.WithTTL(30*time.Second))
	other, _ := subscribedLocker(t, ctx, srv.URL())

	cause := make(chan error, 1)
	started := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- lk.Do(ctx, "payroll", func(ctx context.Context) error {
			close(started)
			<-ctx.Done()
			cause <- context.Cause(ctx)
			return nil
		})
	}()
	<-started
	if err := srv.Restart(true); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-cause:
		if !errors.Is(err, ErrServerChanged) {
			t.Errorf("fn's context ended with %v, want ErrServerChanged", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("fn still running 5s after the server restarted")
	}
	if err := <-done; !errors.Is(err, lock.ErrLost) {
		t.Errorf("Do = %v, want ErrLost", err)
	}
	l, err := other.TryAcquire(ctx, "payroll")
	if err != nil {
		t.Fatalf("TryAcquire after the lost lock was released on the new server: %v", err)
	}
	_ = l.Release(ctx)
}

// Without a pub/sub connection to tell it (the user may not SUBSCRIBE), the
// next refresh finds the changed run_id.
func TestRefreshReportsAServerThatChanged(t *testing.T) {
	srv := testserver.StartRedis(t, "--user", "nosub", "on", ">pw", "~*", "&*", "+@all", "-subscribe")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	d, err := openURL(ctx, strings.Replace(srv.URL(), "redis://", "redis://nosub:pw@", 1))
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	req := &driver.Request{Key: "k", Owner: "owner-1", TTL: time.Minute, Lost: driver.LostFunc(func(error) {})}
	if _, err := d.TryAcquire(ctx, req); err != nil {
		t.Fatal(err)
	}
	if err := d.Refresh(ctx, req); err != nil {
		t.Fatalf("Refresh before the restart: %v", err)
	}
	if err := srv.Restart(true); err != nil {
		t.Fatal(err)
	}
	err = d.Refresh(ctx, req)
	if !errors.Is(err, driver.ErrNotHeld) || !errors.Is(err, ErrServerChanged) {
		t.Fatalf("Refresh after a restart = %v, want ErrNotHeld and ErrServerChanged", err)
	}
	// A lock taken on the new server is fine.
	req2 := &driver.Request{Key: "k", Owner: "owner-2", TTL: time.Minute, Lost: driver.LostFunc(func(error) {})}
	if _, err := d.TryAcquire(ctx, req2); err != nil {
		t.Fatal(err)
	}
	if err := d.Refresh(ctx, req2); err != nil {
		t.Fatalf("Refresh of a lock taken after the restart: %v", err)
	}
}

// A lock taken after a restart is the new server's: its refreshes succeed,
// although the driver had cached the old server's run_id (it used to report
// such a lock lost, "server changed", at its first refresh). A lock taken
// before the restart is still reported: lost when its key went with the
// data, server changed when the key survived.
func TestLockTakenAfterARestartIsNotReportedLost(t *testing.T) {
	for _, keepData := range []bool{false, true} {
		t.Run(fmt.Sprintf("keepData=%v", keepData), func(t *testing.T) {
			srv := testserver.StartRedis(t)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			d, err := openURL(ctx, srv.URL())
			if err != nil {
				t.Fatal(err)
			}
			defer d.Close()
			before, beforeLost := recordedRequest("before", "owner-1", time.Minute)
			if _, err := d.TryAcquire(ctx, before); err != nil {
				t.Fatal(err)
			}
			if err := d.Refresh(ctx, before); err != nil {
				t.Fatalf("Refresh before the restart: %v", err)
			}
			if err := srv.Restart(keepData); err != nil {
				t.Fatal(err)
			}
			after, afterLost := recordedRequest("after", "owner-2", time.Minute)
			if _, err := d.TryAcquire(ctx, after); err != nil {
				t.Fatal(err)
			}
			for i := range 2 {
				if err := d.Refresh(ctx, after); err != nil {
					t.Fatalf("Refresh %d of a lock taken after the restart: %v", i+1, err)
				}
			}
			// The driver's subscription may have reported it already, in
			// which case the refresh finds it not held.
			err = d.Refresh(ctx, before)
			if !errors.Is(err, driver.ErrNotHeld) {
				t.Fatalf("Refresh of a lock taken before the restart = %v, want ErrNotHeld", err)
			}
			if keepData && !errors.Is(err, ErrServerChanged) {
				select {
				case err = <-beforeLost:
				case <-ctx.Done():
				}
				if !errors.Is(err, ErrServerChanged) {
					t.Fatalf("a lock taken before a restart that kept it was reported lost with %v, want ErrServerChanged", err)
				}
			}
			select {
			case err := <-afterLost:
				t.Fatalf("the lock taken after the restart was reported lost: %v", err)
			default:
			}
			// The same through Acquire, whose grant comes by a handoff or a
			// first try.
			if err := srv.Restart(keepData); err != nil {
				t.Fatal(err)
			}
			waited := &driver.Request{Key: "waited", Owner: "owner-3", TTL: time.Minute, Lost: driver.LostFunc(func(error) {})}
			if _, err := d.Acquire(ctx, waited); err != nil {
				t.Fatal(err)
			}
			if err := d.Refresh(ctx, waited); err != nil {
				t.Fatalf("Refresh of a lock acquired after the second restart: %v", err)
			}
		})
	}
}

// recordedRequest is a request whose Lost reports go to the returned channel
// (the first one; later ones are dropped).
func recordedRequest(key, owner string, ttl time.Duration) (*driver.Request, <-chan error) {
	lost := make(chan error, 1)
	return &driver.Request{Key: key, Owner: owner, TTL: ttl, Lost: driver.LostFunc(func(err error) {
		select {
		case lost <- err:
		default:
		}
	})}, lost
}

// Shared holds and permits are lost as the mutex is when the server restarts
// (empty, or keeping its data but with a new run_id): Lost() closes as soon as
// the pub/sub connection is back, and holds found on the new server are
// released there, so that a writer and the semaphore's next holders get in.
func TestRestartLosesSharedHoldsAndPermitsAsItDoesLocks(t *testing.T) {
	srv := testserver.StartRedis(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	lk, _ := subscribedLocker(t, ctx, srv.URL(), lock.WithTTL(30*time.Second)) // refresh every 10s
	other, _ := subscribedLocker(t, ctx, srv.URL())
	sem := lock.WithPermits(2)
	for _, keep := range []bool{false, true} {
		var held []*lock.Lock
		for _, h := range []struct {
			key string
			opt lock.Option
		}{{"report", lock.WithShared(true)}, {"slots", sem}, {"slots", sem}} {
			l, err := lk.TryAcquire(ctx, h.key, h.opt)
			if err != nil {
				t.Fatal(err)
			}
			held = append(held, l)
		}
		if err := srv.Restart(keep); err != nil {
			t.Fatal(err)
		}
		for i, l := range held {
			select {
			case <-l.Lost():
			case <-time.After(5 * time.Second):
				t.Fatalf("restart keeping data=%v: Lost() of hold %d still open 5s after the restart", keep, i)
			}
		}
		// TryAcquire: the holds must be gone already, not waited out.
		w, err := other.TryAcquire(ctx, "report")
		if err != nil {
			t.Fatalf("restart keeping data=%v: writer after the readers were lost: %v", keep, err)
		}
		next := []*lock.Lock{w}
		for i := 0; i < 2; i++ {
			l, err := other.TryAcquire(ctx, "slots", sem)
			if err != nil {
				t.Fatalf("restart keeping data=%v: permit %d after the holders were lost: %v", keep, i+1, err)
			}
			next = append(next, l)
		}
		for _, l := range next {
			if err := l.Release(ctx); err != nil {
				t.Fatal(err)
			}
		}
	}
}
